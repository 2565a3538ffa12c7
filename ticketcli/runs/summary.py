"""The result `ticket extract` prints (and `runs.extract.extract_ticket` returns): ExtractionResult, made by
extract_summary from the written ticket's own fields, with its typed sparsity and metrics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, present
from ticketcli.methods.base import Details
from ticketcli.runs.header import OfTicket, TicketHeader
from ticketcli.runs.parts import LayerCount, SplitMetrics
from ticketcli.runtime.threads import AutoThreads
from ticketcli.specs.run import RunSpec
from ticketcli.ticketfile import record
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import CheckpointRecord

T = TypeVar("T")


def written(value: T | None) -> T:
    """A value the writer always records: the ticket is this extraction's own, never a file's."""
    assert value is not None
    return value


@dataclass(frozen=True)
class SparsityRecord:
    """An extraction's sparsity (runs.record.sparsity_report): requested against achieved, the counts, each layer's,
    and what double-scoring and its iterated variant add."""

    requested: float
    achieved: float
    kept: int
    total: int
    layers: tuple[LayerCount, ...]
    requested_layer_densities: tuple[float, ...] | None = None
    aug_density: float | None = None
    aux_share: float | None = None
    projected: bool = False  # the final mask was projected onto the original scores
    rounds: tuple[JsonObject, ...] | None = None  # iterated: per round, its augmented density and sparsity

    @classmethod
    def of(cls, report: record.SparsityRecord) -> SparsityRecord:
        """From the written ticket's sparsity record (sparsity_report's, so every count is there)."""
        layers = []
        for name in report.layer_names():
            e = report.layer(name)
            layers.append(LayerCount(name, written(e.kept), written(e.total), written(e.achieved), e.aux_share))
        return cls(
            requested=written(report.requested),
            achieved=written(report.achieved),
            kept=written(report.kept),
            total=written(report.total),
            layers=tuple(layers),
            requested_layer_densities=report.requested_layer_densities,
            aug_density=report.aug_density,
            aux_share=report.aux_share,
            projected=report.projected,
            rounds=report.rounds,
        )

    def to_dict(self) -> JsonObject:
        """The document's `sparsity` (the layers go to `layers[]`)."""
        doc: JsonObject = {"requested": self.requested, "achieved": self.achieved}
        doc.update(kept=self.kept, total=self.total)
        layer_densities = self.requested_layer_densities
        doc |= present(
            requested_layer_densities=None if layer_densities is None else list(layer_densities),
            aug_density=self.aug_density,
            aux_share=self.aux_share,
            projected=True if self.projected else None,
            rounds=None if self.rounds is None else list(self.rounds),
        )
        return doc


@dataclass(frozen=True)
class TrainedMetrics:
    """A weight-training baseline's own trained network under the final mask: for information, not the ticket."""

    test: SplitMetrics
    val: SplitMetrics
    note: str


@dataclass(frozen=True)
class RunMetrics:
    """An extraction's measurements (run_metrics): the rewound ticket's splits and the facts of the run."""

    test: SplitMetrics
    val: SplitMetrics
    device: str
    wall_time_s: float
    processes: int | None = None  # under torchrun
    precision: str | None = None  # of training, when not fp32
    trained: TrainedMetrics | None = None

    @classmethod
    def of(cls, metrics: record.MetricsRecord) -> RunMetrics:
        """From the written ticket's metrics record (run_metrics's, so both splits and the facts are there)."""
        t = metrics.trained
        trained = None
        if t is not None:
            trained = TrainedMetrics(SplitMetrics.stored(t.test), SplitMetrics.stored(t.val), written(t.note))
        return cls(
            test=SplitMetrics.stored(written(metrics.test)),
            val=SplitMetrics.stored(written(metrics.val)),
            device=written(metrics.device),
            wall_time_s=written(metrics.wall_time_s),
            processes=metrics.processes,
            precision=metrics.precision,
            trained=trained,
        )


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class ExtractionResult(OfTicket, Result):
    """What `ticket extract` reports: where the ticket went, what it holds, how well it does. `method`,
    `checkpoint` and `masks_sha256` are the ticket's own fields, as `ticket inspect` reports them from the file."""

    COMMAND: ClassVar[str] = "extract"

    header: TicketHeader  # the path written, the ticket's method record, model spec and seed
    file_bytes: int | None  # None on the ranks of a torchrun run that do not write
    data: JsonObject  # the ticket's data record and where the data came from (`source`)
    sparsity: SparsityRecord
    metrics: RunMetrics
    score_params: dict[str, int] | None  # score methods: trainable and total score tensors per weight
    checkpoint: CheckpointRecord | None
    masks_sha256: str
    threads: int | None = None  # torch's CPU threads, as the command ran
    threads_auto: AutoThreads | None = None  # how --threads auto chose them (None: given)

    def body(self) -> JsonObject:
        doc: JsonObject = {
            **self.header.to_dict("ticket"),
            "file_bytes": self.file_bytes,
            **self.header.to_dict("method", "seed", "model"),
            "data": self.data,
        }
        doc |= present(score_params=self.score_params)
        checkpoint = None if self.checkpoint is None else self.checkpoint.to_json()
        doc.update(checkpoint=checkpoint, masks_sha256=self.masks_sha256)
        doc |= present(threads=self.threads)
        if self.threads_auto is not None:
            doc["threads_auto"] = self.threads_auto.to_dict()
        m = self.metrics
        if m.trained is not None:
            t = m.trained
            doc["trained"] = {"metrics": {"test": t.test.to_dict(), "val": t.val.to_dict()}, "note": t.note}
        doc.update(device=m.device, wall_time_s=m.wall_time_s)
        doc |= present(processes=m.processes, precision=m.precision)
        doc["metrics"] = {"test": m.test.to_dict(), "val": m.val.to_dict()}
        doc["sparsity"] = self.sparsity.to_dict()
        doc["layers"] = [layer.to_dict() for layer in self.sparsity.layers]
        return doc


def extract_summary(
    spec: RunSpec, tk: ticket_io.Ticket, out: str | Path, size: int | None, source: str, details: Details
) -> ExtractionResult:
    """What `ticket extract` prints: where the ticket went, what it holds, how well it does. `method`, `checkpoint`
    and `masks_sha256` are the ticket's own fields, as `ticket inspect` reports them from the written file (the
    digest from ticket.masks_sha256, the function that records it)."""
    return ExtractionResult(
        header=TicketHeader.of(out, tk),
        file_bytes=size,
        data={**tk.data.to_json(), "source": source},
        sparsity=SparsityRecord.of(tk.sparsity),
        metrics=RunMetrics.of(tk.metrics),
        score_params=details.get("score_params"),
        checkpoint=tk.checkpoint,
        masks_sha256=ticket_io.masks_sha256(tk.packed()),
    )
