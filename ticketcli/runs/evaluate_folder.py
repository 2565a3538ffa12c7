"""`ticket evaluate DIR` (or a glob, or several files): re-evaluate every ticket, one at a time, gate each on the
same --min-accuracy/--max-drop/--max-bits-per-char, and report them all: the typed result and the loop that makes
it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, present
from ticketcli.errors import Interrupted, TicketCliError
from ticketcli.methods.base import Progress
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs.aggregate import Sample, SeedGroup, matched_folder, seed_groups
from ticketcli.runs.evaluate import EvaluateResult, Gate
from ticketcli.runs.folder import failures_line, ticket_paths
from ticketcli.specs.run import ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io


@dataclass(frozen=True)
class EvaluatedTicket:
    """One ticket of the folder: its evaluate result and the gate clauses it failed, or the one line that says why
    it could not be evaluated (a corrupt file, a dataset that is not there, a model factory not trusted)."""

    ticket: str
    result: EvaluateResult | None
    error: str | None = None
    failures: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.result is not None and not self.failures

    def to_dict(self) -> JsonObject:
        """What `ticket evaluate TICKET --json` prints for it, or {ticket, error}."""
        if self.result is None:
            return {"ticket": self.ticket, "error": self.error}
        return self.result.to_document()


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping)
class EvaluateFolderResult(Result):
    """What `ticket evaluate DIR` reports: every ticket's evaluation, in order, and a summary over them."""

    COMMAND: ClassVar[str] = "evaluate-folder"

    tickets: tuple[EvaluatedTicket, ...]
    min_accuracy: float | None = None
    max_drop: float | None = None
    threads: int | None = None
    aggregate: tuple[SeedGroup, ...] | None = None  # --aggregate: the re-measured accuracies over seeds
    max_bits_per_char: float | None = None  # language models' tickets: the test bits per character at most this

    @property
    def gated(self) -> bool:
        return self.min_accuracy is not None or self.max_drop is not None or self.max_bits_per_char is not None

    @property
    def language_model(self) -> bool:
        """Whether a language model's ticket is among those evaluated (they have bits per character)."""
        return any(t.result is not None and t.result.test.bits_per_char is not None for t in self.tickets)

    def summary(self) -> JsonObject:
        done = [t for t in self.tickets if t.result is not None]
        return {
            "count": len(self.tickets),
            "evaluated": len(done),
            "errors": len(self.tickets) - len(done),
            "reproduced": sum(1 for t in done if t.result is not None and t.result.reproduced),
            "passed": sum(1 for t in self.tickets if t.passed),  # evaluated, and gated: passed the gate
            "failed": sum(1 for t in done if t.failures),  # evaluated, and failed the gate
        }

    def body(self) -> JsonObject:
        doc: JsonObject = {"tickets": [t.to_dict() for t in self.tickets], "summary": self.summary()}
        if self.gated:
            gate = present(
                min_accuracy=self.min_accuracy, max_drop=self.max_drop, max_bits_per_char=self.max_bits_per_char
            )
            doc["gate"] = {**gate, "passed": all(t.passed for t in self.tickets)}
        if self.aggregate is not None:
            doc["aggregate"] = [g.to_dict() for g in self.aggregate]
        return doc | present(threads=self.threads)

    def failure_line(self) -> str | None:
        """The one line of a folder in which a ticket failed the gate or could not be evaluated (exit 1), or None."""
        bad = [(t.ticket, "error" if t.result is None else "gate") for t in self.tickets if not t.passed]
        return failures_line(bad, len(self.tickets), "failed") if bad else None


def evaluate_folder(
    paths: Sequence[Path],
    reader: ReaderSpec = ReaderSpec(),
    *,
    min_accuracy: float | None = None,
    max_drop: float | None = None,
    progress: Progress | None = None,
    max_bits_per_char: float | None = None,
) -> EvaluateFolderResult:
    """Evaluate every ticket `paths` name (runs.folder.ticket_paths), one at a time, each gated like `ticket
    evaluate TICKET`; a ticket that cannot be evaluated is an error row and the loop goes on (an interrupt stops
    it); under `max_bits_per_char`, a ticket without bits per character (an image model's) fails the gate.
    `progress` is told each ticket and its outcome ("last")."""
    rows = []
    bounds = Bounds(min_accuracy, max_drop, max_bits_per_char)
    for done, path in enumerate(ticket_paths(paths), 1):
        row = _one(path, reader, bounds)
        rows.append(row)
        if progress is not None:
            e = row.result
            what = "error" if e is None else f"test {measured_text(e)}" + (" FAILED" if row.failures else "")
            progress({"epoch": done, "unit": "ticket", "last": f"{path} ({what})"})
    return EvaluateFolderResult(
        tickets=tuple(rows), min_accuracy=min_accuracy, max_drop=max_drop, max_bits_per_char=max_bits_per_char
    )


