"""Each command's progress display, one for every long loop: `display` draws a Rich bar on stderr at a terminal,
plain lines (plain.py) elsewhere, nothing with --quiet or in a torchrun worker but rank 0. It yields a Shown, the one
callback shape (methods.base.Progress): called with each progress record, a dict with "epoch" (the units done) and
what the loop has of "epochs" (this loop's total), "unit", "round" (iterated), "run" (train-weak's masked and dense
runs, a row each), "loss", "accuracy" and "sparsity" or "val_accuracy", "last" (the item just done: a sweep's
configuration, a folder's ticket) and "restored" (done before, not timed); and carrying `phases`, the ChunkProgress
of the work between or after the loops (BatchNorm recalibration, evaluation), shown on the same display. A step
without a loop (rebuilding a ticket's network, a method without epochs) is a display with no total: phases only."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderableType
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
from rich.table import Column, Table
from rich.text import Text

from ticketcli.report import plain as report_plain
from ticketcli.report.console import literal, pct, stderr
from ticketcli.report.fit import narrowed
from ticketcli.report.plain import Pace, PlainProgress, plain_progress, rate_text

if TYPE_CHECKING:
    from ticketcli.sweep.result import SweepRecord

ChunkProgress = Callable[[str, int, int], None]  # (phase, chunks done, chunks in it): batchnorm.ChunkProgress
Record = dict[str, Any]  # a progress record, as methods.base.Progress is called with
MEASURED = "loss -  acc -  sparsity -"  # a loop's row before its first measurement


class PaceColumn(ProgressColumn):
    """The rate and ETA of a row that carries a Pace in its `pace` field (a rated loop: `12.3 steps/s ETA 0:01:05`,
    from the steps this process ran since its first report, so that the periodic measurements are averaged in and
    restored steps are not counted); a row without one shows Rich's own time remaining."""

    def __init__(self, unit: str, table_column: Column | None = None):
        super().__init__(table_column=table_column)
        self.unit, self.remaining = unit, TimeRemainingColumn()

    def render(self, task: Task) -> RenderableType:
        pace = task.fields.get("pace")
        if not isinstance(pace, Pace):
            return self.remaining(task)  # as a bar without paced rows shows it, refreshed as often
        rate, left = pace.rate(), pace.seconds_left()
        shown = "-" if rate is None else rate_text(rate)
        if left is None:
            eta = "-:--:--"  # as Rich's own column before it knows
        else:
            minutes, seconds = divmod(round(left), 60)
            eta = f"{minutes // 60:d}:{minutes % 60:02d}:{seconds:02d}"  # as Rich's elapsed column beside it
        return Text(f"{shown} {self.unit}s/s ETA {eta}", style="progress.remaining")


def _bar(unit: str) -> Progress:
    """The progress bar every command draws on stderr: each row's name, bar, done/total, its own fields (`stats`),
    elapsed time and ETA (the rate in `unit`s per second and the ETA of the rows carrying a Pace, PaceColumn)."""
    # Nothing is cut in a narrow terminal: the bar is what gives way (40 cells at most, 4 at least), the name and
    # the measurements wrap between words, the counts and times never wrap (Rich would end them in `…`).
    whole = partial(Column, no_wrap=True)
    columns = [
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(bar_width=None, table_column=Column(max_width=40)),
        MofNCompleteColumn(table_column=whole()),
        TextColumn("{task.fields[stats]}", markup=False),
        TimeElapsedColumn(table_column=whole()),
        PaceColumn(unit, table_column=whole()),
    ]
    return _Fitted(*columns, console=stderr())


class _Fitted(Progress):
    """A Progress whose rows keep every word whole at the terminal's width (fit.narrowed): Rich would squeeze the
    columns until the times read `0:00:…`."""

    def __init__(self, *columns: ProgressColumn, console: Console):
        self._fit = console  # Rich lays the rows out once before its own `console` attribute exists
        super().__init__(*columns, console=console, transient=False)

    def make_tasks_table(self, tasks: Iterable[Task]) -> Table:
        table = super().make_tasks_table(tasks)
        narrowed(self._fit, table, first=[1])  # the bar (the second column) gives way first
        return table


def _phase_tasks(bar: Progress, label: str) -> ChunkProgress:
    """A ChunkProgress that draws the phases on one row of `bar` (`label phase`, chunks done of total, elapsed time
    and ETA), reset when a phase starts, so that each phase has its own ETA and a run with many leaves one row;
    starts the bar if it is not yet running (a bar shared with a loop may start before or after)."""
    row: list[TaskID] = []

    def update(phase: str, done: int, total: int) -> None:
        if not row:
            bar.start()  # a no-op once started
            row.append(bar.add_task(f"{label} {phase}", total=total, stats="chunks"))
        elif done == 0:
            bar.reset(row[0], total=total, description=f"{label} {phase}")
        bar.update(row[0], completed=done)

    return update


class Shown:
    """What a progress display yields: called with each progress record, carrying `phases`, the ChunkProgress of
    the work after or between the loops, shown on the same display."""

    def __init__(self, update: Callable[[Record], None], phases: ChunkProgress):
        self.update, self.phases = update, phases

    def __call__(self, stats: Record) -> None:
        self.update(stats)


