"""`ticket sweep-k`: edge-popup over scalar and layerwise keep densities vs double-scoring (the
hyperparameter-stability table), over several seeds, locally or on Ray."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Optional, cast

from ticketcli.cli.common import errors_to_exit_codes, model_size, warn_low_space
from ticketcli.cli.declared import declared, given_settings
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
    **given: Any,  # extract's run settings and sweep-k's own (settings/sweep.py, @declared): one flag each
) -> None:
    """Edge-popup over scalar and layerwise keep densities vs double-scoring: the hyperparameter-stability table."""
    # torch: imported when the command runs, not for --help
    from ticketcli.settings.resolve import build_extract_spec, load_config, merge_settings
    from ticketcli.sweep import outputs as sweep_outputs
    from ticketcli.sweep.plan import build_plan, double_scoring_methods
    from ticketcli.sweep.result import SweepRecord, SweepSettings
    from ticketcli.sweep.run import sweep_k as run_sweep_k
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    flags = {**given_settings(SWEEP, given), **given_settings(TRACK, given), "method": "edge-popup"}
    table = RUN.plus(TRACK)  # the keys a config file may set
    seeds, densities, layerwise, band, workers, threads, executor, ray_address = given_settings(OWN, given).values()
    resumable = None if out_dir is None else f"finished runs stay in {out_dir}; the same command resumes"
    with (
        errors_to_exit_codes(),
        stop_on_signals(
            outputs=(plot,) if plot is not None else (), note=lambda: resumable, unit="configuration"
        ) as position,
    ):
        from_config = load_config(config, table)
        if threads is None:
            threads = from_config.get("threads")
        seed_list, band_range, pool, threads = sweep_options(
            seeds, band, densities, layerwise, workers, threads, executor
        )
        fixed_by_sweep = sorted({"method", "seed", "layer_densities", "aug_density", "weights"} & set(from_config))
        if fixed_by_sweep:
            raise UsageError(
                f"{config} sets {', '.join(fixed_by_sweep)}, which sweep-k chooses itself",
                hint="remove these keys for sweep-k",
            )
        merged = merge_settings({**flags, "seed": seed_list[0]}, config, table)
        base = build_extract_spec(merged)
        trackers = track.check(merged["log_to"])
        note = sweep_outputs.load_note(out_dir)
        plot_owned = None if plot is None or note is None else note.owned(plot)  # this sweep's own earlier plot
        if plot is not None:
            check_destination(plot, overwrite=force, owned=plot_owned)  # before the work, not after
            if note is not None:
                note.check(force)  # the note the plot goes in
        tasks = build_plan(
            base, seeds=seed_list, densities=pool, layerwise=layerwise, double_scoring=double_scoring_methods()
        )
        # a ticket (a bit per weight, a bounded header) and a small record per configuration, before the work
        if out_dir is not None:
            warn_low_space({out_dir / "run": len(tasks) * (model_size(base.model) // 8 + (64 << 10))})
        with track.tracked(trackers, lambda: track_feed.sweep_info(base, seed_list), console.warn) as log:
            with report_progress.sweep_progress(len(tasks), quiet=quiet) as progress:
                done = position.track(None)
                logged = None if log is None else track_feed.sweep_child(log, console.warn, base.model.to_string())

                def on_result(record: SweepRecord, resumed: bool) -> None:
                    done(
                        {
                            "epoch": (position.last or {}).get("epoch", 0) + 1,
                            "epochs": len(tasks),
                            "unit": "configuration",
                        }
                    )
                    if progress is not None:
                        progress(record, resumed)
                    if logged is not None:
                        logged(record, resumed)

                result = run_sweep_k(
                    tasks,
                    band=band_range,
                    workers=workers,
                    threads=threads,
                    executor=executor,
                    ray_address=ray_address,
                    out_dir=out_dir,
                    on_result=on_result,
                    overwrite=force,
                    warn=console.warn,
                )
            result = replace(
                result,
                settings=SweepSettings(
                    sparsity=base.method.sparsity,
                    seeds=tuple(seed_list),
                    densities=tuple(pool),
                    layerwise=layerwise,
                    band=band_range,
                    model=base.model.to_string(),
                    dataset=base.data.name,
                    epochs=base.method.epochs,
                    double_scoring=tuple(double_scoring_methods()),
                    workers=workers,
                    threads=threads,
                    executor=executor,
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
            result = replace(result, threads=threads)
            if log is not None:
                track_feed.guarded(track_feed.sweep_final, console.warn)(log, result)
    console.print_json(result.to_document()) if json_out else report_study_tables.sweep_table(result)


def sweep_options(
    seeds: str, band: str, densities: str | None, layerwise: int, workers: int, threads: int | None, executor: Executor
) -> tuple[list[int], tuple[float, float], tuple[float, ...], int]:
    """Validate sweep-k's own options: seeds, band, density pool, worker and thread counts; returns the seeds, the
    band, the pool and each run's torch threads (POOL_THREADS unless given)."""
    from ticketcli.runtime import threads as torch_threads
    from ticketcli.settings.resolve import parse_floats
    from ticketcli.sweep.plan import PAPER_DENSITIES

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
    # parse_floats returns None only for None, and densities is a str here
    pool = PAPER_DENSITIES if densities is None else cast(tuple[float, ...], parse_floats(densities, "--densities"))
    if not all(0 < d <= 1 for d in pool):
        raise UsageError(f"--densities must lie in (0, 1], got {densities!r}")
    layerwise, workers = (OWN[k].check(v) for k, v in (("layerwise", layerwise), ("workers", workers)))
    given = check_threads(threads)
    if executor == "local":
        each = torch_threads.per_worker(workers, given)
    else:  # Ray places each run on a node with that many free CPUs (num_cpus)
        each = torch_threads.POOL_THREADS if given is None else given
    return seed_list, (lo, hi), tuple(pool), each