def measured_text(e: EvaluateResult) -> str:
    """A ticket's re-measured test value in a progress line: its bits per character (a language model's), else its
    accuracy."""
    bits = e.test.bits_per_char
    return f"{100 * e.test.accuracy:.2f}%" if bits is None else f"{bits:.4f} bits/char"


@dataclass(frozen=True)
class Bounds:
    """The folder's gate: each ticket is gated on these, as `ticket evaluate TICKET` gates one."""

    min_accuracy: float | None
    max_drop: float | None
    max_bits_per_char: float | None

    @property
    def any(self) -> bool:
        return self.min_accuracy is not None or self.max_drop is not None or self.max_bits_per_char is not None


def _one(path: Path, reader: ReaderSpec, bounds: Bounds) -> EvaluatedTicket:
    try:
        ticket_io.check_header(path)
        result = runs_evaluate.evaluate_ticket(path, reader)
        failures: list[str] = []
        if bounds.any:
            gate, failures = _gate(result, bounds)
            result = replace(result, gate=gate)
    except Interrupted:
        raise
    except TicketCliError as e:
        return EvaluatedTicket(ticket=str(path), result=None, error=_line(e))
    return EvaluatedTicket(ticket=str(path), result=result, failures=tuple(failures))


def _gate(result: EvaluateResult, bounds: Bounds) -> tuple[Gate, list[str]]:
    """evaluate's gate on one ticket of the folder. Under --max-bits-per-char, a ticket without bits per character
    (an image model's) fails it with that clause, its re-measured values still shown and its other bounds checked
    (`ticket evaluate TICKET` refuses it instead: exit 2)."""
    bits = bounds.max_bits_per_char
    if bits is None or result.test.bits_per_char is not None:
        return runs_evaluate.evaluation_gate(
            result, min_accuracy=bounds.min_accuracy, max_drop=bounds.max_drop, max_bits_per_char=bits
        )
    gate, failures = runs_evaluate.evaluation_gate(result, min_accuracy=bounds.min_accuracy, max_drop=bounds.max_drop)
    failures.append(f"no test bits per character for --max-bits-per-char {bits}: not a language model's ticket")
    return replace(gate, passed=False, max_bits_per_char=bits), failures


def _line(e: TicketCliError) -> str:
    return str(e) + (f" ({e.hint})" if e.hint else "")


def with_threads(result: EvaluateFolderResult, threads: int | None) -> EvaluateFolderResult:
    """The result with the torch thread count the evaluations ran with, on it and on each ticket's result."""
    rows = tuple(
        t if t.result is None else replace(t, result=replace(t.result, threads=threads)) for t in result.tickets
    )
    return replace(result, tickets=rows, threads=threads)


def aggregated(result: EvaluateFolderResult) -> EvaluateFolderResult:
    """The result with its evaluated tickets grouped over seeds: the re-measured accuracies, by method, model and
    requested sparsity (runs matched with --match-sparsity: by the folder they were matched in)."""
    samples = [
        Sample(
            method=r.method.name,
            model=r.model,
            seed=r.seed,
            requested_sparsity=_fraction(r.requested_sparsity),
            matched_in=matched_folder(r.method.option("matched_to")),
            achieved_sparsity=_fraction(r.achieved_sparsity),
            test_accuracy=r.test.accuracy,
            val_accuracy=r.val.accuracy,
            test_bits_per_char=r.test.bits_per_char,
            val_bits_per_char=r.val.bits_per_char,
        )
        for r in (t.result for t in result.tickets)
        if r is not None
    ]
    return replace(result, aggregate=seed_groups(samples))


def _fraction(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
