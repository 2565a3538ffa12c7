"""`ticket drift` from its flags to its result: the run dir it keeps or resumes (--run-dir, --resume), the flags
checked together (options.drift_request), the run the request asks for (plain drift, activation control,
ReLUfication or the trade-off sweep) with its progress display, the plot and the --log-to trackers. The command
line only declares the flags, hands them here and shows the result (views.show). The modules that run anything
(torch with them) are imported once the flags are checked, so that a refusal comes before torch is imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING

from ticketcli.contract.schema import JsonObject
from ticketcli.data.registry import DATASETS
from ticketcli.drift import feed, rundir, runflags, views
from ticketcli.drift.options import DriftRequest, drift_request
from ticketcli.drift.result import DriftResult, TradeoffResult
from ticketcli.drift.runflags import Groups
from ticketcli.drift.settings import DRIFT_FLAGS
from ticketcli.drift.spec import DriftSpec, Features
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.runtime.interrupts import Position
from ticketcli.runtime.threads import per_worker, using
from ticketcli.settings.track import Destination, destinations
from ticketcli.track import base as track
from ticketcli.track.feed import guarded

if TYPE_CHECKING:
    from ticketcli.drift.keep import RunKeeper

Result = DriftResult | TradeoffResult


class DriftCommand:
    """One `ticket drift` run, its outputs as the flags say (--plot, --force, --quiet); `checked` sees its result
    before the plot is written and the trackers are told. `note()` says where an interrupted run continues (its run
    dir's keeper)."""

    def __init__(self, plot: Path | None, *, force: bool, quiet: bool, checked: Callable[[Result], None]) -> None:
        self.plot, self.force, self.quiet, self.checked = plot, force, quiet, checked
        self.keeper: RunKeeper | None = None

    def note(self) -> str | None:
        return None if self.keeper is None else self.keeper.note()

    def run(self, groups: Groups, position: Position, *, run_dir: Path | None, resume: Path | None) -> Result:
        """The result of the run `groups` (the flags by table, None: not given) asks for."""
        folder, recorded = kept_run(groups, run_dir, resume)
        inputs = groups["inputs"]
        ticket = None if inputs["ticket"] is None else Path(inputs["ticket"])
        request = drift_request(
            groups["run"],
            groups["features"],
            groups["reader"],
            ticket=ticket,
            weights=None if inputs["weights"] is None else Path(inputs["weights"]),
            log_to=groups["track"]["log_to"],
        )
        trackers = track.check(request.log_to)
        targets = None if request.features is None else request.features.targets
        request.spec() if targets is None else request.tradeoff_specs()  # each value in range, before torch
        if self.plot is not None:
            check_destination(self.plot, overwrite=self.force)  # before the work, not after
        record, started = None, None
        if folder is not None:
            self.keeper, started = open_keeper(folder, request.spec(), groups, recorded)
            record = rundir.TrackerRecord(folder) if trackers else None
        try:
            return self._tracked(request, position, trackers, ticket, record)
        except Exception:  # refused before a measurement was taken (no data, a refused model): the run dir goes
            if folder is not None and started is not None and self.keeper is not None:
                self.keeper.close()
                rundir.undo(folder, started[1], started[0], None if record is None else record.owned)
            raise

    def _tracked(
        self,
        request: DriftRequest,
        position: Position,
        trackers: tuple[Destination, ...],
        ticket: Path | None,
        record: rundir.TrackerRecord | None,
    ) -> Result:
        plot, force = self.plot, self.force
        info = partial(feed.drift_info, request.run["model"], ticket)
        resume_ids, on_open = (None, None) if record is None else (dict(record.ids), record.opened)
        live = None
        with track.tracked(trackers, info, console.warn, resume_ids, on_open) as log:
            if log is not None and self.keeper is not None:  # logged as the checkpoints keep it, resumed where they do
                self.keeper.on_kept = live = feed.DriftLive(log, console.warn)
            result = run_request(request, position, quiet=self.quiet, keeper=self.keeper)
            self.checked(result)
            if plot is not None:
                write_atomic(plot, views.figure(result), overwrite=force, checked_at_start=True)
                result = replace(result, plot=str(plot))
            if log is not None:
                guarded(feed.drift_final, console.warn)(log, result, console.warn, live)
        return result


def kept_run(groups: Groups, run_dir: Path | None, resume: Path | None) -> tuple[Path | None, JsonObject | None]:
    """--run-dir (a new run dir) or --resume (the flags it recorded, each given flag checked to agree, replace
    `groups`): the folder and run.json's document on a resume."""
    if resume is not None:
        if run_dir is not None:
            raise UsageError("--resume DIR names the run dir; drop --run-dir")
        doc = rundir.open_settings(resume)
        where = resume / rundir.SETTINGS
        given = destinations(groups["track"]["log_to"])
        groups.update(runflags.resumed(doc, groups, where))
        rundir.check_recorded(resume, destinations(groups["track"]["log_to"]), given)
    elif run_dir is None:
        if groups["inputs"]["checkpoint_every"] is not None:
            raise UsageError("--checkpoint-every only goes with --run-dir (or --resume)")
        return None, None
    else:
        doc = None
    if groups["inputs"]["checkpoint_every"] is not None:
        DRIFT_FLAGS["checkpoint_every"].check(groups["inputs"]["checkpoint_every"])
    runflags.check_features(groups["features"])
    return (resume or run_dir), doc


def open_keeper(
    folder: Path, spec: DriftSpec, groups: Groups, recorded: JsonObject | None
) -> tuple[RunKeeper, tuple[bool, bytes] | None]:
    """The run dir's keeper: a new run dir records the flags and the settings they resolve to (and what
    rundir.create says of it, for undo); a resumed one must resolve to the settings it recorded (the same data, the
    same defaults)."""
    settings = json.loads(json.dumps({**spec.to_dict(), "seeds": list(spec.seeds), "device": spec.device}))
    started = None
    if recorded is None:
        started = rundir.create(folder, {"flags": runflags.record(groups), "settings": settings})
    elif recorded.get("settings") != settings:
        raise UsageError(
            f"the run in {folder} recorded settings that its flags no longer resolve to (the data or a default "
            "changed)",
            hint="start a new run with --run-dir",
        )
    from ticketcli.drift import run as drift_run  # torch: once the flags are checked
    from ticketcli.drift.keep import RunKeeper

    every = groups["inputs"]["checkpoint_every"] or spec.log_every
    logged = drift_run.logged_steps(spec.steps, spec.log_every)
    return RunKeeper(folder, every, logged, seeds=len(spec.seeds), resume=recorded is not None), started


def run_request(request: DriftRequest, position: Position, *, quiet: bool, keeper: RunKeeper | None) -> Result:
    """Run what the request asks for with its torch threads (None: torch's own count, never auto's choice from the
    load: drift's sums move in their last digits with the count, and a rerun on the same machine must give the same
    numbers; --tradeoff: per worker, default 1); its result's class says which document, tables and plot it has
    (views.show, .figure)."""
    import torch

    from ticketcli.drift import relufy  # torch: once the flags are checked
    from ticketcli.drift import run as drift_run

    features = request.features or Features(control=None, relufy=None, targets=None)
    if features.targets is not None:
        return _tradeoff(request, features, position, quiet=quiet)
    spec = request.spec()
    per_run = spec.steps
    if features.relufy is not None:
        n = spec.data.n_extract or DATASETS.get(spec.data.name).n_extract  # the bar's total; the run counts
        per_run += relufy.fine_tune_steps(n, spec.batch_size, features.relufy.epochs)
    total = per_run * (1 if request.ticket is not None else len(spec.seeds))
    run: Callable[..., DriftResult] = (
        partial(drift_run.run_drift, spec, control=features.control, keeper=keeper)
        if features.relufy is None
        else partial(relufy.run_relufy, spec, features.relufy)
    )
    with (
        report_progress.display(total, quiet=quiet, label="drift", unit="step", rated=True) as progress,
        using(torch.get_num_threads() if request.threads is None else request.threads) as used,
    ):
        told = position.track(progress)
        result = run(progress=told, ticket=request.ticket, weights=request.weights, policy=request.policy)
    return replace(result, threads=used)


def _tradeoff(request: DriftRequest, features: Features, position: Position, *, quiet: bool) -> TradeoffResult:
    """--tradeoff: one controlled run per target and model, in `features.workers` processes of --threads each."""
    from ticketcli.drift import tradeoff  # torch: once the flags are checked

    assert features.control is not None and features.targets is not None
    threads = per_worker(features.workers, request.threads)
    specs = request.tradeoff_specs()
    tasks = tradeoff.plan(specs, features.targets, features.control.mode, features.control.freeze_after)
    done = count(1)
    with report_progress.display(len(tasks), quiet=quiet, label="tradeoff") as progress:
        tell = position.track(progress)

        def on_result(r: JsonObject) -> None:
            stats = {"loss": r["loss"], "accuracy": r["accuracy"], "sparsity": r["achieved_sparsity"]}
            tell({"epoch": next(done), "unit": "run", **stats})

        return tradeoff.run_tradeoff(tasks, workers=features.workers, threads=threads, on_result=on_result)
