"""A safetensors file read without trusting it: the header is parsed and checked with size limits before any
tensor byte is read (every entry's dtype, shape and byte range agree and tile the body), then tensor bytes are read
a bounded chunk at a time. ticket.py adds what makes such a file a ticket."""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.files.bounded import shown_path
from ticketcli.files.nesting import TooDeep, check_depth
from ticketcli.ticketfile.meta import (
    MAX_DEPTH,
    MAX_DIMS,
    DuplicateKey,
    TooManyDigits,
    bounded_int,
    json_error,
    unique_keys,
)

MAX_HEADER_BYTES = 1 << 24  # a ticket's JSON header is a few KiB (safetensors itself allows 100 MB)
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}  # safetensors dtypes -> item size
ENTRY_KEYS = {"dtype", "shape", "data_offsets"}  # a safetensors tensor entry: exactly these (type(d) is int: no bools)
CHUNK_BYTES = 1 << 20  # masks are read (and counted) at most this many bytes at a time
USIZE = 1 << 64  # safetensors reads shapes and offsets as 64-bit unsigned integers, the element count too


class NotInHeader(ValueError):
    """A JSON value a safetensors header cannot hold (a float, NaN, a negative integer)."""


def _header_int(text: str) -> int:
    if text.startswith("-"):
        raise NotInHeader("a negative integer")
    return bounded_int(text)


def _no_float(text: str) -> float:
    raise NotInHeader("a non-integer number")


def header_json(raw: bytes) -> object:
    """Parse a safetensors header as the safetensors library does, or stricter: UTF-8 only (no byte-order mark,
    no UTF-16), integers only as non-negative whole numbers, no lone surrogates; and, beyond the library, no
    duplicated keys, no integer of more than MAX_INT_DIGITS digits and nothing nested more than MAX_DEPTH deep.
    Raises ValueError."""
    text = raw.decode("utf-8")  # UnicodeDecodeError (a ValueError) for anything else; json.loads would guess
    if text.startswith("\ufeff"):
        raise NotInHeader("a byte-order mark")
    check_depth(text, MAX_DEPTH)  # a real header nests 3 deep; json.loads's own limit varies between processes
    value = json.loads(text, object_pairs_hook=unique_keys, parse_int=_header_int, parse_float=_no_float)
    stack = [value]
    while stack:  # a \ud800 escape decodes to a lone surrogate, which is no UTF-8 text (safetensors refuses it)
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise NotInHeader("a lone surrogate") from None
    return value


def read_header(f: BinaryIO, size: int, path: Path) -> tuple[dict[str, Any], int]:
    """Parse and check the safetensors header ourselves, with size limits, before any tensor byte is read:
    every tensor's declared dtype, shape and byte range must agree and tile the body exactly, so nothing is ever
    allocated for a declared size the file does not hold. Returns the header and the body's file offset."""
    if size < 8:
        raise TicketFileError(f"{path}: not a safetensors file (only {size} bytes)")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8:
        raise TicketFileError(f"{path}: not a safetensors file (header length {n} exceeds the file)")
    if n > MAX_HEADER_BYTES:
        raise TicketFileError(f"{path}: header of {n} bytes is too large for a ticket (limit {MAX_HEADER_BYTES})")
    try:
        header = header_json(f.read(n))
    except DuplicateKey as e:
        raise TicketFileError(f"{path}: key {str(e)[:80]!r} appears twice in the safetensors header") from None
    except UnicodeDecodeError:
        raise TicketFileError(f"{path}: not a safetensors file (header is not UTF-8)") from None
    except NotInHeader as e:
        raise TicketFileError(f"{path}: not a safetensors file (header holds {e})") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        reason = json_error(e) if isinstance(e, (TooManyDigits, TooDeep, RecursionError)) else "is not JSON"
        raise TicketFileError(f"{path}: not a safetensors file (header {reason})") from None
    if not isinstance(header, dict):
        raise TicketFileError(f"{path}: not a safetensors file (header is not an object)")
    meta = header.get("__metadata__")
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
        raise TicketFileError(f"{path}: not a safetensors file (__metadata__ must map names to strings)")
    check_layout(header, size - 8 - n, path)
    return header, 8 + n


