"""The Ticket (masks + provenance) and its safetensors format v1: pack, save (atomic), load and validate."""

from __future__ import annotations

import json
import math
import os
import re
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
    """Refuse a path a ticket cannot be written to (callers check before long work, save() checks again)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    if path.is_dir():
        raise UsageError(f"cannot write {path}: it is a directory")
    if path.exists() and not overwrite:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")


def save(ticket: Ticket, path: str | Path, *, overwrite: bool = False) -> int:
    """Write atomically (temp file in the same directory, fsync, rename); returns the file size."""
    return write_atomic(path, ticket.to_bytes(), overwrite=overwrite)


def write_atomic(path: str | Path, payload: bytes, *, overwrite: bool = False) -> int:
    """Write bytes atomically (temp file in the same directory, fsync, rename), world-readable as umask allows."""
    path = Path(path)
    check_destination(path, overwrite=overwrite)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; a ticket is meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:
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
        value = json.loads(meta[key])
    except (json.JSONDecodeError, TypeError, RecursionError):
        raise TicketFileError(f"{path}: metadata field {key!r} is not valid JSON") from None
    if not isinstance(value, kind):
        raise TicketFileError(f"{path}: metadata field {key!r} should be a JSON {kind.__name__}")
    return value


def _read_header(raw: bytes, path: Path) -> dict:
    if len(raw) < 8:
        raise TicketFileError(f"{path}: not a safetensors file (only {len(raw)} bytes)")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise TicketFileError(f"{path}: not a safetensors file (header length {n} exceeds the file)")
    try:
        header = json.loads(raw[8 : 8 + n])
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        raise TicketFileError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise TicketFileError(f"{path}: not a safetensors file (header is not an object)")
    return header


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
