"""What each command logs (docs/tracking.md lists the tags): its progress reports become scalars per step, its typed
result the final metrics, parameters, tags and artifacts. Every function here only reads; a mistake in one is a
warning (`guarded`), never a failed run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ticketcli.contract.schema import JsonObject
from ticketcli.track.base import Tracking, Warn, first_line, flat
from ticketcli.track.info import RunInfo, Scalar, run_name

if TYPE_CHECKING:
    from ticketcli.sweep.result import SweepRecord


def guarded(fn: Callable[..., None], warn: Warn, what: str = "--log-to") -> Callable[..., None]:
    """`fn`, whose first error is a warning and which does nothing after it."""
    dead = [False]

    def call(*args: Any) -> None:
        if dead[0]:
            return
        try:
            fn(*args)
        except Exception as e:
            dead[0] = True
            warn(f"{what}: {first_line(e)}; the run goes on without logging this")

    return call


class Steps:
    """Progress reports -> steps that never go back: iterated restarts its epochs each round, the steps go on."""

    def __init__(self) -> None:
        self.offset, self.last = 0, 0

    def __call__(self, epoch: int) -> int:
        if epoch + self.offset <= self.last:
            self.offset = self.last
        self.last = epoch + self.offset
        return self.last


def density_text(sparsity: float | None, layerwise: object = None) -> str:
    if layerwise:
        return "layerwise"
    return "dense" if sparsity is None else f"d{1 - sparsity:.4g}"


# extract ---------------------------------------------------------------------------------------------------------


def extract_info(spec: Any) -> RunInfo:
    """The run of an extraction, from its spec: named from method, model, seed and keep density."""
    m = spec.method
    model = spec.model.to_string()
    name = run_name(m.name, model, f"seed{spec.init.seed}", density_text(m.sparsity, m.layer_densities))
    params = {"method": m.name, "model": model, "seed": spec.init.seed, "dataset": spec.data.name}
    return RunInfo(name, params, {"command": "extract"})


def extract_epochs(tracking: Tracking, warn: Warn) -> tuple[Callable[[JsonObject], None], Steps]:
    """The progress callback that logs each epoch's report: train/loss, train/accuracy (running, on the extraction
    split), train/sparsity (the current masks), train/density/<parameter>, train/round (iterated); and its steps,
    whose last one extract_final logs at."""
    steps = Steps()

    def log(stats: JsonObject) -> None:
        if "loss" not in stats:
            return
        values = {f"train/{k}": stats[k] for k in ("loss", "accuracy", "sparsity", "round") if k in stats}
        values |= {f"train/density/{n}": d for n, d in (stats.get("densities") or {}).items()}
        tracking.scalars(steps(int(stats["epoch"])), values)

    return guarded(log, warn), steps


def extract_final(tracking: Tracking, result: Any, step: int) -> None:
    """The extraction's result: the rewound ticket's test/ and val/ accuracy and loss (a language model's: and
    bits_per_char), sparsity/achieved and sparsity/requested, density/<parameter>, aux_share and
    aux_share/<parameter> (double-scoring) at `step` (the last epoch's); the ticket's recorded settings as
    parameters; schema and masks_sha256 as tags; the ticket file."""
    m, sp = result.metrics, result.sparsity
    metrics: dict[str, float] = {
        "test/accuracy": m.test.accuracy,
        "test/loss": m.test.loss,
        "val/accuracy": m.val.accuracy,
        "val/loss": m.val.loss,
        "sparsity/achieved": sp.achieved,
        "sparsity/requested": sp.requested,
    }
    for split, sm in (("test", m.test), ("val", m.val)):  # a language model's ticket: bits per character too
        if sm.bits_per_char is not None:
            metrics[f"{split}/bits_per_char"] = sm.bits_per_char
    metrics |= {f"density/{c.name}": c.kept / c.total for c in sp.layers if c.total}
    if sp.aux_share is not None:
        metrics["aux_share"] = sp.aux_share
        metrics |= {f"aux_share/{c.name}": c.aux_share for c in sp.layers if c.aux_share is not None}
    data = {k: v for k, v in result.data.items() if k in ("dataset", "n_extract", "n_val", "split_seed")}
    hparams: dict[str, Scalar] = {**flat(result.method.to_json(), "method."), "model": result.model}
    hparams |= {"seed": result.seed, "method": result.method.name, **flat(data, "data.")}
    tracking.finish(step, metrics, hparams)
    doc = result.to_document()
    tracking.tags({"schema": doc["schema"], "masks_sha256": result.masks_sha256, "ticket": str(result.ticket)})
    tracking.artifact(result.ticket)


# train-weak ------------------------------------------------------------------------------------------------------


def weak_info(ticket: Path) -> RunInfo:
    """train-weak's run, named from the ticket's method, model, seed and density (read from its header)."""
    from ticketcli.ticketfile import ticket as ticket_io

    tk = ticket_io.scan(ticket)
    sparsity = tk.ticket.method.sparsity
    model = tk.ticket.model.spec or tk.ticket.model.arch or "model"
    name = run_name("weak", tk.ticket.method.name, model, f"seed{tk.ticket.init.seed}")
    name = run_name(name, density_text(sparsity if isinstance(sparsity, float) else None))
    tags = {"command": "train-weak", "ticket": str(ticket)}
    if tk.ticket.masks_sha256:
        tags["masks_sha256"] = tk.ticket.masks_sha256
    return RunInfo(name, {"method": tk.ticket.method.name}, tags)


def weak_epochs(tracking: Tracking, warn: Warn) -> Callable[[JsonObject], None]:
    """Each epoch of each run (masked, dense): <run>/train_loss, <run>/train_accuracy, <run>/val_accuracy,
    <run>/val_loss."""

    def log(stats: JsonObject) -> None:
        run = stats["run"]
        names = {"loss": "train_loss", "accuracy": "train_accuracy", "val_accuracy": "val_accuracy"}
        names["val_loss"] = "val_loss"
        tracking.scalars(int(stats["epoch"]), {f"{run}/{v}": stats[k] for k, v in names.items() if k in stats})

    return guarded(log, warn)


def weak_final(tracking: Tracking, result: Any) -> None:
    """Per run: <run>/test_accuracy and <run>/test_loss before (step 0) and after training (the last epoch),
    <run>/gain and <run>/best_val_accuracy; the weight-training settings as parameters; the schema as a tag; the
    ticket, the trained weights and the plot as artifacts."""
    epochs = result.spec.epochs
    final: dict[str, float] = {}
    for label, run in (("masked", result.masked), ("dense", result.dense)):
        if run is None:
            continue
        tracking.scalars(0, {f"{label}/test_accuracy": run.initial.test.accuracy})
        tracking.scalars(0, {f"{label}/test_loss": run.initial.test.loss})
        final |= {f"{label}/test_accuracy": run.final.test.accuracy, f"{label}/test_loss": run.final.test.loss}
        final |= {f"{label}/gain": run.gain, f"{label}/best_val_accuracy": run.best_val_accuracy}
    hparams: dict[str, Scalar] = {**flat(dataclasses.asdict(result.spec), "weak."), "model": result.model}
    hparams |= {"seed": result.seed, "method": result.method.name, "dense_baseline": result.dense is not None}
    hparams |= {"sparsity/achieved": result.sparsity.achieved, "dataset": result.data.get("dataset", "")}
    tracking.finish(epochs, final, hparams)
    tracking.tags({"schema": result.to_document()["schema"], "integrity": result.integrity})
    tracking.artifact(result.ticket)
    tracking.artifact(result.plot)
    tracking.artifact(None if result.out is None else result.out.path)


# sweep-k ---------------------------------------------------------------------------------------------------------


def sweep_info(base: Any, seeds: list[int]) -> RunInfo:
    """The parent run of a sweep: named from its model, seeds and requested sparsity."""
    model = base.model.to_string()
    name = run_name("sweep-k", model, "seeds" + "-".join(str(s) for s in seeds), density_text(base.method.sparsity))
    params = {"model": model, "dataset": base.data.name, "epochs": base.method.epochs, "sparsity": base.method.sparsity}
    return RunInfo(name, {**params, "seeds": ",".join(str(s) for s in seeds)}, {"command": "sweep-k"})


# what a sweep's child run logs of its record (the bits per character: a language model's run)
SWEEP_MEASURES = ("test_accuracy", "val_accuracy", "test_loss", "achieved_sparsity")
SWEEP_MEASURES_LM = ("test_bits_per_char", "val_bits_per_char")


def sweep_child(tracking: Tracking, warn: Warn, model: str) -> Callable[[SweepRecord, bool], None]:
    """on_result's logger: one child run per grid point (named by its id), its identity as parameters,
    test_accuracy, val_accuracy, test_loss and achieved_sparsity (a language model's: test_bits_per_char and
    val_bits_per_char too) at step 0, masks_sha256 as a tag, its ticket (with --out-dir) as an artifact."""

    def log(run: SweepRecord, resumed: bool) -> None:
        record = run.flat()
        method = run.method["name"]
        keys = ("id", "seed", "group", "config", "fixed", "requested_sparsity", "layer_densities")
        params: dict[str, Scalar] = {**flat({k: record[k] for k in keys if k in record}), "method": method}
        child = tracking.child(RunInfo(run_name(record["id"]), {**params, "model": model}, {"resumed": str(resumed)}))
        # the bits per character: a language model's run has them (its flat() only then)
        metrics = {k: record[k] for k in (*SWEEP_MEASURES, *SWEEP_MEASURES_LM) if k in record}
        child.finish(0, metrics, {})
        child.tags({"masks_sha256": record["masks_sha256"]})
        if record.get("ticket"):
            child.artifact(record["ticket"])
        child.close("FINISHED")

    return guarded(log, warn)


def sweep_final(tracking: Tracking, result: Any) -> None:
    """The parent run: the sweep's settings as parameters, the schema as a tag, the plot as an artifact."""
    settings = {} if result.settings is None else result.settings.to_dict()
    tracking.finish(0, {"runs": len(result.records)}, flat(settings))
    tracking.tags({"schema": result.to_document()["schema"]})
    tracking.artifact(result.plot)
