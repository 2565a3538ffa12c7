"""`ticket sweep-k`: edge-popup over scalar and layerwise keep densities vs double-scoring (the
hyperparameter-stability table), over several seeds, locally or on Ray."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Optional

from ticketcli.cli.common import errors_to_exit_codes, model_size, warn_low_space
from ticketcli.cli.declared import Given, declared, given_settings
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination, write_owned
from ticketcli.report import console
from ticketcli.report import plots as report_plots
from ticketcli.report import progress as report_progress
from ticketcli.report import study_tables as report_study_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import SWEEP_FLAGS
from ticketcli.settings.registry import check_threads
from ticketcli.settings.run import RUN
from ticketcli.settings.sweep import OWN, SWEEP
from ticketcli.settings.track import TRACK

Executor = Literal["local", "ray"]


@declared(SWEEP, OWN, TRACK, flags=SWEEP_FLAGS)
def sweep_k(
    out_dir: Optional[Path] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    config: Optional[Path] = None,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # extract's run settings and sweep-k's own (settings/sweep.py, @declared): one flag each
) -> None:
    """Edge-popup over scalar and layerwise keep densities vs double-scoring: the hyperparameter-stability table."""
    from ticketcli.data import places
    from ticketcli.settings.resolve import build_extract_spec, load_config, merge_settings
    from ticketcli.sweep.result import SweepRecord, SweepSettings
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    flags = {**given_settings(SWEEP, given), **given_settings(TRACK, given), "method": "edge-popup"}
    table = RUN.plus(TRACK)  # the keys a config file may set
    own = given_settings(OWN, given)  # read by name: a reordered table cannot swap two options
    with errors_to_exit_codes():  # every refusal that needs no torch, before torch is imported
        from_config = load_config(config, table)
        o = sweep_options(own, from_config.get("threads") if own["threads"] is None else own["threads"])
        fixed_by_sweep = sorted({"method", "seed", "layer_densities", "aug_density", "weights"} & set(from_config))
        if fixed_by_sweep:
            raise UsageError(
                f"{config} sets {', '.join(fixed_by_sweep)}, which sweep-k chooses itself",
                hint="remove these keys for sweep-k",
            )
        merged = merge_settings({**flags, "seed": o.seeds[0]}, config, table)
        base = build_extract_spec(merged)
        trackers = track.check(merged["log_to"])
        places.check_present(base.data)

    # torch: imported once the command line is accepted
    from ticketcli.sweep import outputs as sweep_outputs
    from ticketcli.sweep.plan import build_plan, double_scoring_methods
    from ticketcli.sweep.run import sweep_k as run_sweep_k

    resumable = None if out_dir is None else f"finished runs stay in {out_dir}; the same command resumes"
    with (
        errors_to_exit_codes(),
        stop_on_signals(
            outputs=(plot,) if plot is not None else (), note=lambda: resumable, unit="configuration"
        ) as position,
    ):
        note = sweep_outputs.load_note(out_dir)
        plot_owned = None if plot is None or note is None else note.owned(plot)  # this sweep's own earlier plot
        if plot is not None:
            check_destination(plot, overwrite=force, owned=plot_owned)  # before the work, not after
            if note is not None:
                note.check(force)  # the note the plot goes in
        tasks = build_plan(
            base, seeds=o.seeds, densities=o.densities, layerwise=o.layerwise, double_scoring=double_scoring_methods()
        )
        # a ticket (a bit per weight, a bounded header) and a small record per configuration, before the work
        if out_dir is not None:
            warn_low_space({out_dir / "run": len(tasks) * (model_size(base.model) // 8 + (64 << 10))})
        with track.tracked(trackers, lambda: track_feed.sweep_info(base, list(o.seeds)), console.warn) as log:
            shown = report_progress.display(len(tasks), quiet=quiet, label="sweep-k", unit="configuration", items=True)
            with shown as progress:
                done = position.track(progress)
                logged = None if log is None else track_feed.sweep_child(log, console.warn, base.model.to_string())

                def on_result(record: SweepRecord, resumed: bool) -> None:
                    done(
                        report_progress.sweep_done(
                            (position.last or {}).get("epoch", 0) + 1, len(tasks), record, resumed
                        )
                    )
                    if logged is not None:
                        logged(record, resumed)

                result = run_sweep_k(
                    tasks,
                    band=o.band,
                    workers=o.workers,
                    threads=o.threads,
                    executor=o.executor,
                    ray_address=own["ray_address"],
                    out_dir=out_dir,
                    on_result=on_result,
                    overwrite=force,
                    warn=console.warn,
                )
            result = replace(
                result,
                settings=SweepSettings(
                    sparsity=base.method.sparsity,
                    seeds=o.seeds,
                    densities=o.densities,
                    layerwise=o.layerwise,
                    band=o.band,
                    model=base.model.to_string(),
                    dataset=base.data.name,
                    epochs=base.method.epochs,
                    double_scoring=tuple(double_scoring_methods()),
                    workers=o.workers,
                    threads=o.threads,
                    executor=o.executor,
                    out_dir=None if out_dir is None else str(out_dir),
                ),
            )
            if plot is not None:
                png = report_plots.sweep_plot(result)
                # a plot another sweep on this --out-dir drew meanwhile is in the note: replaced like our own
                again = plot_owned or sweep_outputs.written_by(out_dir, plot)
                written = write_owned(plot, png, overwrite=force, owned=again, checked_at_start=True)
                sweep_outputs.remember(out_dir, written, png)
                result = replace(result, plot=str(plot))
            result = replace(result, threads=o.threads)
            if log is not None:
                track_feed.guarded(track_feed.sweep_final, console.warn)(log, result)
    console.print_json(result.to_document()) if json_out else report_study_tables.sweep_table(result)


@dataclass(frozen=True)
class SweepOptions:
    """sweep-k's own options, checked: the seeds, the band, the density pool, the layerwise draws, the workers,
    each run's torch threads (POOL_THREADS unless given) and the executor."""

    seeds: tuple[int, ...]
    band: tuple[float, float]
    densities: tuple[float, ...]
    layerwise: int
    workers: int
    threads: int
    executor: Executor


