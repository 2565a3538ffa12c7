"""The Ticket (masks + provenance) and its safetensors format v1: pack, save (atomic), load and validate.

Reading never trusts a declared size: the header is parsed and checked first (safetensors_file.py checks the
container, meta.py the metadata), then each mask's bytes are read by offset, a chunk at a time."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from ticketcli.errors import TicketFileError
from ticketcli.files.atomic import write_atomic
from ticketcli.models.registry import declared_params
from ticketcli.specs.run import MAX_PARAMS
from ticketcli.ticketfile.meta import HEX64, check_fields, json_field
from ticketcli.ticketfile.safetensors_file import CHUNK_BYTES, check_safetensors_name, chunks, popcount, read_header

if TYPE_CHECKING:
    import torch

# Reading and checking a ticket (scan, check_header) needs only numpy: `ticket inspect` and a bad file's error run
# without importing torch (seconds). The functions that make or return tensors import it themselves.

FORMAT = "ticket"
FORMAT_VERSION = "1"
MAX_FILE_BYTES = 1 << 30  # a ticket of 8e9 weights; anything bigger is not a ticket
REQUIRED = ("model", "init", "shapes", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by")
INTEGRITY = ("ok", "modified", "not recorded")  # masks_sha256 vs the masks read back; "not recorded": older file


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Row-major flattened bool mask -> uint8, 8 per byte, first element in the MSB, padding bits zero."""
    import torch

    bits = mask.detach().reshape(-1).to("cpu", torch.bool).numpy()
    return torch.from_numpy(np.packbits(bits, bitorder="big"))


def unpack_bits(packed: torch.Tensor, shape: tuple[int, ...], what: str = "mask") -> torch.Tensor:
    """Inverse of pack_bits; rejects wrong byte lengths and set padding bits."""
    import torch

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

    def __post_init__(self) -> None:
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
        from safetensors.torch import save as st_save

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


def check_ticket_name(path: str | Path) -> None:
    """A ticket is written only under a `.safetensors` name (the one rule of every command and API call that
    writes one); other formats come from `ticket export`, which chooses the format by the extension."""
    stem = Path(path).stem or "ticket"
    check_safetensors_name(
        path,
        "a ticket",
        hint=f"name it {stem}.safetensors; for a torch.save file, then run "
        f"`ticket export {stem}.safetensors --format masked --out {Path(path).name}`",
    )


def save(ticket: Ticket, path: str | Path, *, overwrite: bool = False) -> int:
    """Write atomically (temp file in the same directory, fsync, rename); returns the file size. The name must
    end in .safetensors (check_ticket_name)."""
    check_ticket_name(path)
    return write_atomic(path, ticket.to_bytes(), overwrite=overwrite)


@dataclass
class _Layout:
    """A ticket file whose header and metadata passed every check: its fields, and where each mask's bytes lie."""

    fields: dict[str, Any]  # Ticket(**fields) once masks are added
    spans: dict[str, tuple[int, int]]  # param name -> [begin, end) file offsets of its packed bytes
    recorded: str | None  # masks_sha256 from the metadata (None in tickets written before it existed)


