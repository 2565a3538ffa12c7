"""`ticket compare`'s result: whether tickets share their initial network, how far their masks overlap, layer by
layer, and how their stored accuracy (a language model's: and bits per character) and sparsity differ. Read with
numpy alone, like `inspect` (no torch, no data).

Every ticket is validated exactly as `inspect` validates it (ticketfile's MaskFile runs scan's checks) and kept open
while it is compared; each pair's overlap is then counted straight from the packed bytes, a chunk of each file at a
time (an AND and a popcount per chunk), so memory stays a few MiB whatever the tickets' size. Up to ALL_PAIRS
tickets, every pair is compared; beyond, each ticket against the first (the reference), with at most two files
open at a time, so the work and the files held open grow with the count, not its square.

Overlap only means something between masks over the same parameters: tickets whose masks differ in names or shapes
(another model) are refused with one line, never compared layer by layer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import RUN_FACTS, SPLITS, JsonObject, present, split_metrics
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.runs.aggregate import PairGroup, SeedGroup
from ticketcli.runs.header import OfTicket, TicketHeader
from ticketcli.runs.overlap import LayerOverlap, Overlap, both_kept
from ticketcli.runs.parts import language_model_numbers
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import CheckpointRecord, DataRecord, InitRecord, MetricsRecord

__all__ = ["CompareResult", "ComparedTicket", "Difference", "LayerOverlap", "Overlap", "PairComparison"]

T = TypeVar("T")
SPLIT_KEYS = ("accuracy", "loss", "correct", "n")  # what a stored split may hold in the document (the split shape)
ALL_PAIRS = 8  # up to this many tickets every pair is compared (28 pairs); beyond, each against the first


@dataclass(frozen=True)
class Difference:
    """One recorded field in which two tickets differ: its path in the ticket's metadata and both values."""

    field: str  # "weights_sha256", "model.spec", "init.seed", "checkpoint.sha256", "data.split_seed", ...
    a: Any
    b: Any

    def to_dict(self) -> JsonObject:
        return {"field": self.field, "a": self.a, "b": self.b}


@dataclass(frozen=True)
class ComparedTicket(OfTicket):
    """One ticket as compare reports it: its identity, its stored accuracy and its sparsity counted from the masks."""

    header: TicketHeader  # its path, method record, model spec and seed
    init: InitRecord
    data: DataRecord
    weights_sha256: str
    checkpoint: CheckpointRecord | None
    masks_sha256: str | None
    integrity: str
    metrics: JsonObject  # the stored splits (accuracy, loss, correct, n), as the document shows them
    run: JsonObject  # the facts of the run it records, where well-typed: device, wall_time_s, processes, precision
    requested: float | None  # requested sparsity, as stored
    kept: int  # counted from the masks
    total: int
    stored: MetricsRecord = field(repr=False)  # the ticket's metrics record, whose accuracies `accuracy` reads

    @property
    def achieved(self) -> float:
        return 1.0 - self.kept / self.total

    def accuracy(self, split: str) -> float | None:
        """The stored accuracy of "test" or "val" (None when the ticket records none)."""
        return self.stored.accuracy(split)

    def bits_per_char(self, split: str) -> float | None:
        """A language model's stored bits per character on "test" or "val" (None for an image model's ticket)."""
        value = self.metrics.get(split, {}).get("bits_per_char")
        return None if value is None else float(value)

    @property
    def language_model(self) -> bool:
        return self.bits_per_char("test") is not None or self.bits_per_char("val") is not None

    def to_dict(self) -> JsonObject:
        return {
            **self.header.to_dict("ticket", "model", "seed", "method"),
            "init": self.init.to_json(),
            "data": self.data.to_json(),
            "weights_sha256": self.weights_sha256,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
            "masks_sha256": self.masks_sha256,
            "integrity": self.integrity,
            "metrics": self.metrics,
            **self.run,
            "sparsity": {
                "requested": self.requested,
                "achieved": self.achieved,
                "kept": self.kept,
                "total": self.total,
                "density": self.kept / self.total,
            },
        }


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


