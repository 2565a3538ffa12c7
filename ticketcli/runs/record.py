"""What an extraction records: its ticket (the model, method, sparsity and metrics fields), the run's identity for
--resume, and the summary that `extract` prints."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from ticketcli import batchnorm, distributed, machine
from ticketcli.batchnorm import ChunkProgress
from ticketcli.data import Splits
from ticketcli.masking import mask_stats
from ticketcli.methods import METHODS
from ticketcli.methods.base import Details, ExtractResult
from ticketcli.models.masked import MaskedNet
from ticketcli.result import Result
from ticketcli.runs.inspect import recorded_aux_share
from ticketcli.runs.parts import JsonObject, LayerCount, SplitMetrics, layer_counts
from ticketcli.seeding import fingerprint
from ticketcli.specs import ModelSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import evaluate
from ticketcli.version import __version__


def model_record(model: ModelSpec, net: MaskedNet) -> JsonObject:
    """The ticket's `model` field: the spec, for a user's factory every parameter's name and shape, and for a
    network with BatchNorm how evaluation gets its statistics (batchnorm.RECORD)."""
    record = model.to_dict()
    if model.arch == "user":
        record["parameters"] = net.param_shapes()
        record["masked"] = list(net.names)
    if net.batchnorms:
        record["batchnorm"] = {**batchnorm.RECORD, "batch_size": net.calibration_batch}
    return record


def sparsity_report(masks: dict[str, torch.Tensor], spec: RunSpec, details: Details | None = None) -> JsonObject:
    """Requested vs achieved sparsity, globally and per parameter; for double-scoring the share of kept
    augmented entries that sit on auxiliary coordinates (so a user sees whether the auxiliary scores ever win)."""
    details = details or {}
    stats = mask_stats(masks)
    per = {
        n: {"kept": s["kept"], "total": s["total"], "achieved": 1.0 - s["density"]}
        for n, s in stats["per_param"].items()
    }
    report = {
        "requested": spec.method.sparsity,
        "achieved": 1.0 - stats["density"],
        "kept": stats["kept"],
        "total": stats["total"],
        "per_layer": per,
    }
    if spec.method.layer_densities is not None:
        report["requested_layer_densities"] = list(spec.method.layer_densities)
    if "aug_density" in details:
        report["aug_density"] = details["aug_density"]
    aux = details.get("aux")
    if aux:
        for n, a in aux.items():
            per[n]["aux_share"] = a["aux_kept"] / a["aug_kept"] if a["aug_kept"] else 0.0
        aug_kept = sum(a["aug_kept"] for a in aux.values())
        report["aux_share"] = sum(a["aux_kept"] for a in aux.values()) / aug_kept if aug_kept else 0.0
    if spec.method.project_final:
        report["projected"] = True  # aux shares describe the trained augmented selection before projection
    if "rounds" in details:
        report["rounds"] = details["rounds"]
    return report


def run_identity(spec: RunSpec, weights: dict[str, torch.Tensor], device: torch.device) -> JsonObject:
    """Everything that decides an extraction's masks, for refusing to resume a checkpoint of another run."""
    data = {k: getattr(spec.data, k) for k in ("name", "n_extract", "n_val", "split_seed")}
    identity: dict[str, Any] = {
        "model": spec.model.to_dict(),
        "init": spec.init.to_dict(),
        "data": data,
        "method": spec.method.to_dict(),
        "weights_sha256": fingerprint(weights),
        "device": str(device),
        "torch": torch.__version__,
    }
    world = distributed.world()
    if world.active:  # the reduction order depends on the process count; each rank has its own cuda:N
        identity.update(device=device.type, processes=world.size)
    return identity