def check_layout(header: dict[str, Any], body: int, path: Path) -> None:
    """Each tensor entry: a known dtype, a shape of non-negative ints, and a byte range inside the body whose
    length is exactly prod(shape) * itemsize (Python ints: no overflow); the ranges tile the body."""
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {str(name)[:80]!r}"
        if not isinstance(entry, dict) or entry.keys() != ENTRY_KEYS:
            raise TicketFileError(f"{where} needs exactly dtype, shape and data_offsets in the header")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_BYTES:
            raise TicketFileError(f"{where} has unknown dtype {str(dtype)[:20]!r}")
        if not (isinstance(shape, list) and len(shape) <= MAX_DIMS and all(type(d) is int and d >= 0 for d in shape)):
            raise TicketFileError(f"{where}: shape must be a list of at most {MAX_DIMS} non-negative integers")
        if _overflows(shape + [8 * DTYPE_BYTES[dtype]]):  # safetensors counts bits
            raise TicketFileError(f"{where}: shape {str(shape)[:80]} overflows a 64-bit bit count")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and type(offsets[0]) is int
            and type(offsets[1]) is int
            and 0 <= offsets[0] <= offsets[1] <= body
        ):
            raise TicketFileError(f"{where}: data_offsets must be [begin, end] inside the {body}-byte body")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise TicketFileError(
                f"{where}: shape {shape} of {dtype} does not match its {offsets[1] - offsets[0]} bytes"
            )
        ranges.append(offsets)
    end = 0
    for begin, stop in sorted(ranges):
        if begin != end:
            raise TicketFileError(f"{path}: tensor data overlaps or leaves a gap at byte {end}")
        end = stop
    if end != body:
        raise TicketFileError(f"{path}: {body - end} bytes after the last tensor")


def _overflows(dims: list[int]) -> bool:
    """The element count (and byte size) multiplied out left to right as safetensors does, in 64 bits: a product
    that leaves them on the way is refused, even if a later zero would bring it back."""
    product = 1
    for d in dims:
        if d >= USIZE:
            return True
        product *= d
        if product >= USIZE:
            return True
    return False


def chunks(f: BinaryIO, begin: int, end: int) -> Iterator[bytes]:
    """The bytes [begin, end) of the file in pieces of at most CHUNK_BYTES."""
    if f.tell() != begin:
        f.seek(begin)
    while begin < end:
        piece = f.read(min(CHUNK_BYTES, end - begin))
        if not piece:
            raise OSError("file shrank while being read")
        begin += len(piece)
        yield piece


_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)  # set bits per byte value
SMALL_BYTES = 4096  # below this, Python's int.bit_count beats numpy's per-call overhead


def popcount(piece: bytes) -> int:
    """Set bits in a piece of packed mask (numpy >= 2 counts them itself; older numpy uses the 256-entry table)."""
    if len(piece) <= SMALL_BYTES:
        return int.from_bytes(piece, "big").bit_count()
    data = np.frombuffer(piece, dtype=np.uint8)
    per_byte = np.bitwise_count(data) if hasattr(np, "bitwise_count") else _BITS[data]
    return int(per_byte.sum(dtype=np.int64))


def popcount_and(a: bytes, b: bytes) -> int:
    """Bits set in both of two equally long pieces of packed mask (a mask's entries kept by both tickets), counted
    over the packed bytes: nothing is unpacked."""
    if len(a) != len(b):
        raise ValueError(f"pieces of {len(a)} and {len(b)} bytes")
    if len(a) <= SMALL_BYTES:
        return (int.from_bytes(a, "big") & int.from_bytes(b, "big")).bit_count()
    both = np.bitwise_and(np.frombuffer(a, dtype=np.uint8), np.frombuffer(b, dtype=np.uint8))
    per_byte = np.bitwise_count(both) if hasattr(np, "bitwise_count") else _BITS[both]
    return int(per_byte.sum(dtype=np.int64))


SAFETENSORS_SUFFIX = ".safetensors"


def check_safetensors_name(path: str | Path, what: str, hint: str) -> None:
    """A file this package writes as safetensors (a ticket, train-weak's weights) must be named `.safetensors`:
    `ticket export` reads the extension to choose a format (anything else is a torch.save file), and a loader
    picks its reader by it too, so safetensors under a `.pt` name would be read as the wrong format."""
    if Path(path).suffix != SAFETENSORS_SUFFIX:
        raise UsageError(
            f"{shown_path(str(path))}: {what} is written as safetensors, so its name must end in {SAFETENSORS_SUFFIX}",
            hint=hint,
        )