@dataclass(frozen=True)
class PairComparison:
    """Tickets a and b (indices into CompareResult.tickets): what differs in their init and data, their overlap
    over every masked entry and per layer, and the change of stored accuracy and sparsity from a to b."""

    a: int
    b: int
    init_differences: tuple[Difference, ...]  # empty: the same initial network
    data_differences: tuple[Difference, ...]
    overlap: Overlap  # over every masked entry
    layers: tuple[LayerOverlap, ...]  # in the tickets' order
    change: JsonObject  # {"accuracy": {split: b - a}, "sparsity": {"requested": b - a, "achieved": b - a}}, and
    # "bits_per_char": {split: b - a} where either is a language model's ticket

    @property
    def same_init(self) -> bool:
        return not self.init_differences

    def to_dict(self) -> JsonObject:
        return {
            "a": self.a,
            "b": self.b,
            "same_init": self.same_init,
            "init_differences": [d.to_dict() for d in self.init_differences],
            "data_differences": [d.to_dict() for d in self.data_differences],
            "overlap": self.overlap.counts(),
            "change": self.change,
            "layers": [la.to_dict() for la in self.layers],
        }


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class CompareResult(Result):
    """What `ticket compare` reports: each ticket, and every pair of them (a < b, in the order given); with
    `reference` (more than ALL_PAIRS tickets), each ticket against that one only."""

    COMMAND: ClassVar[str] = "compare"

    tickets: tuple[ComparedTicket, ...]
    pairs: tuple[PairComparison, ...]
    reference: int | None = None
    aggregate: tuple[SeedGroup, ...] | None = None  # --aggregate: the tickets over their seeds
    aggregate_pairs: tuple[PairGroup, ...] | None = None  # --aggregate: same-seed pairs' overlap over seeds

    def pair(self, i: int, j: int) -> PairComparison | None:
        """The comparison of tickets i and j (either order); None for i == j."""
        lo, hi = min(i, j), max(i, j)
        return next((p for p in self.pairs if (p.a, p.b) == (lo, hi)), None) if lo != hi else None

    def jaccard_matrix(self) -> list[list[float]]:
        """Jaccard over every masked entry, ticket by ticket: symmetric, 1.0 on the diagonal (a ticket with itself)."""
        return self._matrix(1.0, lambda p: p.overlap.jaccard)

    def same_init_matrix(self) -> list[list[bool]]:
        return self._matrix(True, lambda p: p.same_init)

    def _matrix(self, diagonal: T, cell: Callable[[PairComparison], T]) -> list[list[T]]:
        """n x n: `cell` of each pair, on both sides of the diagonal; with a reference, its row alone."""
        if self.reference is not None:
            row = [diagonal] * len(self.tickets)
            for p in self.pairs:
                row[p.b if p.a == self.reference else p.a] = cell(p)
            return [row]
        cells = [[diagonal] * len(self.tickets) for _ in self.tickets]
        for p in self.pairs:
            cells[p.a][p.b] = cells[p.b][p.a] = cell(p)
        return cells

    def body(self) -> JsonObject:
        return {
            "tickets": [t.to_dict() for t in self.tickets],
            "pairs": [p.to_dict() for p in self.pairs],
            "matrix": {"jaccard": self.jaccard_matrix(), "same_init": self.same_init_matrix()},
        } | present(
            reference=self.reference,
            aggregate=None if self.aggregate is None else [g.to_dict() for g in self.aggregate],
            aggregate_pairs=None if self.aggregate_pairs is None else [g.to_dict() for g in self.aggregate_pairs],
        )

    def bound_line(self) -> str | None:
        """The one line that says the pairs were bounded (each ticket against the reference), or None."""
        if self.reference is None:
            return None
        return (
            f"{len(self.tickets)} tickets: each compared with the first ({self.tickets[self.reference].ticket}), "
            f"not every pair (every pair up to {ALL_PAIRS} tickets)"
        )


def compare_tickets(paths: Sequence[str | Path]) -> CompareResult:
    """Compare two or more ticket files, every pair of them (beyond ALL_PAIRS tickets, each against the first):
    init, data, mask overlap per layer, accuracy and sparsity. Each file is validated as `inspect` validates it; a
    bad file is one TicketFileError line, tickets whose masks cover different parameters one UsageError line."""
    if len(paths) < 2:
        raise UsageError("compare needs at least two tickets", hint="ticket compare A.safetensors B.safetensors")
    if len(paths) > ALL_PAIRS:
        return _against_first(paths)
    with ExitStack() as stack:
        files = [stack.enter_context(ticket_io.MaskFile(p)) for p in paths]
        for f in files[1:]:
            _same_layout(files[0], f)
        tickets = tuple(_compared(f) for f in files)
        pairs = tuple(
            _pair(i, j, files[i], files[j], tickets[i], tickets[j])
            for i in range(len(files))
            for j in range(i + 1, len(files))
        )
    return CompareResult(tickets=tickets, pairs=pairs)


def _against_first(paths: Sequence[str | Path]) -> CompareResult:
    """Each ticket against the first, one file open beside the first at a time."""
    with ticket_io.MaskFile(paths[0]) as first:
        tickets, pairs = [_compared(first)], []
        for j, path in enumerate(paths[1:], 1):
            with ticket_io.MaskFile(path) as f:
                _same_layout(first, f)
                tickets.append(_compared(f))
                pairs.append(_pair(0, j, first, f, tickets[0], tickets[j]))
    return CompareResult(tickets=tuple(tickets), pairs=tuple(pairs), reference=0)


def _same_layout(a: ticket_io.MaskFile, b: ticket_io.MaskFile) -> None:
    """Refuse two tickets whose masks are not over the same parameters (names and shapes, in the same order)."""
    sa, sb = a.scan.ticket.shapes, b.scan.ticket.shapes
    if list(sa.items()) == list(sb.items()):
        return
    models = f"{a.scan.ticket.model.spec[:80]} vs {b.scan.ticket.model.spec[:80]}"
    names = [n for n in sa if n not in sb][:1] or [n for n in sb if n not in sa][:1]
    if names:
        n = names[0]
        what = f"{n[:80]} is masked in {'the first' if n in sa else 'the second'} only"
    elif list(sa) != list(sb):
        what = "the same parameters in another order"
    else:
        n = next(n for n in sa if sa[n] != sb[n])
        what = f"{n[:80]} is {'x'.join(map(str, sa[n]))} vs {'x'.join(map(str, sb[n]))}"
    raise UsageError(
        f"{a.path} and {b.path} mask different layers ({models}: {what}); overlap is only defined between tickets "
        "of one architecture",
        hint="compare tickets of the same model; `ticket inspect` lists each ticket's layers",
    )