def trained_metrics(
    net: MaskedNet,
    trained: dict[str, torch.Tensor] | None,
    masks: dict[str, torch.Tensor],
    splits: Splits,
    *,
    chunks: ChunkProgress | None = None,
) -> JsonObject | None:
    """For weight-training methods: accuracy of their trained sparse network (for information, not the ticket).

    Loads `trained` into net: the caller rewinds to the initial weights afterwards."""
    if trained is None:
        return None
    net.load_weights(trained)
    return {
        "test": evaluate(net, masks, splits.x_test, splits.y_test, chunks=chunks, phase="trained test"),
        "val": evaluate(net, masks, splits.x_val, splits.y_val, chunks=chunks, phase="trained validation"),
        "note": "trained weights under the final mask, for information; the ticket is the rewound mask",
    }


def run_metrics(
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    splits: Splits,
    spec: RunSpec,
    *,
    device: torch.device,
    wall: float,
    trained: JsonObject | None,
    chunks: ChunkProgress | None = None,
) -> JsonObject:
    """The ticket's `metrics` field: accuracy and loss of the masks on the (rewound) initial weights (`chunks`: told
    the chunks of the BatchNorm recalibration and of both evaluations)."""
    metrics: JsonObject = {
        "test": evaluate(net, masks, splits.x_test, splits.y_test, chunks=chunks, phase="test"),
        "val": evaluate(net, masks, splits.x_val, splits.y_val, chunks=chunks, phase="validation"),
        "device": str(device),
        "wall_time_s": wall,
    }
    world = distributed.world()
    if world.active:
        metrics["processes"] = world.size
    if spec.method.precision != "fp32":
        metrics["precision"] = spec.method.precision  # of training; the accuracies above are always fp32
    if trained is not None:
        metrics["trained"] = trained
    return metrics


def make_ticket(
    spec: RunSpec,
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    splits: Splits,
    result: ExtractResult,
    *,
    metrics: JsonObject,
    checkpoint: JsonObject | None,
) -> ticket_io.Ticket:
    """The ticket of an extraction: masks, provenance, sparsity and metrics (weights are the initial ones)."""
    return ticket_io.Ticket(
        masks={n: m.cpu() for n, m in masks.items()},
        model=model_record(spec.model, net),
        init=spec.init.to_dict(),
        weights_sha256=fingerprint(weights),
        method=method_record(spec, METHODS.get(spec.method.name).score_init, result.details),
        data={k: v for k, v in splits.info.items() if k != "source"},
        sparsity=sparsity_report(masks, spec, result.details),
        metrics=metrics,
        created_by={"ticketcli": __version__, **machine.record()},
        checkpoint=checkpoint,
    )


