"""Each command's progress display: a Rich bar on stderr at a terminal, plain lines (plain.py) elsewhere, nothing
with --quiet or in a torchrun worker but rank 0: `working` for a step without a loop, `epoch_progress`,
`sweep_progress`, `runs_progress` and `drift_progress` for loops, and the phases over chunks after them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from ticketcli.report import plain as report_plain
from ticketcli.report.console import literal, pct, stderr
from ticketcli.report.plain import Pace, PlainProgress, plain_progress, rate_text

if TYPE_CHECKING:
    from ticketcli.sweep.result import SweepRecord

ChunkProgress = Callable[[str, int, int], None]  # (phase, chunks done, chunks in it): batchnorm.ChunkProgress


@contextmanager
def working(label: str, *, quiet: bool, lines: bool = False) -> Iterator[ChunkProgress | None]:
    """A step without a loop to count (rebuilding a ticket's network, a method without epochs), and the phases over
    chunks it reports through the callback it yields (BatchNorm recalibration, evaluation). Off a terminal, a line
    every PLAIN_EVERY_S seconds while nothing else is written, with the running phase and its ETA, and with `lines`
    a phase's chunk (elapsed, ETA) once PLAIN_EVERY_S passed since the last line, and its last chunk if it showed
    one (PlainProgress.chunk); on a terminal, a bar row for the phases, from the first one on. Nothing when quiet,
    or in a torchrun worker but rank 0."""
    from ticketcli.runtime.world import quiet_rank  # torch-free

    if quiet or quiet_rank():
        yield None
        return
    if plain_progress():
        plain = PlainProgress(label, None, unit="chunk")
        with plain.beating():
            yield partial(plain.chunk, lines=lines)
        return
    bar = _bar("{task.description}", "chunks")
    try:
        yield _phase_tasks(bar, label)
    finally:
        if bar.task_ids:
            bar.stop()


class PaceColumn(ProgressColumn):
    """The rate and ETA of a row that carries a Pace in its `pace` field (drift's steps: `12.3 steps/s ETA 0:01:05`,
    from the steps this process ran since its first report, so that the periodic measurements are averaged in and
    restored steps are not counted); a row without one shows Rich's own time remaining."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit, self.remaining = unit, TimeRemainingColumn()

    def render(self, task: Task) -> Text:
        pace = task.fields.get("pace")
        if not isinstance(pace, Pace):
            return self.remaining.render(task)
        rate, left = pace.rate(), pace.seconds_left()
        shown = "-" if rate is None else rate_text(rate)
        if left is None:
            eta = "-:--:--"  # as Rich's own column before it knows
        else:
            minutes, seconds = divmod(round(left), 60)
            eta = f"{minutes // 60:d}:{minutes % 60:02d}:{seconds:02d}"  # as Rich's elapsed column beside it
        return Text(f"{shown} {self.unit}s/s ETA {eta}", style="progress.remaining")


def _bar(description: str, fields: str, paced: str | None = None) -> Progress:
    """The progress bar every command draws on stderr: name, bar, done/total, its own fields, elapsed and ETA
    (paced: the rate in `paced` units per second and the ETA of the rows carrying a Pace, PaceColumn)."""
    columns = [
        TextColumn(description, style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields, markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn() if paced is None else PaceColumn(paced),
    ]
    return Progress(*columns, console=stderr(), transient=False)


def _phase_tasks(bar: Progress, label: str, **fields: Any) -> ChunkProgress:
    """A ChunkProgress that draws the phases on one row of `bar` (`label phase`, chunks done of total, elapsed time
    and ETA), reset when a phase starts, so that each phase has its own ETA and a run with many leaves one row
    (`fields`: the bar's other fields); starts the bar if it is not yet running (a bar shared with a loop may
    start before or after)."""
    row: list[TaskID] = []

    def update(phase: str, done: int, total: int) -> None:
        if not row:
            bar.start()  # a no-op once started
            row.append(bar.add_task(f"{label} {phase}", total=total, **fields))
        elif done == 0:
            bar.reset(row[0], total=total, description=f"{label} {phase}")
        bar.update(row[0], completed=done)

    return update


class StatsProgress:
    """The callback a loop's progress display yields (called with each stats dict[str, Any]), carrying `phases`: the
    ChunkProgress of the work after or between the loops (the final BatchNorm recalibration and evaluation), shown on
    the same display."""

    def __init__(self, update: Callable[[dict[str, Any]], None], phases: ChunkProgress):
        self.update, self.phases = update, phases

    def __call__(self, stats: dict[str, Any]) -> None:
        self.update(stats)


def phases_of(progress: object) -> ChunkProgress | None:
    """The phases' callback of what a progress display yielded (None for a plain function or no display)."""
    return progress.phases if isinstance(progress, StatsProgress) else None


def epoch_line(label: str, total: int, stats: dict[str, Any]) -> str:
    """One plain progress line of an epoch (or step, or run) loop: `augmented epoch 12/100 loss 0.4123 acc 87.12%
    sparsity 90.00%` (accuracy and sparsity as percentages, as the tables and the bar print them)."""
    where = f"{label} round {stats['round']}" if "round" in stats else label
    unit = stats.get("unit", "epoch")
    return (
        f"{where} {unit} {stats['epoch']}/{stats.get('epochs', total)} loss {stats['loss']:.4f}"
        f" acc {pct(stats['accuracy'])} sparsity {pct(stats['sparsity'])}"
    )


@contextmanager
def _stats_bar(label: str, total: int, clock: Callable[[], float] | None = None) -> Iterator[StatsProgress]:
    """A Rich bar over a loop of `total` units (epochs, steps), started at the first report: the units done, the
    loss, accuracy and sparsity of the reports that carry them, and the round of iterated's loops; the phases
    after the loop (StatsProgress.phases) are rows of the same bar. clock (drift): the loop's row shows its steps/s
    and ETA from a Pace timed by it, started at the first report (a report with "restored" is a position restored
    from a run dir: done, but not timed)."""
    bar = _bar("{task.description}", "{task.fields[stats]}", None if clock is None else "step")
    task: TaskID | None = None
    pace: Pace | None = None

    def update(stats: dict[str, Any]) -> None:
        nonlocal task, pace
        if task is None:
            bar.start()
            pace = None if clock is None else Pace(total, clock)
            task = bar.add_task(label, total=total, stats="loss -  acc -  sparsity -", pace=pace)
        if "round" in stats:  # iterated: the bar restarts each round
            bar.update(task, description=f"{label} round {stats['round']}")
        if pace is not None:
            pace.advance(stats["epoch"], timed=not stats.get("restored"))
        bar.update(task, completed=stats["epoch"])
        if "loss" in stats:  # drift: only the logged steps carry a measurement
            measured = f"loss {stats['loss']:.4f}  acc {pct(stats['accuracy'])}  sparsity {pct(stats['sparsity'])}"
            bar.update(task, stats=measured)

    try:
        yield StatsProgress(update, _phase_tasks(bar, label, stats="chunks"))
    finally:
        if bar.task_ids:
            bar.stop()


@contextmanager
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """A progress bar over epochs (loss, running accuracy, current achieved sparsity), shown from the first epoch
    on, so that errors before training (bad data, bad spec) are not preceded by an empty bar. Without a terminal,
    plain lines with elapsed time and ETA: the first and last epoch (step, run) of each loop, at most one every
    PLAIN_EVERY_S between, and a heartbeat line while an epoch or the work after the last one runs silently."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain = PlainProgress(label, total)
        looped: list[object] = []  # the round of the loop now running (iterated restarts its epochs each round)

        def line(stats: dict[str, Any]) -> None:
            plain.unit = stats.get("unit", "epoch")
            loop = stats.get("round")
            first = not looped or looped[-1] != loop
            if first:
                looped.append(loop)
                plain.restart(stats.get("epochs", total))
            plain.update(epoch_line(label, total, stats), stats["epoch"], first=first)

        with plain.beating():
            yield StatsProgress(line, partial(plain.chunk, lines=False))  # the phases after: in the heartbeat
        return
    with _stats_bar(label, total) as update:
        yield update


def _sweep_what(record: SweepRecord, resumed: bool) -> str:
    # ids come from --out-dir files too, hence literal()
    return literal(f"{record.id} ({'resumed' if resumed else pct(record.test_accuracy) + ' test'})")


@contextmanager
def sweep_progress(total: int, *, quiet: bool) -> Iterator[Callable[[SweepRecord, bool], None] | None]:
    """A progress bar over a sweep's configurations (resumed ones count as done at once), with ETA; without a
    terminal, a plain line for the first and last configuration and at most one every PLAIN_EVERY_S between, with a
    heartbeat while a configuration runs."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain, done = PlainProgress("sweep-k", total, unit="configuration"), 0

        def line(record: SweepRecord, resumed: bool) -> None:
            nonlocal done
            done += 1
            text = f"sweep-k {done}/{total} last {_sweep_what(record, resumed)}"
            plain.update(text, done, first=done == 1, timed=not resumed)

        with plain.beating():
            yield line
        return
    with _bar("sweep-k", "last {task.fields[last]}") as bar:
        task = bar.add_task("sweep-k", total=total, last="-")

        def update(record: SweepRecord, resumed: bool) -> None:
            bar.update(task, advance=1, last=_sweep_what(record, resumed))

        yield update


@contextmanager
def tickets_progress(total: int, *, quiet: bool, label: str) -> Iterator[Callable[[str, str], None] | None]:
    """One progress bar over a folder's tickets (`ticket evaluate DIR`): the callback takes the ticket just done and
    what came of it; without a terminal, a plain line for the first and last ticket and at most one every
    PLAIN_EVERY_S between, with a heartbeat while a ticket runs."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain, done = PlainProgress(label, total, unit="ticket"), 0

        def line(ticket: str, what: str) -> None:
            nonlocal done
            done += 1
            plain.update(f"{label} {done}/{total} last {literal(ticket)} ({literal(what)})", done, first=done == 1)

        with plain.beating():
            yield line
        return
    with _bar(label, "last {task.fields[last]}") as bar:
        task = bar.add_task(label, total=total, last="-")

        def update(ticket: str, what: str) -> None:
            bar.update(task, advance=1, last=literal(f"{ticket} ({what})"))

        yield update


@contextmanager
def runs_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """One progress bar per training run (stats["run"]: masked, dense), each over epochs, with loss and
    validation accuracy; without a terminal, plain lines as epoch_progress writes them, per run."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain = PlainProgress("train-weak", total)
        runs: list[str] = []

        def line(stats: dict[str, Any]) -> None:
            first = not runs or runs[-1] != stats["run"]
            if first:  # each run (masked, then dense) is its own loop, with its own first line and ETA
                runs.append(stats["run"])
                plain.restart(total)
                plain.label = f"train-weak {stats['run']}"
            text = f"{stats['run']} epoch {stats['epoch']}/{total} loss {stats['loss']:.4f}"
            text += f" val acc {pct(stats['val_accuracy'])}"
            plain.update(text, stats["epoch"], first=first)

        with plain.beating():
            # the measurements before and after each run's epochs: in the heartbeat
            yield StatsProgress(line, partial(plain.chunk, lines=False))
        return
    bar = _bar("{task.description}", "{task.fields[stats]}")
    tasks: dict[str, TaskID] = {}

    def update(stats: dict[str, Any]) -> None:
        bar.start()  # a no-op once started
        if stats["run"] not in tasks:
            tasks[stats["run"]] = bar.add_task(stats["run"], total=total, stats="loss -  val acc -")
        measured = f"loss {stats['loss']:.4f}  val acc {pct(stats['val_accuracy'])}"
        bar.update(tasks[stats["run"]], completed=stats["epoch"], stats=measured)

    try:
        yield StatsProgress(update, _phase_tasks(bar, "train-weak", stats="chunks"))
    finally:
        if bar.task_ids:
            bar.stop()


@contextmanager
def drift_progress(
    total: int, *, quiet: bool, label: str = "drift", clock: Callable[[], float] | None = None
) -> Iterator[Callable[[dict[str, Any]], None] | None]:
    """drift's progress over training steps, told every step (stats["epoch"]: steps done), with the probe's loss,
    accuracy and sparsity at the logged ones. On a terminal, a live bar that moves at every step and shows the last
    measurement; without one, a line at every logged step (as many as --log-every asks for) and between them at
    most one every PLAIN_EVERY_S (and a heartbeat while a step runs silently). Both show the elapsed time, the rate
    in steps/s and the ETA, which count from the first report (step 0's measurement, or the restored position of a
    resumed run): training, measurements included, not set-up. A report with "restored" is a position restored
    from a run dir (a resume, or a seed it holds whole): its steps count as done, not in the rate."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain = PlainProgress(label, total, unit="step", clock=clock)
        plain.rated = True
        started = False

        def line(stats: dict[str, Any]) -> None:
            nonlocal started
            if not started:
                started, plain.pace = True, Pace(total, plain.clock)
            logged, restored = "loss" in stats, bool(stats.get("restored"))
            text = epoch_line(label, total, stats) if logged else f"{label} step {stats['epoch']}/{total}"
            plain.update(
                text + (" restored" if restored else ""), stats["epoch"], first=logged or restored, timed=not restored
            )

        with plain.beating():
            yield line
        return
    with _stats_bar(label, total, report_plain.CLOCK if clock is None else clock) as update:
        yield update
