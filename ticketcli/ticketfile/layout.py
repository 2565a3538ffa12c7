"""A ticket file's layout, checked before a mask byte is read: the file opened safely, the header and metadata
validated (format, every field's type and range, the mask tensors exactly those of `shapes`), and the masks' packed
bytes walked in digest order with their padding checked. ticket.py turns a checked layout into a Ticket."""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ticketcli.errors import TicketFileError
from ticketcli.files.uninterrupted import open_descriptor
from ticketcli.models.registry import declared_params
from ticketcli.ticketfile.meta import HEX64, check_fields, json_field
from ticketcli.ticketfile.safetensors_file import CHUNK_BYTES, chunks, read_header

FORMAT = "ticket"
FORMAT_VERSION = "1"
MAX_FILE_BYTES = 1 << 30  # a ticket of 8e9 weights; anything bigger is not a ticket
REQUIRED = ("model", "init", "shapes", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by")
INTEGRITY = ("ok", "modified", "not recorded")  # masks_sha256 vs the masks read back; "not recorded": older file


@dataclass
class Layout:
    """A ticket file whose header and metadata passed every check: its fields, and where each mask's bytes lie."""

    fields: dict[str, Any]  # Ticket(**fields) once masks are added
    spans: dict[str, tuple[int, int]]  # param name -> [begin, end) file offsets of its packed bytes
    recorded: str | None  # masks_sha256 from the metadata (None in tickets written before it existed)


def open_file(path: Path) -> tuple[BinaryIO, int]:
    """The ticket opened for reading: a regular file (checked on the opened file too, and opened without
    blocking, so a FIFO swapped in cannot hang the reader) of at most MAX_FILE_BYTES."""
    try:
        f = open_descriptor(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), "rb")
    except FileNotFoundError:
        raise TicketFileError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path; OSError: too long, a loop, no permission
        raise TicketFileError(f"{str(path)[:200]}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):
        f.close()
        raise TicketFileError(f"{path}: not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        f.close()
        raise TicketFileError(f"{path}: {st.st_size} bytes is too large for a ticket file")
    return f, st.st_size


def checked_layout(f: BinaryIO, size: int, path: Path, max_params: int | None = None) -> Layout:
    """Everything that can be checked from the header alone: format, metadata fields, and that the mask tensors
    are exactly those of `shapes`, each 1-D uint8 of ceil(n/8) bytes. With max_params (a reader that unpacks the
    masks): that they hold no more bits than max_params, nor than the model the ticket names has parameters."""
    header, body = read_header(f, size, path)
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
    if max_params is not None:
        _check_bits(sum(math.prod(s) for s in shapes.values()), fields["model"], path, max_params)
    return Layout({**fields, "weights_sha256": sha, "checkpoint": checkpoint}, spans, recorded)


def _check_bits(bits: int, model: dict[str, Any], path: Path, max_params: int) -> None:
    """The masks' declared bits against the model, from the header alone, before any mask byte is read: the
    reader's --max-params, a built-in model's parameter count worked out from its spec (its family's cost), a factory's
    recorded parameters. (Masks hold one bit per masked parameter.)"""
    if bits > max_params:
        raise TicketFileError(
            f"{path}: the masks hold {bits:,} parameters, more than the limit of {max_params:,}",
            hint="raise the limit with --max-params N if you mean it",
        )
    params = declared_params(model["spec"])
    if params is None and isinstance(model.get("parameters"), dict):  # a factory's (meta.py checked them)
        params = sum(math.prod(s) for s in model["parameters"].values())
    if params is not None and bits > params:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model['spec'][:80]} (the masks hold {bits:,} weights, "
            f"more than its {params:,} parameters)"
        )


def _few(names: list[str], n: int = 5) -> str:
    """A list for an error line: the first n names and how many more."""
    shown = ", ".join(repr(x[:80]) for x in names[:n])
    return f"[{shown}{f', ... {len(names) - n} more' if len(names) > n else ''}]"


def _padding_clear(last: int, n: int) -> bool:
    """Whether the unused low bits of a mask's last packed byte are zero (n elements)."""
    return n % 8 == 0 or last & ((1 << (8 - n % 8)) - 1) == 0


def walk(f: BinaryIO, layout: Layout, path: Path, take: Callable[[str, Iterable[bytes]], int]) -> str:
    """Feed every mask's packed bytes to take(name, pieces) in sorted key order (the digest's order); take
    returns the mask's last byte for the padding check. Returns the masks' sha256 (see masks_sha256)."""
    digest, shapes = hashlib.sha256(), layout.fields["shapes"]

    def pieces(begin: int, end: int) -> Iterator[bytes]:
        for piece in chunks(f, begin, end):
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


def integrity(recorded: str | None, computed: str) -> str:
    return "not recorded" if recorded is None else "ok" if recorded == computed else "modified"
