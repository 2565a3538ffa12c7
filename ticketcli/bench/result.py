"""`ticket bench`'s typed result, torch-free: per ticket, every form with its agreement check, its file and load
time, its memory and its timings at each batch size; the verdict per batch size; for several tickets one entry each.
`to_document()` is the `--json` document (schemas/bench.json)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, entries, present

DENSE = "dense"  # the reference form every speed-up is taken over


@dataclass(frozen=True)
class Agreement:
    """A form's outputs on the test split against the ticket's own network: the largest absolute difference of the
    logits, the tolerance it is held to (float32 rounding: TOLERANCE times the largest |logit|), and both accuracies.
    A language model's: over every position of the test blocks (`n` characters predicted, accuracy next-character
    accuracy), with both bits per character."""

    max_abs_diff: float
    tolerance: float
    accuracy: float
    reference_accuracy: float
    n: int
    bits_per_char: float | None = None  # a language model's; None for a classifier
    reference_bits_per_char: float | None = None

    @property
    def agrees(self) -> bool:
        return self.max_abs_diff <= self.tolerance and self.accuracy == self.reference_accuracy

    def to_dict(self) -> JsonObject:
        doc = entries(self, "max_abs_diff", "tolerance", "accuracy", "reference_accuracy", "n")
        doc |= present(bits_per_char=self.bits_per_char, reference_bits_per_char=self.reference_bits_per_char)
        return doc | {"agrees": self.agrees}


@dataclass(frozen=True)
class Timing:
    """One form at one batch size: the median latency of one forward pass over the repeats, the spread (the
    interquartile range of the repeats), and the samples' count; throughput and speed-up follow from them."""

    batch: int
    median_s: float
    q1_s: float
    q3_s: float
    repeats: int
    speedup: float | None = None  # dense's median over this one's; None where dense was not timed

    @property
    def throughput(self) -> float:
        """Examples (a language model's: sequences) per second."""
        return self.batch / self.median_s

    def to_dict(self) -> JsonObject:
        doc = entries(self, "batch", "median_s", "q1_s", "q3_s", "repeats")
        doc["spread_s"] = self.q3_s - self.q1_s
        doc["throughput"] = self.throughput
        return doc | present(speedup=self.speedup)


@dataclass(frozen=True)
class FormReport:
    """One form of one ticket: available or why not, its agreement with the ticket's network, what it costs on disk
    and to load, the bytes of its own tensors, and its timings (empty when it is unavailable; a form that disagrees
    is timed, and flagged: the verdict never names it)."""

    name: str
    description: str
    available: bool
    reason: str | None = None  # why it is unavailable, or that it disagrees with the ticket's network
    agreement: Agreement | None = None
    file_bytes: int | None = None
    load_s: float | None = None
    memory_bytes: int | None = None
    timings: tuple[Timing, ...] = ()
    detail: str = ""  # what this ticket's form holds ("2 of 6 masked layers sparse; ..."), also in its description

    @property
    def timed(self) -> bool:
        return bool(self.timings)

    def timing(self, batch: int) -> Timing | None:
        return next((t for t in self.timings if t.batch == batch), None)

    def to_dict(self) -> JsonObject:
        doc = entries(self, "name", "description", "available")
        agreement = None if self.agreement is None else self.agreement.to_dict()
        doc |= present(reason=self.reason, agreement=agreement, file_bytes=self.file_bytes, load_s=self.load_s)
        doc |= present(memory_bytes=self.memory_bytes)
        doc["timings"] = [t.to_dict() for t in self.timings]
        return doc


@dataclass(frozen=True)
class Pick:
    """The verdict at one batch size: the fastest form, its speed-up over dense, and whether it beat dense by more
    than the noise (their interquartile ranges apart); a form within noise of dense leaves dense recommended."""

    batch: int
    fastest: str
    speedup: float | None  # None where dense was not timed (it disagreed with the ticket's network)
    recommended: str
    within_noise: bool

    def to_dict(self) -> JsonObject:
        return entries(self, "batch", "fastest", "speedup", "recommended", "within_noise")

    def line(self) -> str:
        if self.fastest == DENSE:
            return f"dense is fastest at batch {self.batch}"
        if self.speedup is None:
            return f"{self.fastest} is fastest at batch {self.batch} (dense was not timed)"
        if self.within_noise:
            return f"at batch {self.batch} {self.fastest} ({self.speedup:.2f}x) is within noise of dense: keep dense"
        return f"{self.fastest} is fastest at batch {self.batch} ({self.speedup:.2f}x dense)"


@dataclass(frozen=True)
class TicketBench:
    """One ticket's bench: its forms, the verdict per batch size, or the error that stopped it (folder mode). A
    language model's batch is `sequence_length` characters per sequence (None for a classifier, one example each)."""

    ticket: str
    model: str
    sparsity: float | None
    forms: tuple[FormReport, ...] = ()
    verdict: tuple[Pick, ...] = ()
    error: str | None = None
    sequence_length: int | None = None

    def form(self, name: str) -> FormReport | None:
        return next((f for f in self.forms if f.name == name), None)

    def verdict_line(self) -> str:
        if self.error is not None:
            return f"error: {self.error}"
        return "verdict: " + "; ".join(p.line() for p in self.verdict) + "." if self.verdict else "verdict: none"

    def to_dict(self) -> JsonObject:
        doc: JsonObject = entries(self, "ticket", "model", "sparsity")
        doc["forms"] = [f.to_dict() for f in self.forms]
        doc["verdict"] = [p.to_dict() for p in self.verdict]
        return doc | present(error=self.error, sequence_length=self.sequence_length)


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class BenchResult(Result):
    """What `ticket bench` reports: where and how it measured (device, torch threads, batch sizes, repeats, what
    memory means) and one entry per ticket."""

    COMMAND: ClassVar[str] = "bench"

    device: str
    threads: int
    batches: tuple[int, ...]
    repeats: int
    memory_measure: str  # "tensors" (the form's own tensors' bytes) or "cuda-peak" (torch.cuda's peak allocation)
    tickets: tuple[TicketBench, ...]
    clock: str = "wall"  # "wall", or "thread": the timing thread's CPU time
    plot: str | None = None

    @property
    def failed(self) -> tuple[TicketBench, ...]:
        return tuple(t for t in self.tickets if t.error is not None)

    def body(self) -> JsonObject:
        doc = entries(self, "device", "threads", "repeats", "clock", "memory_measure")
        doc["batches"] = list(self.batches)
        doc |= present(plot=self.plot)
        doc["tickets"] = [t.to_dict() for t in self.tickets]
        return doc