def _open(path: Path) -> tuple[BinaryIO, int]:
    """The ticket opened for reading: a regular file (checked on the opened file too, and opened without
    blocking, so a FIFO swapped in cannot hang the reader) of at most MAX_FILE_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TicketFileError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL in the path; OSError: too long, a loop, no permission
        raise TicketFileError(f"{str(path)[:200]}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise TicketFileError(f"{path}: not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise TicketFileError(f"{path}: {st.st_size} bytes is too large for a ticket file")
    return os.fdopen(fd, "rb"), st.st_size


def _layout(f: BinaryIO, size: int, path: Path, max_params: int | None = None) -> _Layout:
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
    return _Layout({**fields, "weights_sha256": sha, "checkpoint": checkpoint}, spans, recorded)


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


def _walk(f: BinaryIO, layout: _Layout, path: Path, take: Callable[[str, Iterable[bytes]], int]) -> str:
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


def _integrity(recorded: str | None, computed: str) -> str:
    return "not recorded" if recorded is None else "ok" if recorded == computed else "modified"


def _read(path: Path, take: Callable[[str, Iterable[bytes]], int], max_params: int | None = None) -> Ticket:
    """Open, validate and walk a ticket (see _walk), feeding each mask's packed bytes to take; returns the Ticket
    without masks. An unreadable file is one TicketFileError line."""
    f, size = _open(path)
    try:
        with f:
            tk, _ = _checked(f, size, path, take, max_params)
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror or e})") from None
    return tk


def _checked(
    f: BinaryIO, size: int, path: Path, take: Callable[[str, Iterable[bytes]], int], max_params: int | None
) -> tuple[Ticket, _Layout]:
    """Validate and walk an opened ticket: the Ticket without masks, and where its masks lie."""
    layout = _layout(f, size, path, max_params)
    computed = _walk(f, layout, path, take)
    integrity = _integrity(layout.recorded, computed)
    return Ticket(masks={}, **layout.fields, masks_sha256=layout.recorded, integrity=integrity), layout


def check_header(path: str | Path) -> None:
    """Every check load() makes before it reads a mask (file, header, metadata, tensor layout), and nothing else:
    the command line refuses a bad ticket with it before importing torch."""
    path = Path(path)
    f, size = _open(path)
    try:
        with f:
            _layout(f, size, path)
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror or e})") from None


def load(path: str | Path, *, max_params: int = MAX_PARAMS) -> Ticket:
    """Read and fully validate a ticket file and unpack its masks; every problem is a TicketFileError with one
    line. Masks that declare more bits than the model or max_params allow are refused before any is read. A mask
    digest that differs from the recorded one is not refused here: Ticket.integrity says it, and
    readers that use the masks call require_intact."""
    import torch

    path = Path(path)
    packed_masks: dict[str, np.ndarray] = {}

    def keep(name: str, pieces: Iterable[bytes]) -> int:
        packed = packed_masks[name] = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        return int(packed[-1]) if packed.size else 0

    tk = _read(path, keep, max_params)
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
    tk = _read(path, _counter(kept))
    return Scan(tk, {n: (kept[n], math.prod(shape)) for n, shape in tk.shapes.items()})


def _counter(kept: dict[str, int]) -> Callable[[str, Iterable[bytes]], int]:
    """A walk's take() that counts each mask's kept bits into kept[name] from its packed bytes."""

    def count(name: str, pieces: Iterable[bytes]) -> int:
        total, last = 0, 0
        for piece in pieces:
            total += popcount(piece)
            last = piece[-1] if piece else last
        kept[name] = total
        return last

    return count


class MaskFile:
    """A ticket validated exactly as scan() validates it (the same checks and counts), then kept open so that its
    packed masks can be read again, a chunk at a time, without unpacking them (`ticket compare`). Use it as a
    context manager; `scan` is what scan() returns for the same file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        kept: dict[str, int] = {}
        self._f, size = _open(self.path)
        try:
            tk, layout = _checked(self._f, size, self.path, _counter(kept), None)
        except OSError as e:
            self._f.close()
            raise TicketFileError(f"{self.path}: cannot read ({e.strerror or e})") from None
        except BaseException:
            self._f.close()
            raise
        self._spans = layout.spans
        self.scan = Scan(tk, {n: (kept[n], math.prod(shape)) for n, shape in tk.shapes.items()})

    def pieces(self, name: str) -> Iterator[bytes]:
        """The packed bytes of mask `name`, in pieces of at most CHUNK_BYTES (a file that shrank since it was
        validated is one TicketFileError line)."""
        begin, end = self._spans[name]
        try:
            yield from chunks(self._f, begin, end)
        except OSError as e:
            raise TicketFileError(f"{self.path}: cannot read ({e.strerror or e})") from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> MaskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def require_intact(tk: Ticket, path: str | Path) -> None:
    """Refuse a ticket whose masks differ from the digest recorded when it was written."""
    if tk.integrity == "modified":
        raise TicketFileError(
            f"{path}: masks were modified after the ticket was written (masks_sha256 differs)",
            hint="the file was edited or damaged; ask for the original ticket",
        )
