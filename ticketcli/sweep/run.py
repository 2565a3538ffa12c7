"""A whole sweep-k: take the runs already finished in --out-dir, check every file the others will write before any
work starts, run the others (execute.py) longest first, keep each as it finishes (records.py), and summarise them
(summary.py: the paper's Section 6.3 stability table, docs/method.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination
from ticketcli.sweep.claims import POLL_S, Claims
from ticketcli.sweep.execute import cost, run_local, run_ray
from ticketcli.sweep.outputs import Note, Waiting, folder_lock, load_note
from ticketcli.sweep.plan import SweepTask
from ticketcli.sweep.records import finished, other_settings, paths, stale_runs, store, ticket_bound
from ticketcli.sweep.result import SweepRecord, SweepResult
from ticketcli.sweep.summary import PAPER_BAND
from ticketcli.ticketfile import ticket as ticket_io

OnResult = Callable[[SweepRecord, bool], None]  # (record, resumed) after each finished task


@dataclass(frozen=True)
class SweepRun:
    """A sweep's records, in plan order, and the ids of those taken from out_dir."""

    records: list[SweepRecord]
    resumed: list[str]


def run_sweep(
    tasks: list[SweepTask],
    *,
    workers: int = 1,
    threads: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    out_dir: str | Path | None = None,
    on_result: OnResult | None = None,
    overwrite: bool = False,
    warn: Callable[[str], None] | None = None,
) -> SweepRun:
    """Run (or resume) every task: its records in plan order, and the ids taken from out_dir.

    A file in out_dir the sweep will write is replaced only when the sweep wrote it (its note) or with
    `overwrite` (--force), checked before any run starts; a stored record or ticket that is not what the sweep
    writes is reported through `warn` and its run recomputed. Runs stored with other settings are refused (naming
    what differs) unless `overwrite`; runs the sweep wrote earlier that are not in the plan are reported through
    `warn` and left alone."""
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create --out-dir {out}: {e.strerror or e}") from None
    claims = None if out is None else Claims(out)
    bound = ticket_bound(tasks[0].spec) if out is not None and tasks else ticket_io.MAX_FILE_BYTES
    with nullcontext() if out is None else folder_lock(out):  # another sweep on the folder stores nothing meanwhile
        note = load_note(out)
        records, resumed, todo = _before_the_work(tasks, out, note, claims, bound, overwrite, warn)
    for t in tasks:
        if on_result and t.id in records:
            on_result(records[t.id], True)
    todo.sort(key=lambda t: -cost(t))  # longest first, so a multi-round run is not the pool's last straggler
    waiting = None  # since when this sweep has had nothing to do but wait on another's runs
    with claims or nullcontext():
        while todo:
            elsewhere: list[SweepTask] = []  # claimed by another sweep on the folder: read back below
            claimed = _claimed(todo, elsewhere, claims, out, bound)
            if executor == "ray":  # Ray takes every task at once
                ours = list(claimed)
                results = run_ray(ours, threads, ray_address) if ours else iter(())
            else:
                results = run_local(claimed, workers, threads)
            for task, (record, payload) in results:
                waiting = None
                if out is not None:
                    record = store(out, task, record, payload, note, overwrite)
                if claims is not None:
                    claims.release(task.id)
                records[task.id] = record
                if on_result:
                    on_result(record, False)
            todo = []
            for t in elsewhere:  # another sweep's runs: read back once stored, taken over if it gives them up
                rec = None if out is None else finished(out, t, bound)[0]
                if rec is None:
                    todo.append(t)
                    continue
                records[t.id] = rec
                resumed.append(t.id)
                if on_result:
                    on_result(rec, True)
            if todo and claims is not None:
                waiting = waiting or Waiting()
                waiting.tick(partial(claims.waited_on, todo[0].id))
                time.sleep(POLL_S)
    return SweepRun([records[t.id] for t in tasks], resumed)


def _claimed(
    todo: list[SweepTask], elsewhere: list[SweepTask], claims: Claims | None, out: Path | None, bound: int
) -> Iterator[SweepTask]:
    """The tasks of `todo` this sweep claims, each as a worker frees up, so two sweeps on one folder share the runs;
    the others (claimed, or stored by another sweep since this one looked) go to `elsewhere`."""
    for t in todo:
        if claims is None:
            yield t
        elif not claims.take(t.id):
            elsewhere.append(t)
        elif out is not None and finished(out, t, bound)[0] is not None:
            claims.release(t.id)  # another sweep stored it since this one looked: read it back
            elsewhere.append(t)
        else:
            yield t


def _before_the_work(
    tasks: list[SweepTask],
    out: Path | None,
    note: Note | None,
    claims: Claims | None,
    bound: int,
    overwrite: bool,
    warn: Callable[[str], None] | None,
) -> tuple[dict[str, SweepRecord], list[str], list[SweepTask]]:
    """Resume and check, under the folder's lock: (records taken from out, their ids, the tasks left to run)."""
    if out is not None and not overwrite:
        changed = other_settings(out, tasks)
        if changed:
            shown = "; ".join(changed[:6]) + ("; ..." if len(changed) > 6 else "")
            raise UsageError(
                f"--out-dir {out} holds runs made with other settings ({shown})",
                hint="use a new --out-dir for these settings, or pass --force to recompute and replace those runs",
            )
    stale = [] if out is None else stale_runs(out, tasks, note)
    if stale and warn is not None:
        listed = ", ".join(stale[:8]) + (f" and {len(stale) - 8} more" if len(stale) > 8 else "")
        warn(
            f"--out-dir {out} holds {len(stale)} earlier run(s) that are not in this sweep's plan, kept but left out "
            f"of its results: {listed}"
        )
    records: dict[str, SweepRecord] = {}
    resumed = []
    todo = []
    problems: dict[str, str] = {}
    for t in tasks:
        rec, why = (None, None) if out is None else finished(out, t, bound)
        if rec is None:
            todo.append(t)
            if why is not None:
                problems[t.id] = why
        else:
            records[t.id] = rec
            resumed.append(t.id)
    busy = set() if claims is None else claims.busy([t.id for t in todo])  # another sweep's: its files, its checks
    if out is not None and note is not None and todo:  # before the work: every file it will write may be written
        note.check(overwrite)
        for t in todo:
            for p in [] if t.id in busy else paths(out, t):
                if os.path.lexists(p) and not overwrite and note.owned(p) is None:
                    raise UsageError(
                        f"{problems.get(t.id, f'{p} is not a file this sweep wrote')}; "
                        f"it is not replaced without --force",
                        hint="pass --force to replace it and recompute that run, or use another --out-dir",
                    )
                check_destination(p, overwrite=overwrite, owned=note.owned(p))
        for t in todo:
            if t.id in problems and t.id not in busy and warn is not None:
                warn(f"{problems[t.id]}; that run is recomputed")
    return records, resumed, todo


def sweep_k(tasks: list[SweepTask], *, band: tuple[float, float] = PAPER_BAND, **run: Any) -> SweepResult:
    """Run the planned tasks (see run_sweep for the executor options) and summarise them."""
    result = run_sweep(tasks, **run)
    return SweepResult.of(result.records, result.resumed, band)
