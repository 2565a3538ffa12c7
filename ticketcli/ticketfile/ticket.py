"""The Ticket (masks + typed provenance records) and its safetensors format v1: pack, save (atomic), load and
validate, scan (count without unpacking) and MaskFile (keep a validated ticket open).

Reading never trusts a declared size: the header is parsed and checked first (safetensors_file.py checks the
container, meta.py the metadata, layout.py where each mask lies), then each mask's bytes are read by offset, a chunk
at a time. The metadata's JSON objects become record.py's typed records, which write them back byte for byte."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from ticketcli.errors import TicketFileError
from ticketcli.files.atomic import write_atomic
from ticketcli.specs.run import MAX_PARAMS
from ticketcli.ticketfile import layout as layout_io
from ticketcli.ticketfile.layout import FORMAT, FORMAT_VERSION, INTEGRITY, MAX_FILE_BYTES, REQUIRED
from ticketcli.ticketfile.record import (
    CheckpointRecord,
    DataRecord,
    InitRecord,
    JsonValue,
    MethodRecord,
    MetricsRecord,
    ModelRecord,
    Provenance,
    SparsityRecord,
)
from ticketcli.ticketfile.safetensors_file import check_safetensors_name, chunks, popcount

if TYPE_CHECKING:
    import torch

# Reading and checking a ticket (scan, check_header) needs only numpy: `ticket inspect` and a bad file's error run
# without importing torch (seconds). The functions that make or return tensors import it themselves.

__all__ = ["FORMAT", "FORMAT_VERSION", "INTEGRITY", "MAX_FILE_BYTES", "REQUIRED"]  # the file format, named here too


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
    """A ticket: its masks and the typed records of how they were made (each writes back the JSON it was read from)."""

    masks: dict[str, torch.Tensor]  # param name -> bool mask, in the model's named_parameters() order
    model: ModelRecord
    init: InitRecord
    weights_sha256: str
    method: MethodRecord  # name + every hyper-parameter the method read
    data: DataRecord  # dataset, split sizes, split seed
    sparsity: SparsityRecord  # requested, achieved, per layer
    metrics: MetricsRecord  # test/val accuracy and loss at extraction, and the facts of the run
    created_by: Provenance
    checkpoint: CheckpointRecord | None = None  # path + sha256 when the weights came from a file
    shapes: dict[str, list[int]] = field(default_factory=dict)
    masks_sha256: str | None = None  # as read from a file (saving always records the masks' own digest)
    integrity: str = "ok"  # as read: INTEGRITY's "ok", "modified" or "not recorded"

    def __post_init__(self) -> None:
        if not self.shapes:
            self.shapes = {n: list(m.shape) for n, m in self.masks.items()}

    @classmethod
    def of(
        cls,
        masks: dict[str, torch.Tensor],
        *,
        model: Mapping[str, JsonValue],
        init: Mapping[str, JsonValue],
        weights_sha256: str,
        method: Mapping[str, JsonValue],
        data: Mapping[str, JsonValue],
        sparsity: Mapping[str, JsonValue],
        metrics: Mapping[str, JsonValue],
        created_by: Mapping[str, JsonValue],
        checkpoint: Mapping[str, JsonValue] | None = None,
        shapes: dict[str, list[int]] | None = None,
        masks_sha256: str | None = None,
        integrity: str = "ok",
    ) -> Ticket:
        """A ticket from its metadata's JSON objects (the writer's, or a file's): each becomes its typed record."""
        return cls(
            masks=masks,
            model=ModelRecord.of(model),
            init=InitRecord.of(init),
            weights_sha256=weights_sha256,
            method=MethodRecord.of(method),
            data=DataRecord.of(data),
            sparsity=SparsityRecord.of(sparsity),
            metrics=MetricsRecord.of(metrics),
            created_by=Provenance.of(created_by),
            checkpoint=None if checkpoint is None else CheckpointRecord.of(checkpoint),
            shapes=shapes or {},
            masks_sha256=masks_sha256,
            integrity=integrity,
        )

    def packed(self) -> dict[str, torch.Tensor]:
        """The safetensors tensors: `mask/<name>` -> packed uint8."""
        return {f"mask/{n}": pack_bits(m) for n, m in self.masks.items()}

    def metadata(self, packed: dict[str, torch.Tensor] | None = None) -> dict[str, str]:
        """The file's metadata: format, every record as JSON text, the masks' digest."""
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION}
        for key in REQUIRED:
            value = getattr(self, key)
            # insertion order is kept (shapes and masks stay in named_parameters() order); a record writes the JSON
            # object it was made from
            meta[key] = value if isinstance(value, str) else json.dumps(value) if key == "shapes" else value.dumps()
        if self.checkpoint is not None:
            meta["checkpoint"] = self.checkpoint.dumps()
        meta["masks_sha256"] = masks_sha256(self.packed() if packed is None else packed)
        return meta

    def to_bytes(self) -> bytes:
        """The whole ticket file."""
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


def save(ticket: Ticket, path: str | Path, *, overwrite: bool = False, checked_at_start: bool = False) -> int:
    """Write atomically (temp file in the same directory, fsync, rename); returns the file size. The name must
    end in .safetensors (check_ticket_name); checked_at_start: see atomic.write_owned (a name taken during the
    run keeps the ticket beside it, still a .safetensors name)."""
    check_ticket_name(path)
    return write_atomic(path, ticket.to_bytes(), overwrite=overwrite, checked_at_start=checked_at_start)


def _read(path: Path, take: Callable[[str, Iterable[bytes]], int], max_params: int | None = None) -> Ticket:
    """Open, validate and walk a ticket (see _walk), feeding each mask's packed bytes to take; returns the Ticket
    without masks. An unreadable file is one TicketFileError line."""
    f, size = layout_io.open_file(path)
    try:
        with f:
            tk, _ = _checked(f, size, path, take, max_params)
    except OSError as e:
        raise TicketFileError(f"{path}: cannot read ({e.strerror or e})") from None
    return tk


def _checked(
    f: BinaryIO, size: int, path: Path, take: Callable[[str, Iterable[bytes]], int], max_params: int | None
) -> tuple[Ticket, layout_io.Layout]:
    """Validate and walk an opened ticket: the Ticket without masks, and where its masks lie."""
    layout = layout_io.checked_layout(f, size, path, max_params)
    computed = layout_io.walk(f, layout, path, take)
    integrity = layout_io.integrity(layout.recorded, computed)
    return Ticket.of({}, **layout.fields, masks_sha256=layout.recorded, integrity=integrity), layout


def check_header(path: str | Path) -> None:
    """Every check load() makes before it reads a mask (file, header, metadata, tensor layout), and nothing else:
    the command line refuses a bad ticket with it before importing torch."""
    path = Path(path)
    f, size = layout_io.open_file(path)
    try:
        with f:
            layout_io.checked_layout(f, size, path)
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
        self._f, size = layout_io.open_file(self.path)
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

    def read(self, name: str, start: int, stop: int) -> bytes:
        """The packed bytes [start, stop) of mask `name` (a part of it: the sparse form reads a layer's rows so)."""
        begin, end = self._spans[name]
        if not 0 <= start <= stop <= end - begin:
            raise ValueError(f"bytes {start}..{stop} lie outside mask {name!r}")
        try:
            return b"".join(chunks(self._f, begin + start, begin + stop))
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
