"""`sweep_k`: edge-popup over scalar and layerwise keep densities against double-scoring over several seeds, as
`ticket sweep-k` runs it (the same options, sweep.options; the same plan and run, sweep.plan and sweep.run),
returning its typed result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import count
from pathlib import Path
from typing import Any

from ticketcli.api.args import listed, optional_path, optional_text, progress_display
from ticketcli.api.keywords import speaks_keywords
from ticketcli.errors import UsageError
from ticketcli.methods.base import Progress
from ticketcli.report import console
from ticketcli.report import plots as report_plots
from ticketcli.report import progress as report_progress
from ticketcli.settings.resolve import build_extract_spec, load_config, merge_settings
from ticketcli.settings.run import RUN
from ticketcli.settings.sweep import OWN, SWEEP
from ticketcli.settings.track import TRACK
from ticketcli.specs.ranges import show
from ticketcli.sweep import outputs as sweep_outputs
from ticketcli.sweep.options import check_config_keys, sweep_options, sweep_settings
from ticketcli.sweep.plan import build_plan, double_scoring_methods
from ticketcli.sweep.result import SweepRecord, SweepResult
from ticketcli.sweep.run import sweep_k as run_sweep_k
from ticketcli.track import base as track
from ticketcli.track import feed as track_feed

NAMED = frozenset({"model", "dataset", "seed", "method", "threads"})  # sweep_k's own arguments, or chosen by it


def option_keywords() -> frozenset[str]:
    """The keywords sweep_k's **options take: extract's settings a sweep shares (`ticket sweep-k`'s flags)."""
    return frozenset(SWEEP.config_keys()) - NAMED


@speaks_keywords("sweep_k", option_keywords, aliases={"force": "overwrite", "dataset": "data"})
def sweep_k(
    model: str | None = None,
    data: str | None = None,
    *,
    seeds: Sequence[int] | str | None = None,
    densities: Sequence[float] | str | None = None,
    layerwise: int | None = None,
    band: tuple[float, float] | str | None = None,
    workers: int | None = None,
    threads: int | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
    out_dir: str | Path | None = None,
    plot: str | Path | None = None,
    overwrite: bool = False,
    config: str | Path | None = None,
    progress: bool | Progress = True,
    log_to: str | list[str] | None = None,
    **options: Any,
) -> SweepResult:
    """Run the hyperparameter-stability sweep, as `ticket sweep-k` does, and return what `ticket sweep-k --json`
    prints (a SweepResult: `.records`, one per run, and `.summary`, the edge-popup range against double-scoring
    per seed and over seeds, with `.settings`).

    model: a model spec string (default sweep-k's); data: a dataset name (the runs are worker processes: the
    caller's own tensors are not swept). seeds: the seeds (each seed's runs share one initialisation; default 0,
    1, 2); densities: the scalar keep densities, also the pool of the layerwise draws (default the paper's);
    layerwise: random layerwise tuples per seed; band: (lo, hi), the constrained oracle's achieved-sparsity band.
    workers: local worker processes; threads: torch threads per run; executor: "local" or "ray" (ray_address:
    a cluster). out_dir: keep each run's ticket and record there, and resume from them (a file there the sweep did
    not write is replaced only with overwrite=True). plot: a PNG of test accuracy against achieved sparsity
    (checked before the work, as `out_dir`'s files are). options: extract's settings a sweep shares (sparsity=,
    epochs=, lr=, n_extract=, ...), as the command's flags. progress: a bar on stderr, False, or a callable per
    configuration. log_to: experiment trackers, as `--log-to` (a parent run and a child run per configuration)."""
    optional_text(model, "model", "a model spec string")
    optional_text(data, "data", "a dataset name (a sweep's runs load it in their own processes)")
    optional_text(ray_address, "ray_address", "an address string")
    own = {
        "seeds": _or(listed(seeds, "seeds"), OWN["seeds"].default),
        "densities": listed(densities, "densities"),
        "layerwise": OWN["layerwise"].default if layerwise is None else layerwise,
        "band": _or(listed(band, "band", "-"), OWN["band"].default),
        "workers": OWN["workers"].default if workers is None else workers,
        "executor": OWN["executor"].default if executor is None else _executor(executor),
    }
    config = optional_path(config, "config")
    out = optional_path(out_dir, "out_dir")
    table = RUN.plus(TRACK)  # the keys a config file may set: extract's, and log_to
    from_config = load_config(config, table)
    o = sweep_options(own, from_config.get("threads") if threads is None else threads)
    check_config_keys(config, from_config)
    flags = {**options, "model": model, "dataset": data, "method": "edge-popup", "seed": o.seeds[0]}
    merged = merge_settings({**flags, "log_to": log_to}, config, table)
    base = build_extract_spec(merged)
    tasks = build_plan(
        base, seeds=o.seeds, densities=o.densities, layerwise=o.layerwise, double_scoring=double_scoring_methods()
    )
    dests = track.check(merged["log_to"])
    png = optional_path(plot, "plot")
    plot_owned = None if png is None else sweep_outputs.check_plot(Path(png), out, overwrite)  # before the work
    done = count(1)
    with (
        track.tracked(dests, lambda: track_feed.sweep_info(base, list(o.seeds)), console.warn) as log,
        progress_display(progress, len(tasks), "sweep-k", unit="configuration", items=True) as shown,
    ):
        logged = None if log is None else track_feed.sweep_child(log, console.warn, base.model.to_string())

        def on_result(record: SweepRecord, resumed: bool) -> None:
            if shown is not None:
                shown(report_progress.sweep_done(next(done), len(tasks), record, resumed))
            if logged is not None:
                logged(record, resumed)

        result = run_sweep_k(
            tasks,
            band=o.band,
            workers=o.workers,
            threads=o.threads,
            executor=o.executor,
            ray_address=ray_address,
            out_dir=out,
            on_result=on_result,
            overwrite=overwrite,
            warn=console.warn,
        )
        result = replace(
            result, settings=sweep_settings(base, o, None if out is None else Path(out)), threads=o.threads
        )
        if png is not None:
            sweep_outputs.write_plot(Path(png), report_plots.sweep_plot(result), out, overwrite, plot_owned)
            result = replace(result, plot=png)
        if log is not None:
            track_feed.guarded(track_feed.sweep_final, console.warn)(log, result)
    return result


def _or(value: object, default: object) -> object:
    return default if value is None else value


def _executor(value: object) -> str:
    choices = OWN["executor"].kind
    if value not in choices:
        raise UsageError(f"executor= must be one of {', '.join(choices)}, got {show(value)}")
    return str(value)
