"""`ticket evaluate` and the Python API's Ticket.evaluate: rebuild a ticket's network, apply its masks and
re-measure test and validation accuracy; the summary it returns and the accuracy gate the command applies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ticketcli.batchnorm import ChunkProgress
from ticketcli.errors import UsageError
from ticketcli.runs.build import OpenTicket, open_ticket
from ticketcli.runs.record import counted_layers
from ticketcli.specs import DataSpec, ModelPolicy
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import evaluate


def evaluate_ticket(
    path: str | Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
    chunks: ChunkProgress | None = None,
) -> dict:
    """Rebuild a ticket's network, apply its masks and re-measure test and validation accuracy; `chunks` is told
    the chunks of the BatchNorm recalibration and of both evaluations as they finish."""
    opened = open_ticket(path, data=data, device=device, weights=weights, policy=policy)
    return evaluate_loaded(opened, Path(path), chunks)


def evaluate_loaded(o: OpenTicket, path: Path, chunks: ChunkProgress | None = None) -> dict:
    """evaluate_ticket for a ticket already opened (the Python API's Ticket.evaluate opens it with
    runs.build.open_loaded, on the caller's data or module); `path` names it in the summary."""
    test = evaluate(o.net, o.masks, o.splits.x_test, o.splits.y_test, chunks=chunks, phase="test")
    val = evaluate(o.net, o.masks, o.splits.x_val, o.splits.y_val, chunks=chunks, phase="validation")
    return evaluation_summary(path, o.ticket, o.device, test, val)


def evaluation_summary(path: Path, tk: ticket_io.Ticket, device: torch.device, test: dict, val: dict) -> dict:
    """What `ticket evaluate` prints: the re-measured accuracies next to those the ticket stored."""
    stored = tk.metrics
    reproduced = (
        stored.get("test", {}).get("correct") == test["correct"]
        and stored.get("val", {}).get("correct") == val["correct"]
    )
    return {
        "ticket": str(path),
        "method": tk.method,
        "model": tk.model["spec"],
        "seed": tk.init["seed"],
        "device": str(device),
        "test": test,
        "val": val,
        "stored": {
            "test_accuracy": stored.get("test", {}).get("accuracy"),
            "val_accuracy": stored.get("val", {}).get("accuracy"),
            "device": stored.get("device"),
        },
        "reproduced": reproduced,
        "sparsity": {
            "requested": tk.sparsity.get("requested"),
            "achieved": tk.sparsity.get("achieved"),
            "per_layer": counted_layers(tk.masks, tk.sparsity.get("per_layer")),
        },
        "integrity": tk.integrity,
    }


GATE_TOL = 1e-9  # accuracies are ratios of counts: a drop of exactly --max-drop must pass despite float rounding


def evaluation_gate(
    result: dict, *, min_accuracy: float | None, max_drop: float | None
) -> tuple[dict[str, Any], list[str]]:
    """`evaluate`'s gates on the re-measured test accuracy: at least min_accuracy, and at most max_drop below the
    test accuracy the ticket stored (drop = stored - measured; a gain never fails). Returns the `gate` record for
    the result and one clause per failed gate; the caller decides the exit code."""
    measured = result["test"]["accuracy"]
    gate: dict[str, Any] = {}
    failures = []
    if min_accuracy is not None:
        gate["min_accuracy"] = min_accuracy
        if measured < min_accuracy:
            failures.append(f"test accuracy {measured:.4f} is below --min-accuracy {min_accuracy}")
    if max_drop is not None:
        stored = result["stored"]["test_accuracy"]
        if not isinstance(stored, (int, float)):
            raise UsageError(
                f"{result['ticket']} stores no test accuracy, so --max-drop has nothing to compare with",
                hint="gate on the accuracy itself with --min-accuracy",
            )
        drop = round(stored - measured, 12)
        gate.update(max_drop=max_drop, stored_accuracy=stored, drop=drop)
        if drop > max_drop + GATE_TOL:
            failures.append(
                f"test accuracy {measured:.4f} is {drop:.4f} below the stored {stored:.4f}, "
                f"more than --max-drop {max_drop}"
            )
    gate["passed"] = not failures
    return gate, failures