def phases_of(progress: object) -> ChunkProgress | None:
    """The phases' callback of what a progress display yielded (None for a plain function or no display)."""
    return progress.phases if isinstance(progress, Shown) else None


def _measured(stats: Record) -> list[str]:
    """A record's measurement, one item a field: loss and accuracy, and the sparsity or the validation accuracy."""
    if "val_accuracy" in stats:  # train-weak
        return [f"loss {stats['loss']:.4f}", f"val acc {pct(stats['val_accuracy'])}"]
    if "loss" not in stats:
        return []
    return [f"loss {stats['loss']:.4f}", f"acc {pct(stats['accuracy'])}", f"sparsity {pct(stats['sparsity'])}"]


def progress_line(label: str, total: int, stats: Record, unit: str = "epoch") -> str:
    """One plain progress line: `augmented epoch 12/100 loss 0.4123 acc 87.12% sparsity 90.00%` (accuracy and
    sparsity as percentages, as the tables and the bar print them), `sweep-k 3/8 last k=0.5 (91.20% test)`."""
    if "last" in stats:
        return f"{label} {stats['epoch']}/{total} last {literal(stats['last'])}"
    where = stats["run"] if "run" in stats else f"{label} round {stats['round']}" if "round" in stats else label
    head = f"{where} {stats.get('unit', unit)} {stats['epoch']}/{stats.get('epochs', total)}"
    return " ".join([head, *_measured(stats)]) + (" restored" if stats.get("restored") else "")


def sweep_done(done: int, total: int, record: SweepRecord, resumed: bool) -> Record:
    """The progress record of a sweep's configuration just done (resumed: done before, not timed)."""
    bits = record.test_bits_per_char  # a language model's run: its bits per character
    measured = pct(record.test_accuracy) if bits is None else f"{bits:.4f} bits/char"
    last = f"{record.id} ({'resumed' if resumed else measured + ' test'})"
    return {"epoch": done, "epochs": total, "unit": "configuration", "last": last, "restored": resumed}


@contextmanager
def display(
    total: int | None,
    *,
    quiet: bool,
    label: str,
    unit: str = "epoch",
    items: bool = False,
    lines: bool = False,
    rated: bool = False,
    clock: Callable[[], float] | None = None,
) -> Iterator[Shown | None]:
    """The progress of a loop over `total` units, shown from the first report on, so that errors before the work
    (bad data, bad spec) are not preceded by an empty bar; items (a sweep's configurations, a folder's tickets): a
    bar from the start, with the last item done. Off a terminal, plain lines with elapsed time and ETA: the first
    and last of each loop (a run, a round), at most one every PLAIN_EVERY_S between, and a heartbeat line while a
    unit, a phase or the work after the loop runs silently; lines (export, evaluate): a phase's chunk
    (PlainProgress.chunk) too. rated (a loop of steps, told every step, measured at some): a line at every measured
    or restored report, and the rate in steps/s and the ETA (a bar's PaceColumn) counted from the first report
    (timed by clock), so that set-up is not in them. Nothing when quiet, or in a torchrun worker but rank 0."""
    from ticketcli.runtime.world import quiet_rank  # torch-free

    if quiet or quiet_rank():
        yield None
        return
    if plain_progress():
        plain = PlainProgress(label, total, unit=unit, clock=clock)
        plain.rated = rated
        loops: list[tuple[object, object]] = []  # the run and round of the loop now running

        def line(stats: Record) -> None:
            assert total is not None, "a display without a total shows only phases"
            plain.unit = stats.get("unit", unit)
            loop, restored = (stats.get("run"), stats.get("round")), bool(stats.get("restored"))
            first = not loops or loops[-1] != loop
            if first:  # each loop (train-weak's dense run, iterated's next round) with its own first line and ETA
                loops.append(loop)
                plain.restart(stats.get("epochs", total))
                plain.label = label if "run" not in stats else f"{label} {stats['run']}"
            shown = ("loss" in stats or restored) if rated else first  # rated: every measured or restored report
            plain.update(progress_line(label, total, stats, unit), stats["epoch"], first=shown, timed=not restored)

        with plain.beating():
            yield Shown(line, partial(plain.chunk, lines=lines))
        return
    bar, rows = _bar(unit), dict[object, TaskID]()
    paces: dict[object, Pace] = {}
    if items:
        bar.start()
        rows[None] = bar.add_task(label, total=total, stats="last -")

    def update(stats: Record) -> None:
        key = stats.get("run")  # train-weak: a row per run
        shown = "last " + literal(stats["last"]) if "last" in stats else "  ".join(_measured(stats))
        if key not in rows:
            bar.start()  # a no-op once started
            if rated:
                paces[key] = Pace(total or 0, report_plain.CLOCK if clock is None else clock)
            rows[key] = bar.add_task(key or label, total=total, stats=shown or MEASURED, pace=paces.get(key))
        if "round" in stats:  # iterated: the bar restarts each round
            bar.update(rows[key], description=f"{label} round {stats['round']}")
        if key in paces:
            paces[key].advance(stats["epoch"], timed=not stats.get("restored"))
        bar.update(rows[key], completed=stats["epoch"])
        if shown:  # a rated loop: only the logged steps carry a measurement
            bar.update(rows[key], stats=shown)

    try:
        yield Shown(update, _phase_tasks(bar, label))
    finally:
        if bar.task_ids:
            bar.stop()
