"""`ticket inspect`'s result: a ticket's metadata and per-mask density, read with numpy alone (no torch, no data).

Apart from the rest of this package, which imports torch to build and train networks: inspecting a ticket only
validates the file and counts bits, and should take a fraction of a second."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ticketcli.contract.result import Result
from ticketcli.contract.schema import SPARSITY_KEYS, JsonObject, present, run_metrics_fields
from ticketcli.ticketfile import ticket as ticket_io


@dataclass(frozen=True)
class MaskCount:
    """One mask of a ticket file, counted from its packed bytes: its parameter's shape, kept of total entries, and
    the auxiliary share the file records for it (when that is a number in [0, 1])."""

    name: str
    shape: tuple[int, ...]
    kept: int
    total: int
    aux_share: float | None = None

    @property
    def density(self) -> float:
        return self.kept / self.total

    def to_dict(self) -> JsonObject:
        """The `layers[]` item (contract.layer_list's shape for an entry with a shape and a density)."""
        item: JsonObject = {"name": self.name, "shape": list(self.shape), "kept": self.kept, "total": self.total}
        item["density"] = self.density
        item |= present(aux_share=self.aux_share)
        if self.total:
            item["sparsity"] = 1.0 - self.density
        return item


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class InspectResult(Result):
    """What `ticket inspect` reports: a ticket file's metadata as it records it (validated by the ticket reader,
    otherwise as the file holds it) and its masks as counted from their packed bytes."""

    COMMAND: ClassVar[str] = "inspect"

    ticket: str
    file_bytes: int
    format_version: str
    record: ticket_io.Ticket  # its metadata, as read (the per-layer sparsity is left to `masks`)
    masks: tuple[MaskCount, ...]  # in the ticket's order
    density: float  # kept / total over every mask
    packed_mask_bytes: int

    def body(self) -> JsonObject:
        tk = self.record
        doc: JsonObject = {
            "ticket": self.ticket,
            "file_bytes": self.file_bytes,
            "format_version": self.format_version,
            "model": tk.model.to_json(),
            "init": tk.init.to_json(),
            "weights_sha256": tk.weights_sha256,
            "method": tk.method.to_json(),
            "data": tk.data.to_json(),
            "checkpoint": None if tk.checkpoint is None else tk.checkpoint.to_json(),
            "created_by": tk.created_by.to_json(),
            "packed_mask_bytes": self.packed_mask_bytes,
            "masks_sha256": tk.masks_sha256,
            "integrity": tk.integrity,
        }
        run_metrics_fields(doc, tk.metrics.to_json())
        known = tk.sparsity.subset(SPARSITY_KEYS)
        doc["sparsity"] = {**known, "density": self.density}
        doc["layers"] = [m.to_dict() for m in self.masks]  # counted from the packed masks, not taken from the file
        return doc


def inspect_ticket(path: str | Path) -> InspectResult:
    """A ticket's metadata, per-parameter density and mask integrity, without data or weights: nothing is
    imported or built, and the masks are counted from their packed bytes (memory independent of their size)."""
    path = Path(path)
    scanned = ticket_io.scan(path)
    tk = scanned.ticket
    masks = tuple(
        MaskCount(n, tuple(tk.shapes[n]), kept, total, tk.sparsity.layer(n).aux_share)
        for n, (kept, total) in scanned.counts.items()
    )
    kept = sum(k for k, _ in scanned.counts.values())
    total = sum(t for _, t in scanned.counts.values())
    return InspectResult(
        ticket=str(path),
        file_bytes=path.stat().st_size,
        format_version=ticket_io.FORMAT_VERSION,
        record=tk,
        masks=masks,
        density=kept / total,
        packed_mask_bytes=sum((t + 7) // 8 for _, t in scanned.counts.values()),
    )


MAP_ENTRIES = 16_000_000  # a conv mask above this many entries is not drawn (its bits would be unpacked in memory)


def filter_maps(path: str | Path) -> dict[str, np.ndarray]:
    """`inspect --plot`: for each convolution's mask (4-D: out x in x kh x kw), the share of each filter's kernel
    entries it keeps, an out x in array; read from the packed bits with numpy, never torch."""
    maps: dict[str, np.ndarray] = {}
    with ticket_io.MaskFile(path) as f:
        for name, shape in f.scan.ticket.shapes.items():
            if len(shape) != 4 or math.prod(shape) > MAP_ENTRIES:
                continue
            packed = np.frombuffer(b"".join(f.pieces(name)), dtype=np.uint8)
            bits = np.unpackbits(packed, bitorder="big")[: math.prod(shape)].reshape(shape)
            maps[name] = bits.reshape(shape[0], shape[1], -1).mean(axis=2)
    return maps
