"""`ticket drift`: train weights from the init and measure weight drift, negative pre-activations and activation
sparsity, with its activation-sparsity control, ReLUfication and trade-off sweep. The command declares its flags
and dispatches: settings.drift_options.drift_request checks them together into a DriftRequest (the rules any caller
would run), and this module runs what it asks for, with its progress display, plot and trackers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import declared, given_settings
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.drift import DRIFT, FEATURES
from ticketcli.settings.flags import DRIFT_FLAGS
from ticketcli.settings.reader import DRIFT_READER
from ticketcli.settings.track import TRACK_FLAG
from ticketcli.specs.drift import Features

if TYPE_CHECKING:
    from ticketcli.drift.result import DriftResult, TradeoffResult
    from ticketcli.settings.drift_options import DriftRequest


@declared(DRIFT, FEATURES, DRIFT_READER, TRACK_FLAG, flags=DRIFT_FLAGS)
def drift(
    ticket: Optional[Path] = None,
    weights: Optional[Path] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    run_dir: Optional[Path] = None,
    checkpoint_every: Optional[int] = None,
    resume: Optional[Path] = None,
    json_out: bool = False,
    quiet: bool = False,
    **given: Any,  # the settings of settings/drift.py (@declared): one flag each
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    # torch: imported when the command runs, not for --help
    from ticketcli.drift import run as drift_run
    from ticketcli.report import drift_views
    from ticketcli.runtime.threads import using
    from ticketcli.settings.drift_options import drift_request
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    keeper: Any = None

    def note() -> str | None:  # where an interrupted run continues
        return None if keeper is None else str(keeper.note())

    outputs = (plot,) if plot is not None else ()
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs, unit="step", note=note) as position:
        groups = {
            "run": given_settings(DRIFT, given),
            "features": given_settings(FEATURES, given),
            "reader": given_settings(DRIFT_READER, given),
            "track": given_settings(TRACK_FLAG, given),
            "inputs": {"ticket": ticket, "weights": weights, "checkpoint_every": checkpoint_every},
        }
        folder, recorded = kept_run(groups, run_dir, resume)
        inputs = groups["inputs"]
        ticket = None if inputs["ticket"] is None else Path(inputs["ticket"])
        # the flags checked together, by the rules any caller of drift_request runs (settings/drift_options.py)
        request = drift_request(
            groups["run"],
            groups["features"],
            groups["reader"],
            ticket=ticket,
            weights=None if inputs["weights"] is None else Path(inputs["weights"]),
            log_to=groups["track"]["log_to"],
        )
        trackers = track.check(request.log_to)
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        location = request.location()
        record, live = None, None
        if folder is not None:
            keeper = open_keeper(folder, request.spec(location), groups, recorded)
            record = tracker_record(folder) if trackers else None
        info = partial(track_feed.drift_info, request.model, ticket)
        resume_ids, on_open = (None, None) if record is None else (dict(record.ids), record.opened)
        with track.tracked(trackers, info, console.warn, resume_ids, on_open) as log:
            if log is not None and keeper is not None:  # logged as the checkpoints keep it, resumed where they do
                keeper.on_kept = live = track_feed.DriftLive(log, console.warn)
            result: DriftResult | TradeoffResult
            if request.features is not None:
                result = run_features(request, request.features, location, position, quiet=quiet, keeper=keeper)
            else:
                spec = request.spec(location)
                total = spec.steps * (1 if ticket is not None else len(spec.seeds))
                with (
                    report_progress.display(total, quiet=quiet, label="drift", unit="step", rated=True) as progress,
                    using(request.threads) as used,
                ):
                    plain = drift_run.run_drift(
                        spec,
                        ticket=ticket,
                        weights=request.weights,
                        progress=position.track(progress),
                        policy=request.policy,
                        keeper=keeper,
                    )
                result = replace(plain, threads=used)
            warn_unverified(result)
            if plot is not None:
                write_atomic(plot, drift_views.figure(result), overwrite=force, checked_at_start=True)
                result = replace(result, plot=str(plot))
            if log is not None:
                track_feed.guarded(track_feed.drift_final, console.warn)(log, result, console.warn, live)
    console.print_json(result.to_document()) if json_out else drift_views.show(result)


def kept_run(
    groups: dict[str, Any], run_dir: Path | None, resume: Path | None
) -> tuple[Path | None, dict[str, Any] | None]:
    """--run-dir (a new run dir) or --resume (the flags it recorded, each given flag checked to agree, replace
    `groups`): the folder and run.json's document on a resume."""
    from ticketcli.drift import rundir
    from ticketcli.settings import drift_rundir

    if resume is not None:
        if run_dir is not None:
            raise UsageError("--resume DIR names the run dir; drop --run-dir")
        doc = rundir.open_settings(resume)
        where = resume / rundir.SETTINGS
        groups.update(drift_rundir.merge(drift_rundir.recorded(doc, where), groups, where))
    elif run_dir is None:
        if groups["inputs"]["checkpoint_every"] is not None:
            raise UsageError("--checkpoint-every only goes with --run-dir (or --resume)")
        return None, None
    else:
        doc = None
    if groups["inputs"]["checkpoint_every"] is not None:
        DRIFT_FLAGS["checkpoint_every"].check(groups["inputs"]["checkpoint_every"])
    drift_rundir.check_features(groups["features"])
    return (resume or run_dir), doc


