"""The Ticket (masks + provenance) and its safetensors format v1: pack, save (atomic), load and validate.

Reading never trusts a declared size: the header is parsed and checked first (ticket_meta checks the metadata),
then each mask's bytes are read by offset, a chunk at a time."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from safetensors.torch import save as st_save

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.ticket_meta import (
    HEX64,
    MAX_DIMS,
    DuplicateKey,
    TooManyDigits,
    check_fields,
    json_error,
    json_field,
    strict_json,
)

FORMAT = "ticket"
FORMAT_VERSION = "1"
MAX_FILE_BYTES = 1 << 30  # a ticket of 8e9 weights; anything bigger is not a ticket
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
REQUIRED = ("model", "init", "shapes", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by")
ENTRY_KEYS = {"dtype", "shape", "data_offsets"}  # a safetensors tensor entry: exactly these (type(d) is int: no bools)
CHUNK_BYTES = 1 << 20  # masks are read (and counted) at most this many bytes at a time
INTEGRITY = ("ok", "modified", "not recorded")  # masks_sha256 vs the masks read back; "not recorded": older file


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Row-major flattened bool mask -> uint8, 8 per byte, first element in the MSB, padding bits zero."""
    bits = mask.detach().reshape(-1).to("cpu", torch.bool).numpy()
    return torch.from_numpy(np.packbits(bits, bitorder="big"))


def unpack_bits(packed: torch.Tensor, shape: tuple[int, ...], what: str = "mask") -> torch.Tensor:
    """Inverse of pack_bits; rejects wrong byte lengths and set padding bits."""
    n = math.prod(shape)
    data = packed.numpy()
    if data.ndim != 1 or data.size != (n + 7) // 8:
        raise TicketFileError(
            f"{what}: {data.size} bytes do not hold a mask of shape {tuple(shape)} (needs {(n + 7) // 8})"
        )
    bits = np.unpackbits(data, bitorder="big")
    if bits[n:].any():
        raise TicketFileError(f"{what}: padding bits are set (corrupt mask)")
    return torch.from_numpy(bits[:n].astype(bool)).reshape(shape)


@dataclass
class Ticket:
    masks: dict[str, torch.Tensor]  # param name -> bool mask, in the model's named_parameters() order
    model: dict[str, Any]  # ModelSpec.to_dict()
    init: dict[str, Any]  # scheme, k, gain, seed
    weights_sha256: str
    method: dict[str, Any]  # name + every hyper-parameter
    data: dict[str, Any]  # dataset, split sizes, split seed
    sparsity: dict[str, Any]  # requested, achieved, per layer
    metrics: dict[str, Any]  # test/val accuracy and loss at extraction
    created_by: dict[str, Any]
    checkpoint: dict[str, Any] | None = None  # path + sha256 when the weights came from a file
    shapes: dict[str, list[int]] = field(default_factory=dict)
    masks_sha256: str | None = None  # as read from a file (saving always records the masks' own digest)
    integrity: str = "ok"  # as read: INTEGRITY's "ok", "modified" or "not recorded"

    def __post_init__(self):
        if not self.shapes:
            self.shapes = {n: list(m.shape) for n, m in self.masks.items()}

    def packed(self) -> dict[str, torch.Tensor]:
        """The safetensors tensors: `mask/<name>` -> packed uint8."""
        return {f"mask/{n}": pack_bits(m) for n, m in self.masks.items()}

    def metadata(self, packed: dict[str, torch.Tensor] | None = None) -> dict[str, str]:
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION}
        for key in REQUIRED:
            value = getattr(self, key)
            # insertion order is kept (shapes and masks stay in named_parameters() order)
            meta[key] = value if isinstance(value, str) else json.dumps(value)
        if self.checkpoint is not None:
            meta["checkpoint"] = json.dumps(self.checkpoint)
        meta["masks_sha256"] = masks_sha256(self.packed() if packed is None else packed)
        return meta

    def to_bytes(self) -> bytes:
        tensors = self.packed()
        return st_save(tensors, metadata=self.metadata(tensors))


def masks_sha256(packed: dict[str, torch.Tensor]) -> str:
    """The digest a ticket records: sha256 over, for each mask tensor in sorted key order, the UTF-8 key
    (`mask/layers.0.weight`), one NUL byte, then its packed bytes."""
    digest = hashlib.sha256()
    for key in sorted(packed):
        digest.update(key.encode() + b"\0")
        digest.update(packed[key].numpy().tobytes())
    return digest.hexdigest()


