"""The Ticket (masks + provenance) and its safetensors format v1: pack, save (atomic), load and validate."""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ticketcli.errors import TicketFileError, UsageError

FORMAT = "ticket"
FORMAT_VERSION = "1"
MAX_FILE_BYTES = 1 << 30  # a ticket of 8e9 weights; anything bigger is not a ticket
MAX_HEADER_BYTES = 1 << 24  # a ticket's JSON header is a few KiB (safetensors itself allows 100 MB)
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}  # safetensors dtypes -> item size
REQUIRED = ("model", "init", "shapes", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by")


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Row-major flattened bool mask -> uint8, 8 per byte, first element in the MSB, padding bits zero."""
    bits = mask.detach().reshape(-1).to("cpu", torch.bool).numpy()
    return torch.from_numpy(np.packbits(bits, bitorder="big"))


def unpack_bits(packed: torch.Tensor, shape: tuple[int, ...], what: str = "mask") -> torch.Tensor:
    """Inverse of pack_bits; rejects wrong byte lengths and set padding bits."""
    n = math.prod(shape)
    data = packed.numpy()
    if data.ndim != 1 or data.size != (n + 7) // 8:
        raise TicketFileError(f"{what}: {data.size} bytes do not hold a mask of shape {tuple(shape)} "
                              f"(needs {(n + 7) // 8})")
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

    def __post_init__(self):
        if not self.shapes:
            self.shapes = {n: list(m.shape) for n, m in self.masks.items()}

    def metadata(self) -> dict[str, str]:
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION}
        for key in REQUIRED:
            value = getattr(self, key)
            # insertion order is kept (shapes and masks stay in named_parameters() order)
            meta[key] = value if isinstance(value, str) else json.dumps(value)
        if self.checkpoint is not None:
            meta["checkpoint"] = json.dumps(self.checkpoint)
        return meta

    def to_bytes(self) -> bytes:
        tensors = {f"mask/{n}": pack_bits(m) for n, m in self.masks.items()}
        return st_save(tensors, metadata=self.metadata())


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
        raise UsageError(f"cannot write {path}: it is {_file_kind(mode)}, not a regular file (even --force only "
                         "replaces regular files)", hint="choose another path")
    if os.path.lexists(path) and not overwrite:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
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


def _json_field(meta: dict[str, str], key: str, kind: type, path: Path) -> Any:
    if key not in meta:
        raise TicketFileError(f"{path}: metadata field {key!r} is missing")
    try:
        value = _strict_json(meta[key])
    except _DuplicateKey as e:
        raise TicketFileError(f"{path}: metadata field {key!r} has the key {str(e)[:80]!r} twice") from None
    except (json.JSONDecodeError, TypeError, RecursionError):
        raise TicketFileError(f"{path}: metadata field {key!r} is not valid JSON") from None
    if not isinstance(value, kind):
        raise TicketFileError(f"{path}: metadata field {key!r} should be a JSON {kind.__name__}")
    return value


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    """json object hook: a key given twice is an error, not "the last one wins" (readers would disagree)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _strict_json(text: str | bytes) -> Any:
    return json.loads(text, object_pairs_hook=_unique_keys)


def _read_header(raw: bytes, path: Path) -> dict:
    """Parse and check the safetensors header ourselves, with size limits, before safetensors sees the bytes:
    every tensor's declared dtype, shape and byte range must agree and tile the body exactly, so nothing is ever
    allocated for a declared size the file does not hold."""
    if len(raw) < 8:
        raise TicketFileError(f"{path}: not a safetensors file (only {len(raw)} bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise TicketFileError(f"{path}: not a safetensors file (header length {n} exceeds the file)")
    if n > MAX_HEADER_BYTES:
        raise TicketFileError(f"{path}: header of {n} bytes is too large for a ticket (limit {MAX_HEADER_BYTES})")
    try:
        header = _strict_json(raw[8 : 8 + n])
    except _DuplicateKey as e:
        raise TicketFileError(f"{path}: key {str(e)[:80]!r} appears twice in the safetensors header") from None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise TicketFileError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise TicketFileError(f"{path}: not a safetensors file (header is not an object)")
    _check_layout(header, len(raw) - 8 - n, path)
    return header


def _check_layout(header: dict, body: int, path: Path) -> None:
    """Each tensor entry: a known dtype, a shape of non-negative ints, and a byte range inside the body whose
    length is exactly prod(shape) * itemsize (Python ints: no overflow); the ranges tile the body."""
    ranges = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        where = f"{path}: tensor {str(name)[:80]!r}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise TicketFileError(f"{where} needs exactly dtype, shape and data_offsets in the header")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_BYTES:
            raise TicketFileError(f"{where} has unknown dtype {str(dtype)[:20]!r}")
        if not (isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape)):
            raise TicketFileError(f"{where}: shape must be a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
                and 0 <= offsets[0] <= offsets[1] <= body):
            raise TicketFileError(f"{where}: data_offsets must be [begin, end] inside the {body}-byte body")
        if offsets[1] - offsets[0] != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise TicketFileError(f"{where}: shape {shape} of {dtype} does not match its "
                                  f"{offsets[1] - offsets[0]} bytes")
        ranges.append(offsets)
    end = 0
    for begin, stop in sorted(ranges):
        if begin != end:
            raise TicketFileError(f"{path}: tensor data overlaps or leaves a gap at byte {end}")
        end = stop
    if end != body:
        raise TicketFileError(f"{path}: {body - end} bytes after the last tensor")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def load(path: str | Path) -> Ticket:
    """Read and fully validate a ticket file; every problem is a TicketFileError with one line."""
    path = Path(path)
    if not path.exists():
        raise TicketFileError(f"{path}: no such file")
    if not path.is_file():
        raise TicketFileError(f"{path}: not a regular file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise TicketFileError(f"{path}: {size} bytes is too large for a ticket file")
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror})") from None
    header = _read_header(raw, path)
    meta = header.get("__metadata__")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise TicketFileError(f"{path}: a safetensors file, but not a ticket (no format=ticket metadata)")
    if meta.get("format_version") != FORMAT_VERSION:
        raise TicketFileError(f"{path}: ticket format_version {meta.get('format_version')!r} is not supported "
                              f"(this ticketcli reads version {FORMAT_VERSION})")
    if not all(isinstance(v, str) for v in meta.values()):
        raise TicketFileError(f"{path}: metadata values must be strings")
    try:
        tensors = st_load(raw)
    except Exception as e:  # safetensors raises several types for malformed bodies
        raise TicketFileError(f"{path}: corrupt safetensors body ({str(e).splitlines()[0][:200]})") from None

    fields = {key: _json_field(meta, key, dict, path) for key in REQUIRED if key != "weights_sha256"}
    sha = meta.get("weights_sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise TicketFileError(f"{path}: metadata field 'weights_sha256' is missing or not a sha256 hex digest")
    checkpoint = _json_field(meta, "checkpoint", dict, path) if "checkpoint" in meta else None
    _check_fields(fields, checkpoint, path)

    shapes = fields["shapes"]
    expected = {f"mask/{n}" for n in shapes}
    if set(tensors) != expected:
        missing, extra = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        raise TicketFileError(f"{path}: mask tensors do not match 'shapes' (missing {missing}, unexpected {extra})")
    masks = {}
    for name, shape in shapes.items():
        t = tensors[f"mask/{name}"]
        if t.dtype != torch.uint8 or t.dim() != 1:
            raise TicketFileError(f"{path}: mask/{name} must be a 1-D uint8 tensor, found {t.dtype} {tuple(t.shape)}")
        masks[name] = unpack_bits(t, tuple(shape), what=f"{path}: mask/{name}")
    return Ticket(masks=masks, weights_sha256=sha, checkpoint=checkpoint, **fields)


def _check_fields(f: dict[str, dict], checkpoint: dict | None, path: Path) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise TicketFileError(f"{path}: metadata {what}")

    need(isinstance(f["model"].get("spec"), str), "'model' lacks a 'spec' string")
    init = f["init"]
    need(isinstance(init.get("scheme"), str), "'init' lacks a 'scheme' string")
    need(isinstance(init.get("seed"), int) and not isinstance(init.get("seed"), bool) and init["seed"] >= 0,
         "'init.seed' must be a non-negative integer")
    need(isinstance(init.get("k"), (int, float)) and not isinstance(init.get("k"), bool)
         and math.isfinite(init["k"]) and init["k"] > 0, "'init.k' must be a positive finite number")
    shapes = f["shapes"]
    need(len(shapes) > 0, "'shapes' is empty")
    for name, shape in shapes.items():
        need(isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape),
             f"'shapes[{name}]' must be a list of positive integers")
        need(math.prod(shape) <= 8 * MAX_FILE_BYTES, f"'shapes[{name}]' is impossibly large")
    need(isinstance(f["method"].get("name"), str), "'method' lacks a 'name' string")
    data = f["data"]
    need(isinstance(data.get("dataset"), str), "'data' lacks a 'dataset' string")
    for key in ("n_extract", "n_val", "split_seed"):
        need(isinstance(data.get(key), int) and not isinstance(data.get(key), bool) and data[key] >= 0,
             f"'data.{key}' must be a non-negative integer")
    if checkpoint is not None:
        need(isinstance(checkpoint.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", checkpoint["sha256"]),
             "'checkpoint.sha256' must be a sha256 hex digest")