def tracker_record(folder: Path) -> Any:
    """The run dir's trackers.json: the --log-to runs a resume reopens, each recorded as soon as it is open."""
    from ticketcli.drift import rundir

    return rundir.TrackerRecord(folder)


def open_keeper(folder: Path, spec: Any, groups: dict[str, Any], recorded: dict[str, Any] | None) -> Any:
    """The run dir's keeper: a new run dir records the flags and the settings they resolve to; a resumed one must
    resolve to the settings it recorded (the same data, the same defaults)."""
    from ticketcli.drift import rundir
    from ticketcli.drift.keep import RunKeeper
    from ticketcli.drift.run import logged_steps
    from ticketcli.settings import drift_rundir

    settings = {**spec.to_dict(), "seeds": list(spec.seeds), "device": spec.device}
    settings = json.loads(json.dumps(settings))
    if recorded is None:
        rundir.create(folder, {"flags": drift_rundir.record(groups), "settings": settings})
    elif recorded.get("settings") != settings:
        raise UsageError(
            f"the run in {folder} recorded settings that its flags no longer resolve to (the data or a default "
            "changed)",
            hint="start a new run with --run-dir",
        )
    every = groups["inputs"]["checkpoint_every"] or spec.log_every
    return RunKeeper(folder, every, logged_steps(spec.steps, spec.log_every), resume=recorded is not None)


def run_features(
    request: DriftRequest,
    features: Features,
    location: dict[str, Any],
    position: Any,
    *,
    quiet: bool,
    keeper: Any = None,
) -> DriftResult | TradeoffResult:
    """Run the validated feature (activation control, ReLUfication or the trade-off sweep) with the request's torch
    threads (None: torch's own; --tradeoff: per worker, default 1); its result's class says which document, tables
    and plot it has (report.drift_views.show, .figure)."""
    from ticketcli.data.registry import DATASETS
    from ticketcli.drift import relufy as relufy_core
    from ticketcli.drift import run as drift_run
    from ticketcli.runtime.threads import per_worker, using

    if features.targets is not None:
        each = per_worker(features.workers, request.threads)
        return _tradeoff(request, features, location, position, quiet=quiet, threads=each)
    spec = request.spec(location)
    per_run = spec.steps
    if features.relufy is not None:
        n = spec.data.n_extract or DATASETS.get(spec.data.name).n_extract  # the bar's total; the run counts
        per_run += relufy_core.fine_tune_steps(n, spec.batch_size, features.relufy.epochs)
    total = per_run * (1 if request.ticket is not None else len(spec.seeds))
    ticket, weights, policy = request.ticket, request.weights, request.policy
    with (
        report_progress.display(total, quiet=quiet, label="drift", unit="step", rated=True) as progress,
        using(request.threads) as used,
    ):
        result: DriftResult
        if features.relufy is not None:
            result = relufy_core.run_relufy(
                spec, features.relufy, progress=position.track(progress), ticket=ticket, weights=weights, policy=policy
            )
        else:
            result = drift_run.run_drift(
                spec,
                control=features.control,
                progress=position.track(progress),
                ticket=ticket,
                weights=weights,
                policy=policy,
                keeper=keeper,
            )
    return replace(result, threads=used)


def _tradeoff(
    request: DriftRequest, features: Features, location: dict[str, Any], position: Any, *, quiet: bool, threads: int
) -> TradeoffResult:
    """--tradeoff: one controlled run per target and model, in `features.workers` processes of `threads` each."""
    from ticketcli.drift import tradeoff as drift_tradeoff

    assert features.control is not None and features.targets is not None
    specs = request.tradeoff_specs(location)
    tasks = drift_tradeoff.plan(specs, features.targets, features.control.mode, features.control.freeze_after)
    done = 0
    with report_progress.display(len(tasks), quiet=quiet, label="tradeoff") as progress:
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