def _compared(f: ticket_io.MaskFile) -> ComparedTicket:
    tk, counts = f.scan.ticket, f.scan.counts
    splits, facts = split_metrics(tk.metrics.to_json())
    metrics = {s: {k: v for k, v in splits[s].items() if k in SPLIT_KEYS} for s in SPLITS if s in splits}
    for s in ("test", "val"):  # a language model's: bits per character and perplexity, where the file's are sound
        record = getattr(tk.metrics, s)
        if s in metrics and record is not None:
            metrics[s] |= language_model_numbers(record)
    return ComparedTicket(
        header=TicketHeader.of(f.path, tk),
        init=tk.init,
        data=tk.data,
        weights_sha256=tk.weights_sha256,
        checkpoint=tk.checkpoint,
        masks_sha256=tk.masks_sha256,
        integrity=tk.integrity,
        metrics=metrics,
        run={k: facts[k] for k in RUN_FACTS if k in facts and _fact_ok(k, facts[k])},
        requested=tk.sparsity.requested,
        kept=sum(k for k, _ in counts.values()),
        total=sum(t for _, t in counts.values()),
        stored=tk.metrics,
    )


def _fact_ok(key: str, value: Any) -> bool:
    """A recorded fact of the run of the type the document promises (the file is not trusted beyond its checks)."""
    if key in ("device", "precision"):
        return isinstance(value, str)
    if key == "processes":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))  # wall_time_s


def init_differences(a: ticket_io.Ticket, b: ticket_io.Ticket) -> tuple[Difference, ...]:
    """What makes two tickets' initial networks differ: the weights fingerprint, the model (its spec; its other
    recorded keys when the specs agree), each recorded init key (scheme, k, gain, seed, ...) and the checkpoint
    the weights came from. Empty: the same initial network."""
    diffs = []
    if a.weights_sha256 != b.weights_sha256:
        diffs.append(Difference("weights_sha256", a.weights_sha256, b.weights_sha256))
    if a.model.spec != b.model.spec:
        diffs.append(Difference("model.spec", a.model.spec, b.model.spec))
    else:
        diffs += _keys("model", a.model.to_json(), b.model.to_json())
    diffs += _keys("init", a.init.to_json(), b.init.to_json())
    sa = None if a.checkpoint is None else a.checkpoint.sha256
    sb = None if b.checkpoint is None else b.checkpoint.sha256
    if sa != sb or (a.checkpoint is None) != (b.checkpoint is None):
        diffs.append(Difference("checkpoint.sha256", sa, sb))
    return tuple(diffs)


def _keys(prefix: str, a: JsonObject, b: JsonObject) -> list[Difference]:
    """Each key of two recorded objects whose values differ (a key one of them lacks reads as null)."""
    keys = [*a, *(k for k in b if k not in a)]
    return [Difference(f"{prefix}.{k}", a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)]


def _pair(
    i: int, j: int, fa: ticket_io.MaskFile, fb: ticket_io.MaskFile, ta: ComparedTicket, tb: ComparedTicket
) -> PairComparison:
    a, b = fa.scan.ticket, fb.scan.ticket
    layers = []
    for name, shape in a.shapes.items():
        (kept_a, total), (kept_b, _) = fa.scan.counts[name], fb.scan.counts[name]
        both = both_kept(fa.pieces(name), fb.pieces(name))
        if both > min(kept_a, kept_b):  # the bytes read now are not those validated: a file written in place
            raise TicketFileError(f"{fa.path} or {fb.path} changed while being compared; compare them again")
        layers.append(LayerOverlap(name, tuple(shape), Overlap(total, kept_a, kept_b, both)))
    overlap = Overlap(*(sum(getattr(la.overlap, k) for la in layers) for k in ("total", "kept_a", "kept_b", "both")))
    change: JsonObject = {
        "accuracy": {s: _delta(ta.accuracy(s), tb.accuracy(s)) for s in ("test", "val")},
        "sparsity": {"requested": _delta(ta.requested, tb.requested), "achieved": tb.achieved - ta.achieved},
    }
    if ta.language_model or tb.language_model:  # language models' tickets: their bits per character too
        change["bits_per_char"] = {s: _delta(ta.bits_per_char(s), tb.bits_per_char(s)) for s in ("test", "val")}
    return PairComparison(
        a=i,
        b=j,
        init_differences=init_differences(a, b),
        data_differences=tuple(_keys("data", a.data.to_json(), b.data.to_json())),
        overlap=overlap,
        layers=tuple(layers),
        change=change,
    )
