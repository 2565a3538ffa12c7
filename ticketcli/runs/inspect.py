"""`ticket inspect`'s result: a ticket's metadata and per-mask density, read with numpy alone (no torch, no data).

Apart from the rest of this package, which imports torch to build and train networks: inspecting a ticket only
validates the file and counts bits, and should take a fraction of a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ticketcli.ticketfile import ticket as ticket_io


def inspect_ticket(path: str | Path) -> dict:
    """A ticket's metadata, per-parameter density and mask integrity, without data or weights: nothing is
    imported or built, and the masks are counted from their packed bytes (memory independent of their size)."""
    path = Path(path)
    scanned = ticket_io.scan(path)
    tk = scanned.ticket
    masks = {
        n: {"shape": tk.shapes[n], "kept": kept, "total": total, "density": kept / total}
        | recorded_aux_share(tk.sparsity.get("per_layer"), n)
        for n, (kept, total) in scanned.counts.items()
    }
    kept = sum(k for k, _ in scanned.counts.values())
    total = sum(t for _, t in scanned.counts.values())
    return {
        "ticket": str(path),
        "file_bytes": path.stat().st_size,
        "format_version": ticket_io.FORMAT_VERSION,
        "model": tk.model,
        "init": tk.init,
        "weights_sha256": tk.weights_sha256,
        "method": tk.method,
        "data": tk.data,
        "sparsity": tk.sparsity,
        "metrics": tk.metrics,
        "checkpoint": tk.checkpoint,
        "created_by": tk.created_by,
        "masks": masks,
        "density": kept / total,
        "packed_mask_bytes": sum((t + 7) // 8 for _, t in scanned.counts.values()),
        "masks_sha256": tk.masks_sha256,
        "integrity": tk.integrity,
    }


def recorded_aux_share(per_layer: Any, name: str) -> dict:
    """{"aux_share": x} when a ticket's per-layer report records a number in [0, 1] for `name`, else {}."""
    entry = per_layer.get(name) if isinstance(per_layer, dict) else None
    share = entry.get("aux_share") if isinstance(entry, dict) else None
    ok = isinstance(share, (int, float)) and not isinstance(share, bool) and 0 <= share <= 1
    return {"aux_share": share} if ok else {}