def sweep_options(own: Given, threads: int | None) -> SweepOptions:
    """Validate sweep-k's own options (`own`, by name; `threads`: the flag's, else the config file's)."""
    from ticketcli.runtime import threads as torch_threads
    from ticketcli.settings.sweep import PAPER_DENSITIES

    seeds, band, densities = own["seeds"], own["band"], own["densities"]
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise UsageError(f"--seeds must be distinct non-negative integers, got {seeds!r}")
    seed_list = [RUN["seed"].check(s, "--seeds entries") for s in seed_list]
    parts = band.split("-")
    try:
        lo, hi = (float(parts[0]), float(parts[1])) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        lo = hi = math.nan
    if not 0 <= lo <= hi <= 1:  # NaN fails every comparison
        raise UsageError(f"--band must be LO-HI with 0 <= LO <= HI <= 1, got {band!r}")
    try:
        pool = PAPER_DENSITIES if densities is None else tuple(float(t) for t in densities.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--densities must be comma-separated numbers, got {densities!r}") from None
    if not pool:
        raise UsageError("--densities is empty")
    if not all(0 < d <= 1 for d in pool):
        raise UsageError(f"--densities must lie in (0, 1], got {densities!r}")
    layerwise, workers = (OWN[k].check(own[k]) for k in ("layerwise", "workers"))
    given = check_threads(threads)
    if own["executor"] == "local":
        each = torch_threads.per_worker(workers, given)
    else:  # Ray places each run on a node with that many free CPUs (num_cpus)
        each = torch_threads.POOL_THREADS if given is None else given
    return SweepOptions(tuple(seed_list), (lo, hi), tuple(pool), layerwise, workers, each, own["executor"])
