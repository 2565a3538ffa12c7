"""`ticket inspect`'s result: a ticket's metadata and per-mask density, read with numpy alone (no torch, no data).

Apart from the rest of this package, which imports torch to build and train networks: inspecting a ticket only
validates the file and counts bits, and should take a fraction of a second."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import SPARSITY_KEYS, JsonObject, run_metrics_fields
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
        if self.aux_share is not None:
            item["aux_share"] = self.aux_share
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
    model: JsonObject
    init: JsonObject
    weights_sha256: str
    method: JsonObject
    data: JsonObject
    sparsity: JsonObject  # the file's sparsity field (its per-layer part is left to `masks`)
    metrics: JsonObject  # the file's metrics field: splits and the facts of the run
    checkpoint: JsonObject | None
    created_by: JsonObject
    masks: tuple[MaskCount, ...]  # in the ticket's order
    density: float  # kept / total over every mask
    packed_mask_bytes: int
    masks_sha256: str | None  # as the file records it (None in tickets written before it existed)
    integrity: str

    def body(self) -> JsonObject:
        doc: JsonObject = {
            "ticket": self.ticket,
            "file_bytes": self.file_bytes,
            "format_version": self.format_version,
            "model": self.model,
            "init": self.init,
            "weights_sha256": self.weights_sha256,
            "method": self.method,
            "data": self.data,
            "checkpoint": self.checkpoint,
            "created_by": self.created_by,
            "packed_mask_bytes": self.packed_mask_bytes,
            "masks_sha256": self.masks_sha256,
            "integrity": self.integrity,
        }
        run_metrics_fields(doc, self.metrics)
        known = {k: v for k, v in self.sparsity.items() if k in SPARSITY_KEYS}
        doc["sparsity"] = {**known, "density": self.density}
        doc["layers"] = [m.to_dict() for m in self.masks]  # counted from the packed masks, not taken from the file
        return doc


def inspect_ticket(path: str | Path) -> InspectResult:
    """A ticket's metadata, per-parameter density and mask integrity, without data or weights: nothing is
    imported or built, and the masks are counted from their packed bytes (memory independent of their size)."""
    path = Path(path)
    scanned = ticket_io.scan(path)
    tk = scanned.ticket
    per_layer = tk.sparsity.get("per_layer")
    masks = tuple(
        MaskCount(n, tuple(tk.shapes[n]), kept, total, recorded_aux_share(per_layer, n).get("aux_share"))
        for n, (kept, total) in scanned.counts.items()
    )
    kept = sum(k for k, _ in scanned.counts.values())
    total = sum(t for _, t in scanned.counts.values())
    return InspectResult(
        ticket=str(path),
        file_bytes=path.stat().st_size,
        format_version=ticket_io.FORMAT_VERSION,
        model=tk.model,
        init=tk.init,
        weights_sha256=tk.weights_sha256,
        method=tk.method,
        data=tk.data,
        sparsity=tk.sparsity,
        metrics=tk.metrics,
        checkpoint=tk.checkpoint,
        created_by=tk.created_by,
        masks=masks,
        density=kept / total,
        packed_mask_bytes=sum((t + 7) // 8 for _, t in scanned.counts.values()),
        masks_sha256=tk.masks_sha256,
        integrity=tk.integrity,
    )


def recorded_aux_share(per_layer: Any, name: str) -> dict[str, Any]:
    """{"aux_share": x} when a ticket's per-layer report records a number in [0, 1] for `name`, else {}."""
    entry = per_layer.get(name) if isinstance(per_layer, dict) else None
    share = entry.get("aux_share") if isinstance(entry, dict) else None
    ok = isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1
    return {"aux_share": share} if ok else {}
