"""train-weak's typed result: each run's curve and measurements, the check of the saved weights and the sparsity,
as frozen dataclasses whose `to_document()` is the `--json` document (docs/json.md). Torch-free: the result base
and the contract's shapes; run.py makes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, entries, layer_list, present
from ticketcli.runs.header import OfTicket, TicketHeader
from ticketcli.runs.parts import SplitMetrics
from ticketcli.specs.weak import WeakSpec


@dataclass(frozen=True)
class Measured:
    """Test and validation measurements of one set of weights."""

    test: SplitMetrics
    val: SplitMetrics

    def to_dict(self) -> JsonObject:
        return {"test": self.test.to_dict(), "val": self.val.to_dict()}


@dataclass(frozen=True)
class CurvePoint:
    """One epoch: its training loss and accuracy (over the epoch's batches) and the validation measured after it."""

    epoch: int
    loss: float
    accuracy: float
    val_accuracy: float
    val_loss: float

    def to_dict(self) -> JsonObject:
        return {
            "epoch": self.epoch,
            "metrics": {
                "train": {"accuracy": self.accuracy, "loss": self.loss},
                "val": {"accuracy": self.val_accuracy, "loss": self.val_loss},
            },
        }


@dataclass(frozen=True)
class WeakRun:
    """One training run (masked or dense): before, after, the best validation epoch and the curve."""

    initial: Measured
    final: Measured
    gain: float  # test accuracy after minus before, from the exact counts
    best_val_epoch: int  # the first epoch with the highest validation accuracy
    best_val_accuracy: float
    curve: tuple[CurvePoint, ...]
    wall_time_s: float

    def to_dict(self) -> JsonObject:
        return {
            "gain": self.gain,
            "wall_time_s": self.wall_time_s,
            "metrics": self.final.to_dict(),
            "initial": {"metrics": self.initial.to_dict()},
            "best": {"epoch": self.best_val_epoch, "metrics": {"val": {"accuracy": self.best_val_accuracy}}},
            "curve": [p.to_dict() for p in self.curve],
        }


@dataclass(frozen=True)
class WeightsCheck:
    """The trained weights against the mask: nonzero entries in all and outside the mask (always 0: else a bug)."""

    nonzero_after: int
    masked_nonzero_after: int
    unchanged: bool

    def to_dict(self) -> JsonObject:
        return entries(self, "nonzero_after", "masked_nonzero_after", "unchanged")


@dataclass(frozen=True)
class WeakSparsity:
    """The ticket's sparsity counted from its masks: requested (as recorded), kept of total, achieved, per layer."""

    requested: float | None
    kept: int
    total: int
    achieved: float
    per_layer: dict[str, dict[str, float]]  # name -> kept, total, achieved (and a recorded aux_share)

    def to_dict(self) -> JsonObject:
        return entries(self, "requested", "kept", "total", "achieved")


@dataclass(frozen=True)
class WrittenWeights:
    path: str
    file_bytes: int


@dataclass(frozen=True)
class WeakResult(OfTicket, Result):
    """What `ticket train-weak` reports: the ticket, the training settings, the masked run (and the dense baseline's)
    and the check that the trained weights kept the mask; `to_document()` is its --json document."""

    COMMAND = "train-weak"
    header: TicketHeader  # the ticket's path, method record, model spec and seed
    ticket_sha256: str
    device: str
    data: dict[str, Any]  # the ticket's data record (dataset, n_extract, n_val, split_seed) and n_test
    spec: WeakSpec
    sparsity: WeakSparsity
    weights_check: WeightsCheck
    masked: WeakRun
    integrity: str
    dense: WeakRun | None = None
    processes: int | None = None  # under torchrun
    out: WrittenWeights | None = None
    threads: int | None = None  # torch threads, as the command line ran it
    plot: str | None = None

    def body(self) -> JsonObject:
        doc: JsonObject = {
            **self.header.to_dict("ticket"),
            "ticket_sha256": self.ticket_sha256,
            **self.header.to_dict("method", "model", "seed"),
            "device": self.device,
            "data": self.data,
            **self.spec.to_dict(),
            "integrity": self.integrity,
        }
        out = None if self.out is None else {"path": self.out.path, "file_bytes": self.out.file_bytes}
        doc |= present(processes=self.processes, out=out, threads=self.threads, plot=self.plot)
        doc["sparsity"] = self.sparsity.to_dict()
        doc["weights_check"] = self.weights_check.to_dict()
        doc["layers"] = layer_list(self.sparsity.per_layer)
        doc["masked"] = self.masked.to_dict()
        doc["metrics"] = doc["masked"]["metrics"]  # the trained ticket's accuracy, where every other command has it
        return doc | present(dense=None if self.dense is None else self.dense.to_dict())
