"""`ticket evaluate` and the Python API's Ticket.evaluate: rebuild a ticket's network, apply its masks and
re-measure test and validation accuracy; the summary it returns and the accuracy gate the command applies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, present
from ticketcli.errors import UsageError
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.runs.build import OpenTicket, open_ticket
from ticketcli.runs.header import OfTicket, TicketHeader
from ticketcli.runs.parts import LayerCount, SplitMetrics, layer_counts
from ticketcli.runs.record import counted_layers
from ticketcli.specs.run import ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import SplitRecord
from ticketcli.train import evaluate


def evaluate_ticket(
    path: str | Path, reader: ReaderSpec = ReaderSpec(), *, chunks: ChunkProgress | None = None
) -> EvaluateResult:
    """Rebuild a ticket's network as `reader` says, apply its masks and re-measure test and validation accuracy;
    `chunks` is told the chunks of the BatchNorm recalibration and of both evaluations as they finish."""
    return evaluate_loaded(open_ticket(path, reader), Path(path), chunks)


def evaluate_loaded(o: OpenTicket, path: Path, chunks: ChunkProgress | None = None) -> EvaluateResult:
    """evaluate_ticket for a ticket already opened (the Python API's Ticket.evaluate opens it with
    runs.build.open_loaded, on the caller's data or module); `path` names it in the summary."""
    test = evaluate(o.net, o.masks, o.splits.x_test, o.splits.y_test, chunks=chunks, phase="test")
    val = evaluate(o.net, o.masks, o.splits.x_val, o.splits.y_val, chunks=chunks, phase="validation")
    return evaluation_summary(path, o.ticket, o.device, test, val)


@dataclass(frozen=True)
class StoredMetrics:
    """What the ticket stored at extraction, for comparison: read from the file, so whatever it holds there."""

    test_accuracy: Any
    val_accuracy: Any
    device: Any


@dataclass(frozen=True)
class Gate:
    """`evaluate`'s --min-accuracy / --max-drop gate on the re-measured test accuracy, and whether it passed."""

    passed: bool
    min_accuracy: float | None = None
    max_drop: float | None = None
    stored_accuracy: float | None = None  # with max_drop: the stored test accuracy it compared with
    drop: float | None = None  # stored - measured, rounded to 12 places
    max_bits_per_char: float | None = None  # a language model's ticket: the test bits per character at most this

    def to_dict(self) -> JsonObject:
        doc: JsonObject = {}
        if self.min_accuracy is not None:
            doc["min_accuracy"] = self.min_accuracy
        if self.max_drop is not None:
            doc.update(max_drop=self.max_drop, stored_accuracy=self.stored_accuracy, drop=self.drop)
        if self.max_bits_per_char is not None:
            doc["max_bits_per_char"] = self.max_bits_per_char
        doc["passed"] = self.passed
        return doc


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class EvaluateResult(OfTicket, Result):
    """What `ticket evaluate` reports: the re-measured accuracies next to those the ticket stored."""

    COMMAND: ClassVar[str] = "evaluate"

    header: TicketHeader  # the ticket's path, method record, model spec and seed
    device: str  # where it was measured
    test: SplitMetrics
    val: SplitMetrics
    stored: StoredMetrics
    reproduced: bool  # both splits' correct counts equal the stored ones
    requested_sparsity: Any  # as the ticket records it
    achieved_sparsity: Any  # as the ticket records it
    layers: tuple[LayerCount, ...]  # counted from the loaded masks
    integrity: str
    threads: int | None = None  # torch's CPU threads, as the measurement ran
    gate: Gate | None = None  # the command's gate, when asked

    def body(self) -> JsonObject:
        doc: JsonObject = {
            **self.header.to_dict(),
            "device": self.device,
            "reproduced": self.reproduced,
            "integrity": self.integrity,
        }
        doc |= present(threads=self.threads, gate=None if self.gate is None else self.gate.to_dict())
        doc["metrics"] = {"test": self.test.to_dict(), "val": self.val.to_dict()}
        s = self.stored
        doc["stored"] = {
            "device": s.device,
            "metrics": {"test": {"accuracy": s.test_accuracy}, "val": {"accuracy": s.val_accuracy}},
        }
        doc["sparsity"] = {"requested": self.requested_sparsity, "achieved": self.achieved_sparsity}
        doc["layers"] = [layer.to_dict() for layer in self.layers]
        return doc


def evaluation_summary(
    path: Path, tk: ticket_io.Ticket, device: torch.device, test: dict[str, Any], val: dict[str, Any]
) -> EvaluateResult:
    """What `ticket evaluate` prints: the re-measured accuracies next to those the ticket stored."""
    stored = tk.metrics
    st, sv = stored.test or SplitRecord.of(None), stored.val or SplitRecord.of(None)  # a split it does not record
    reproduced = st.correct == test["correct"] and sv.correct == val["correct"]
    return EvaluateResult(
        header=TicketHeader.of(path, tk),
        device=str(device),
        test=SplitMetrics.of(test),
        val=SplitMetrics.of(val),
        stored=StoredMetrics(test_accuracy=st.accuracy, val_accuracy=sv.accuracy, device=stored.device),
        reproduced=reproduced,
        requested_sparsity=tk.sparsity.requested,
        achieved_sparsity=tk.sparsity.achieved,
        layers=layer_counts(counted_layers(tk.masks, tk.sparsity)),
        integrity=tk.integrity,
    )


GATE_TOL = 1e-9  # accuracies are ratios of counts: a drop of exactly --max-drop must pass despite float rounding


def evaluation_gate(
    result: EvaluateResult,
    *,
    min_accuracy: float | None,
    max_drop: float | None,
    max_bits_per_char: float | None = None,
) -> tuple[Gate, list[str]]:
    """`evaluate`'s gates on the re-measured test accuracy: at least min_accuracy, and at most max_drop below the
    test accuracy the ticket stored (drop = stored - measured; a gain never fails). Returns the `gate` for the
    result and one clause per failed gate; the caller decides the exit code."""
    measured = result.test.accuracy
    failures = []
    if min_accuracy is not None and measured < min_accuracy:
        failures.append(f"test accuracy {measured:.4f} is below --min-accuracy {min_accuracy}")
    stored = drop = None
    if max_drop is not None:
        stored = result.stored.test_accuracy
        if not isinstance(stored, (int, float)):
            raise UsageError(
                f"{result.ticket} stores no test accuracy, so --max-drop has nothing to compare with",
                hint="gate on the accuracy itself with --min-accuracy",
            )
        drop = round(stored - measured, 12)
        if drop > max_drop + GATE_TOL:
            failures.append(
                f"test accuracy {measured:.4f} is {drop:.4f} below the stored {stored:.4f}, "
                f"more than --max-drop {max_drop}"
            )
    if max_bits_per_char is not None:
        bits = result.test.bits_per_char
        if bits is None:
            raise UsageError(
                f"{result.ticket} is not a language model's ticket: it has no bits per character to gate on",
                hint="--max-bits-per-char gates a --dataset text ticket; gate this one with --min-accuracy",
            )
        if bits > max_bits_per_char:
            failures.append(f"test bits per character {bits:.4f} is above --max-bits-per-char {max_bits_per_char}")
    gate = Gate(
        not failures,
        min_accuracy=min_accuracy,
        max_drop=max_drop,
        stored_accuracy=stored,
        drop=drop,
        max_bits_per_char=max_bits_per_char,
    )
    return gate, failures
