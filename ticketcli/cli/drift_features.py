"""`ticket drift`'s activation-sparsity control, ReLUfication and trade-off sweep: the run that serves them once
drift.options has validated them (their options are declared in settings/drift.py's FEATURES)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ticketcli.report import progress as report_progress
from ticketcli.specs.drift import Features

if TYPE_CHECKING:
    from ticketcli.drift.result import DriftResult, TradeoffResult


def run_features(
    features: Features,
    settings: dict[str, Any],
    location: dict[str, Any],
    position: Any,
    *,
    quiet: bool,
    threads: int | None = None,
    **on_ticket: Any,
) -> DriftResult | TradeoffResult:
    """Run the validated feature with `threads` torch threads (None: torch's own; --tradeoff: per worker, default
    1); its result's class says which document, tables and plot it has (drift.views.show, .figure)."""
    # torch: imported when the command runs, not for --help
    from ticketcli.data.registry import DATASETS
    from ticketcli.drift import relufy as relufy_core
    from ticketcli.drift import run as drift_run
    from ticketcli.runtime.threads import per_worker, using
    from ticketcli.settings.drift_options import build_drift_spec

    if features.targets is not None:
        each = per_worker(features.workers, threads)
        return _tradeoff(features, settings, location, position, quiet=quiet, threads=each)
    if features.relufy is not None:
        settings = {**settings, "activation": features.relufy.source}
    spec = build_drift_spec(settings, location)
    per_run = spec.steps
    if features.relufy is not None:
        n = spec.data.n_extract or DATASETS.get(spec.data.name).n_extract  # the bar's total; the run counts
        per_run += relufy_core.fine_tune_steps(n, spec.batch_size, features.relufy.epochs)
    total = per_run * (1 if on_ticket.get("ticket") is not None else len(spec.seeds))
    with report_progress.drift_progress(total, quiet=quiet) as progress, using(threads) as used:
        result: DriftResult
        if features.relufy is not None:
            result = relufy_core.run_relufy(spec, features.relufy, progress=position.track(progress), **on_ticket)
        else:
            result = drift_run.run_drift(spec, control=features.control, progress=position.track(progress), **on_ticket)
    return replace(result, threads=used)


def _tradeoff(
    features: Features, settings: dict[str, Any], location: dict[str, Any], position: Any, *, quiet: bool, threads: int
) -> TradeoffResult:
    from ticketcli.drift import tradeoff as drift_tradeoff
    from ticketcli.settings.drift_options import build_drift_spec

    assert features.control is not None and features.targets is not None
    specs = [build_drift_spec({**settings, "model": m}, location) for m in features.models]
    tasks = drift_tradeoff.plan(specs, features.targets, features.control.mode, features.control.freeze_after)
    done = 0
    with report_progress.epoch_progress(len(tasks), quiet=quiet, label="tradeoff") as progress:
        track: Callable[[dict[str, Any]], None] = position.track(progress)

        def on_result(r: dict[str, Any]) -> None:
            nonlocal done
            done += 1
            track(
                {
                    "epoch": done,
                    "unit": "run",
                    "loss": r["loss"],
                    "accuracy": r["accuracy"],
                    "sparsity": r["achieved_sparsity"],
                }
            )

        return drift_tradeoff.run_tradeoff(tasks, workers=features.workers, threads=threads, on_result=on_result)
