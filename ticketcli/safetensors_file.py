"""A safetensors file read without trusting it: the header is parsed and checked with size limits before any
tensor byte is read (every entry's dtype, shape and byte range agree and tile the body), then tensor bytes are read
a bounded chunk at a time. ticket.py adds what makes such a file a ticket."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ticketcli.errors import TicketFileError
from ticketcli.ticket_meta import MAX_DIMS, DuplicateKey, TooManyDigits, json_error, strict_json

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


def read_header(f: BinaryIO, size: int, path: Path) -> tuple[dict, int]:
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
        header = strict_json(f.read(n))
    except DuplicateKey as e:
        raise TicketFileError(f"{path}: key {str(e)[:80]!r} appears twice in the safetensors header") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = json_error(e) if isinstance(e, (TooManyDigits, RecursionError)) else "is not JSON"
        raise TicketFileError(f"{path}: not a safetensors file (header {reason})") from None
    if not isinstance(header, dict):
        raise TicketFileError(f"{path}: not a safetensors file (header is not an object)")
    check_layout(header, size - 8 - n, path)
    return header, 8 + n


def check_layout(header: dict, body: int, path: Path) -> None:
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