def method_record(spec: RunSpec, score_init: dict[str, str] | None, details: Details) -> JsonObject:
    """The ticket's `method` field: name, sparsity, the options the method read (Method.options; the others did
    not shape the ticket, so they are left out), the matched ticket, how scores started, score parameter counts."""
    method = spec.method.to_dict()
    read = METHODS.get(spec.method.name).options
    return {
        "name": method["name"],
        "sparsity": method["sparsity"],
        **{k: v for k, v in method.items() if k in read},
        **({"matched_to": method["matched_to"]} if method["matched_to"] is not None else {}),
        "score_init": score_init,
        **({"score_params": details["score_params"]} if "score_params" in details else {}),
    }


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
    def of(cls, report: Mapping[str, Any]) -> SparsityRecord:
        """From sparsity_report's dict."""
        densities = report.get("requested_layer_densities")
        rounds = report.get("rounds")
        return cls(
            requested=report["requested"],
            achieved=report["achieved"],
            kept=report["kept"],
            total=report["total"],
            layers=layer_counts(report["per_layer"]),
            requested_layer_densities=None if densities is None else tuple(densities),
            aug_density=report.get("aug_density"),
            aux_share=report.get("aux_share"),
            projected=bool(report.get("projected")),
            rounds=None if rounds is None else tuple(rounds),
        )

    def to_dict(self) -> JsonObject:
        """The document's `sparsity` (the layers go to `layers[]`)."""
        doc: JsonObject = {"requested": self.requested, "achieved": self.achieved}
        doc.update(kept=self.kept, total=self.total)
        if self.requested_layer_densities is not None:
            doc["requested_layer_densities"] = list(self.requested_layer_densities)
        if self.aug_density is not None:
            doc["aug_density"] = self.aug_density
        if self.aux_share is not None:
            doc["aux_share"] = self.aux_share
        if self.projected:
            doc["projected"] = True
        if self.rounds is not None:
            doc["rounds"] = list(self.rounds)
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
    def of(cls, metrics: Mapping[str, Any]) -> RunMetrics:
        """From run_metrics's dict."""
        t = metrics.get("trained")
        trained = None
        if t is not None:
            trained = TrainedMetrics(SplitMetrics.of(t["test"]), SplitMetrics.of(t["val"]), t["note"])
        return cls(
            test=SplitMetrics.of(metrics["test"]),
            val=SplitMetrics.of(metrics["val"]),
            device=metrics["device"],
            wall_time_s=metrics["wall_time_s"],
            processes=metrics.get("processes"),
            precision=metrics.get("precision"),
            trained=trained,
        )


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class ExtractionResult(Result):
    """What `ticket extract` reports: where the ticket went, what it holds, how well it does. `method`,
    `checkpoint` and `masks_sha256` are the ticket's own fields, as `ticket inspect` reports them from the file."""

    COMMAND: ClassVar[str] = "extract"

    ticket: str  # the path written
    file_bytes: int | None  # None on the ranks of a torchrun run that do not write
    method: JsonObject  # the ticket's method record
    seed: int
    model: str  # the model spec string
    data: JsonObject  # the ticket's data record and where the data came from (`source`)
    sparsity: SparsityRecord
    metrics: RunMetrics
    score_params: dict[str, int] | None  # score methods: trainable and total score tensors per weight
    checkpoint: JsonObject | None
    masks_sha256: str
    threads: int | None = None  # torch's CPU threads, as the command ran

    def body(self) -> JsonObject:
        doc: JsonObject = {
            "ticket": self.ticket,
            "file_bytes": self.file_bytes,
            "method": self.method,
            "seed": self.seed,
            "model": self.model,
            "data": self.data,
        }
        if self.score_params is not None:
            doc["score_params"] = self.score_params
        doc.update(checkpoint=self.checkpoint, masks_sha256=self.masks_sha256)
        if self.threads is not None:
            doc["threads"] = self.threads
        m = self.metrics
        if m.trained is not None:
            t = m.trained
            doc["trained"] = {"metrics": {"test": t.test.to_dict(), "val": t.val.to_dict()}, "note": t.note}
        doc.update(device=m.device, wall_time_s=m.wall_time_s)
        if m.processes is not None:
            doc["processes"] = m.processes
        if m.precision is not None:
            doc["precision"] = m.precision
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
        ticket=str(out),
        file_bytes=size,
        method=tk.method,
        seed=spec.init.seed,
        model=spec.model.to_string(),
        data={**tk.data, "source": source},
        sparsity=SparsityRecord.of(tk.sparsity),
        metrics=RunMetrics.of(tk.metrics),
        score_params=details.get("score_params"),
        checkpoint=tk.checkpoint,
        masks_sha256=ticket_io.masks_sha256(tk.packed()),
    )


def counted_layers(masks: dict[str, torch.Tensor], stored: Any) -> dict[str, JsonObject]:
    """Per-parameter kept, total and achieved sparsity counted from a loaded ticket's masks (what the file claims is
    not repeated), with the auxiliary share it recorded when that is a number in [0, 1]."""
    layers = {}
    for name, s in mask_stats(masks)["per_param"].items():
        entry = {"kept": s["kept"], "total": s["total"], "achieved": 1.0 - s["density"]}
        layers[name] = entry | recorded_aux_share(stored, name)
    return layers