def check_destination(path: str | Path, *, overwrite: bool = False) -> None:
    """Refuse a path a ticket cannot be written to (callers check before long work, write_atomic checks again).

    Only regular files are ever replaced, and only with `overwrite` (--force): a FIFO, a device (/dev/null), a
    socket or a directory is refused even then, also behind a symlink. A symlink to a regular file is replaced
    by the new file (the link, not its target: the rename never writes through it)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    try:
        mode = path.stat().st_mode  # follows a symlink: what a write to this name would reach
    except FileNotFoundError:
        mode = None  # absent, or a dangling symlink
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {path}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(
            f"cannot write {path}: it is {_file_kind(mode)}, not a regular file (even --force only "
            "replaces regular files)",
            hint="choose another path",
        )
    if os.path.lexists(path) and not overwrite:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def save(ticket: Ticket, path: str | Path, *, overwrite: bool = False) -> int:
    """Write atomically (temp file in the same directory, fsync, rename); returns the file size."""
    return write_atomic(path, ticket.to_bytes(), overwrite=overwrite)


def write_atomic(path: str | Path, payload: bytes, *, overwrite: bool = False) -> int:
    """Write bytes atomically (temp file in the same directory, fsync, rename), world-readable as umask allows."""
    path = Path(path)
    check_destination(path, overwrite=overwrite)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; a ticket is meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:  # an interrupt at any point unlinks the temp file: readers see old or complete new
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return len(payload)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _read_header(f: BinaryIO, size: int, path: Path) -> tuple[dict, int]:
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
    _check_layout(header, size - 8 - n, path)
    return header, 8 + n


def _check_layout(header: dict, body: int, path: Path) -> None:
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


@dataclass
class _Layout:
    """A ticket file whose header and metadata passed every check: its fields, and where each mask's bytes lie."""

    fields: dict[str, Any]  # Ticket(**fields) once masks are added
    spans: dict[str, tuple[int, int]]  # param name -> [begin, end) file offsets of its packed bytes
    recorded: str | None  # masks_sha256 from the metadata (None in tickets written before it existed)


def _open(path: Path) -> tuple[BinaryIO, int]:
    if not path.exists():
        raise TicketFileError(f"{path}: no such file")
    if not path.is_file():
        raise TicketFileError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise TicketFileError(f"{path}: {size} bytes is too large for a ticket file")
    try:
        return open(path, "rb"), size
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror})") from None


def _layout(f: BinaryIO, size: int, path: Path) -> _Layout:
    """Everything that can be checked from the header alone: format, metadata fields, and that the mask tensors
    are exactly those of `shapes`, each 1-D uint8 of ceil(n/8) bytes."""
    header, body = _read_header(f, size, path)
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TicketFileError(f"{path}: a safetensors file, but not a ticket (no format=ticket metadata)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise TicketFileError(
            f"{path}: ticket format_version {str(meta.get('format_version'))[:20]!r} is not "
            f"supported (this ticketcli reads version {FORMAT_VERSION})"
        )
    if not all(isinstance(v, str) for v in meta.values()):
        raise TicketFileError(f"{path}: metadata values must be strings")
    fields = {key: json_field(meta, key, dict, path) for key in REQUIRED if key != "weights_sha256"}
    sha = meta.get("weights_sha256")
    if not isinstance(sha, str) or not HEX64.fullmatch(sha):
        raise TicketFileError(f"{path}: metadata field 'weights_sha256' is missing or not a sha256 hex digest")
    recorded = meta.get("masks_sha256")
    if recorded is not None and not HEX64.fullmatch(recorded):
        raise TicketFileError(f"{path}: metadata field 'masks_sha256' is not a sha256 hex digest")
    checkpoint = json_field(meta, "checkpoint", dict, path) if "checkpoint" in meta else None
    check_fields(fields, checkpoint, path)

    shapes = fields["shapes"]
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    expected = {f"mask/{n}" for n in shapes}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise TicketFileError(
            f"{path}: mask tensors do not match 'shapes' (missing {_few(missing)}, unexpected {_few(extra)})"
        )
    spans = {}
    for name, shape in shapes.items():
        t, n = tensors[f"mask/{name}"], math.prod(shape)
        if n > 8 * MAX_FILE_BYTES:
            raise TicketFileError(f"{path}: metadata 'shapes[{name[:80]}]' is impossibly large")
        if t["dtype"] != "U8" or len(t["shape"]) != 1:
            raise TicketFileError(f"{path}: mask/{name} must be a 1-D uint8 tensor, found {t['dtype']} {t['shape']}")
        if t["shape"][0] != (n + 7) // 8:
            raise TicketFileError(
                f"{path}: mask/{name}: {t['shape'][0]} bytes do not hold a mask of shape "
                f"{tuple(shape)} (needs {(n + 7) // 8})"
            )
        begin, end = t["data_offsets"]
        spans[name] = (body + begin, body + end)
    return _Layout({**fields, "weights_sha256": sha, "checkpoint": checkpoint}, spans, recorded)


def _few(names: list[str], n: int = 5) -> str:
    """A list for an error line: the first n names and how many more."""
    shown = ", ".join(repr(x[:80]) for x in names[:n])
    return f"[{shown}{f', ... {len(names) - n} more' if len(names) > n else ''}]"


def _chunks(f: BinaryIO, begin: int, end: int) -> Iterator[bytes]:
    """The bytes [begin, end) of the file in pieces of at most CHUNK_BYTES."""
    if f.tell() != begin:
        f.seek(begin)
    while begin < end:
        piece = f.read(min(CHUNK_BYTES, end - begin))
        if not piece:
            raise OSError("file shrank while being read")
        begin += len(piece)
        yield piece


