"""`ticket sweep-k`: edge-popup over scalar and layerwise keep densities vs double-scoring (the
hyperparameter-stability table), over several seeds, locally or on Ray."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ticketcli.cli.common import errors_to_exit_codes, model_size, warn_low_space
from ticketcli.cli.declared import declared, given_settings
from ticketcli.report import console
from ticketcli.report import plots as report_plots
from ticketcli.report import progress as report_progress
from ticketcli.report import study_tables as report_study_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import SWEEP_FLAGS
from ticketcli.settings.run import RUN
from ticketcli.settings.sweep import OWN, SWEEP
from ticketcli.settings.track import TRACK


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
    from ticketcli.sweep.options import check_config_keys, sweep_options, sweep_settings
    from ticketcli.sweep.result import SweepRecord
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    flags = {**given_settings(SWEEP, given), **given_settings(TRACK, given), "method": "edge-popup"}
    table = RUN.plus(TRACK)  # the keys a config file may set
    own = given_settings(OWN, given)  # read by name: a reordered table cannot swap two options
    with errors_to_exit_codes():  # every refusal that needs no torch, before torch is imported
        from_config = load_config(config, table)
        o = sweep_options(own, from_config.get("threads") if own["threads"] is None else own["threads"])
        check_config_keys(config, from_config)
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
        plot_owned = None if plot is None else sweep_outputs.check_plot(plot, out_dir, force)  # before the work
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
            result = replace(result, settings=sweep_settings(base, o, out_dir))
            if plot is not None:
                sweep_outputs.write_plot(plot, report_plots.sweep_plot(result), out_dir, force, plot_owned)
                result = replace(result, plot=str(plot))
            result = replace(result, threads=o.threads)
            if log is not None:
                track_feed.guarded(track_feed.sweep_final, console.warn)(log, result)
    console.print_json(result.to_document()) if json_out else report_study_tables.sweep_table(result)