def _padding_clear(last: int, n: int) -> bool:
    """Whether the unused low bits of a mask's last packed byte are zero (n elements)."""
    return n % 8 == 0 or last & ((1 << (8 - n % 8)) - 1) == 0


def _walk(f: BinaryIO, layout: _Layout, path: Path, take: Callable[[str, Iterable[bytes]], int]) -> str:
    """Feed every mask's packed bytes to take(name, pieces) in sorted key order (the digest's order); take
    returns the mask's last byte for the padding check. Returns the masks' sha256 (see masks_sha256)."""
    digest, shapes = hashlib.sha256(), layout.fields["shapes"]

    def pieces(begin: int, end: int) -> Iterator[bytes]:
        for piece in _chunks(f, begin, end):
            digest.update(piece)
            yield piece

    for name in sorted(layout.spans):
        key = f"mask/{name}"
        digest.update(key.encode() + b"\0")
        begin, end = layout.spans[name]
        if end - begin <= CHUNK_BYTES:  # one read: no generator per mask (100k tiny masks must stay cheap)
            if f.tell() != begin:
                f.seek(begin)
            piece = f.read(end - begin)
            if len(piece) != end - begin:
                raise OSError("file shrank while being read")
            digest.update(piece)
            last = take(name, (piece,))
        else:
            last = take(name, pieces(begin, end))
        if not _padding_clear(last, math.prod(shapes[name])):
            raise TicketFileError(f"{path}: {key}: padding bits are set (corrupt mask)")
    return digest.hexdigest()


def _integrity(recorded: str | None, computed: str) -> str:
    return "not recorded" if recorded is None else "ok" if recorded == computed else "modified"


def _read(path: Path, take: Callable[[str, Iterable[bytes]], int]) -> Ticket:
    """Open, validate and walk a ticket (see _walk), feeding each mask's packed bytes to take; returns the Ticket
    without masks. An unreadable file is one TicketFileError line."""
    f, size = _open(path)
    try:
        with f:
            layout = _layout(f, size, path)
            computed = _walk(f, layout, path, take)
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror or e})") from None
    return Ticket(
        masks={}, **layout.fields, masks_sha256=layout.recorded, integrity=_integrity(layout.recorded, computed)
    )


def load(path: str | Path) -> Ticket:
    """Read and fully validate a ticket file and unpack its masks; every problem is a TicketFileError with one
    line. A mask digest that differs from the recorded one is not refused here: Ticket.integrity says it, and
    readers that use the masks call require_intact."""
    path = Path(path)
    packed_masks: dict[str, np.ndarray] = {}

    def keep(name: str, pieces: Iterable[bytes]) -> int:
        packed = packed_masks[name] = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        return int(packed[-1]) if packed.size else 0

    tk = _read(path, keep)
    for name, shape in tk.shapes.items():  # named_parameters() order, as written
        bits = np.unpackbits(packed_masks.pop(name), count=math.prod(shape), bitorder="big")  # 0/1: a bool view
        tk.masks[name] = torch.from_numpy(bits.view(np.bool_)).reshape(shape)
    return tk


@dataclass
class Scan:
    """A ticket read without unpacking its masks (inspect, --match-sparsity): ticket.masks is empty."""

    ticket: Ticket
    counts: dict[str, tuple[int, int]]  # param name -> (kept, total), in the ticket's order


def scan(path: str | Path) -> Scan:
    """Validate a ticket like load() and count each mask's kept bits straight from the packed bytes, a chunk at a
    time: memory stays a few MiB whatever the file's size, and no torch op runs per mask."""
    path = Path(path)
    kept: dict[str, int] = {}

    def count(name: str, pieces: Iterable[bytes]) -> int:
        total, last = 0, 0
        for piece in pieces:
            total += _popcount(piece)
            last = piece[-1] if piece else last
        kept[name] = total
        return last

    tk = _read(path, count)
    return Scan(tk, {n: (kept[n], math.prod(shape)) for n, shape in tk.shapes.items()})


_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)  # set bits per byte value
SMALL_BYTES = 4096  # below this, Python's int.bit_count beats numpy's per-call overhead


def _popcount(piece: bytes) -> int:
    """Set bits in a piece of packed mask (numpy >= 2 counts them itself; older numpy uses the 256-entry table)."""
    if len(piece) <= SMALL_BYTES:
        return int.from_bytes(piece, "big").bit_count()
    data = np.frombuffer(piece, dtype=np.uint8)
    per_byte = np.bitwise_count(data) if hasattr(np, "bitwise_count") else _BITS[data]
    return int(per_byte.sum(dtype=np.int64))


def require_intact(tk: Ticket, path: str | Path) -> None:
    """Refuse a ticket whose masks differ from the digest recorded when it was written."""
    if tk.integrity == "modified":
        raise TicketFileError(
            f"{path}: masks were modified after the ticket was written (masks_sha256 differs)",
            hint="the file was edited or damaged; ask for the original ticket",
        )
