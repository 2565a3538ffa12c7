"""The console: stdout for results (one JSON document with --json, tables otherwise), stderr for people (errors,
warnings, progress bars, silenced by --quiet); every string from a file or the user is shown literally."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

# C0 controls (ESC starts terminal commands, CR/BS overwrite what was shown), DEL, C1 controls (CSI is \x9b) and
# the bidirectional overrides that reorder what a reader sees
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def literal(value: object) -> str:
    """Text that came from a file or the user, made safe to show: every control character escaped (\\x1b, \\x0d,
    \\u202e), so a ticket's metadata, a path or a --model string can never move the cursor, recolour or rewrite the
    terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(value))


class LiteralConsole(Console):
    """A Console that shows every string as it is: no markup ('[bold red]' or '[/oops]' in a ticket is text, not a
    style or a crash), no emoji codes, no highlighting, control characters escaped. Tables, titles and prints all
    turn their strings into Text through render_str, so this one override covers them all."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(literal(text), **kwargs)


def no_color() -> bool:
    """NO_COLOR set to any non-empty value (no-color.org): no colour, and no other styling either."""
    return os.environ.get("NO_COLOR", "") != ""


def _console(file: IO[str]) -> Console:
    # Rich's own NO_COLOR handling drops colours but keeps bold and underline escapes; without a colour system it
    # writes none at all, even under FORCE_COLOR. TERM=dumb needs nothing here: Rich gives a dumb terminal no colour.
    if no_color():
        return LiteralConsole(file=file, soft_wrap=True, color_system=None)
    return LiteralConsole(file=file, soft_wrap=True)


def stdout() -> Console:
    """The console for results."""
    return _console(sys.stdout)


def stderr() -> Console:
    """The console for people: progress, warnings."""
    return _console(sys.stderr)


def finite_json(obj: object) -> object:
    """NaN and ±Infinity as null: strict JSON has no such numbers, and CI parsers (jq, JSON.parse) reject them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def print_json(obj: dict) -> None:
    """Exactly one strict JSON document on stdout (non-finite numbers as null, non-ASCII and controls escaped)."""
    sys.stdout.write(json.dumps(finite_json(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def _line(text: str) -> str:
    return literal(text.replace("\r\n", " ").replace("\n", " ")) + "\n"


def error(message: str, hint: str | None = None) -> None:
    """One line on stderr, shown literally (a message quotes paths and file contents)."""
    sys.stderr.write(_line(f"error: {message}" + (f" (hint: {hint})" if hint else "")))
    sys.stderr.flush()


def internal_error(e: BaseException, *, traceback_shown: bool = False) -> None:
    """The one line of an unexpected exception (a bug): its type and first line, and how to see the traceback."""
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    what = type(e).__name__ + (f": {first}" if first else "")
    how = "the traceback is above" if traceback_shown else "rerun with TICKET_DEBUG=1 for the traceback"
    sys.stderr.write(_line(f"internal error: {what}; {how}"))
    sys.stderr.flush()


def warn(message: str) -> None:
    """One line on stderr (only from rank 0 under torchrun: every rank would say the same)."""
    from ticketcli.world import quiet_rank  # torch-free (distributed.py imports torch)

    if not quiet_rank():
        sys.stderr.write(_line(f"warning: {message}"))


def pct(x: float | None) -> str:
    """A fraction as a percentage with two decimals ("-" when absent)."""
    return "-" if x is None else f"{100 * x:.2f}%"


# A CI log gets at most one line per this many seconds from a long loop (sweep-k configurations, drift steps);
# epoch loops print every epoch, since an epoch is the unit a reader counts in.
PLAIN_EVERY_S = 10.0


def plain_progress() -> bool:
    """Progress as plain lines rather than a Rich bar: stderr is not a terminal (a CI log, a file, a pipe, where a
    bar shows nothing until the end), or a terminal that cannot redraw a line (TERM=dumb)."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        tty = False
    return not tty or os.environ.get("TERM", "").lower() in ("dumb", "unknown")


class PlainLines:
    """Progress lines on stderr, one per call, or, when throttled, the first, the last and then at most one every
    `every` seconds: a log shows that the run is alive and how far it got without a line per step."""

    def __init__(self, every: float = PLAIN_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every = every
        self.clock = clock
        self.shown_at: float | None = None

    def emit(self, text: str, *, throttled: bool = False, last: bool = False) -> None:
        """Write one line, unless throttled and the previous one is less than `every` seconds old."""
        now = self.clock()
        if throttled and not last and self.shown_at is not None and now - self.shown_at < self.every:
            return
        self.shown_at = now
        sys.stderr.write(_line(text))
        sys.stderr.flush()


def _bar(description: str, fields: str) -> Progress:
    """The progress bar every command draws on stderr: name, bar, done/total, its own fields, elapsed and ETA."""
    columns = [
        TextColumn(description, style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields, markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    return Progress(*columns, console=stderr(), transient=False)


def epoch_line(label: str, total: int, stats: dict) -> str:
    """One plain progress line of an epoch (or step, or run) loop: `augmented epoch 12/100 loss 0.4123 acc 0.8712
    sparsity 0.900`."""
    where = f"{label} round {stats['round']}" if "round" in stats else label
    unit = stats.get("unit", "epoch")
    return (
        f"{where} {unit} {stats['epoch']}/{stats.get('epochs', total)} loss {stats['loss']:.4f}"
        f" acc {stats['accuracy']:.4f} sparsity {stats['sparsity']:.3f}"
    )


@contextmanager
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator[Callable[[dict], None] | None]:
    """A progress bar over epochs (loss, running accuracy, current achieved sparsity), shown from the first epoch
    on, so that errors before training (bad data, bad spec) are not preceded by an empty bar. Without a terminal,
    a plain line per epoch (throttled for steps and runs, which come many and fast)."""
    if quiet:
        yield None
        return
    if plain_progress():
        lines = PlainLines()

        def line(stats: dict) -> None:
            last = stats["epoch"] >= stats.get("epochs", total)
            lines.emit(epoch_line(label, total, stats), throttled=stats.get("unit", "epoch") != "epoch", last=last)

        yield line
        return
    bar = _bar(
        "{task.description}", "loss {task.fields[loss]}  acc {task.fields[acc]}  sparsity {task.fields[sparsity]}"
    )
    task: TaskID | None = None

    def update(stats: dict) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total, loss="-", acc="-", sparsity="-")
        if "round" in stats:  # iterated: the bar restarts each round
            bar.update(task, description=f"{label} round {stats['round']}")
        bar.update(
            task,
            completed=stats["epoch"],
            loss=f"{stats['loss']:.4f}",
            acc=f"{stats['accuracy']:.2%}",
            sparsity=f"{stats['sparsity']:.2%}",
        )

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()


def _sweep_what(record: dict, resumed: bool) -> str:
    # ids come from --out-dir files too, hence literal()
    return literal(f"{record['id']} ({'resumed' if resumed else pct(record['test_accuracy']) + ' test'})")


@contextmanager
def sweep_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict, bool], None] | None]:
    """A progress bar over a sweep's configurations (resumed ones count as done at once), with ETA; without a
    terminal, a plain line for the first and last configuration and at most one every PLAIN_EVERY_S between."""
    if quiet:
        yield None
        return
    if plain_progress():
        lines, done = PlainLines(), 0

        def line(record: dict, resumed: bool) -> None:
            nonlocal done
            done += 1
            lines.emit(
                f"sweep-k {done}/{total} last {_sweep_what(record, resumed)}", throttled=True, last=done >= total
            )

        yield line
        return
    with _bar("sweep-k", "last {task.fields[last]}") as bar:
        task = bar.add_task("sweep-k", total=total, last="-")

        def update(record: dict, resumed: bool) -> None:
            bar.update(task, advance=1, last=_sweep_what(record, resumed))

        yield update


@contextmanager
def runs_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict], None] | None]:
    """One progress bar per training run (stats["run"]: masked, dense), each over epochs, with loss and
    validation accuracy; without a terminal, a plain line per epoch."""
    if quiet:
        yield None
        return
    if plain_progress():
        lines = PlainLines()

        def line(stats: dict) -> None:
            lines.emit(
                f"{stats['run']} epoch {stats['epoch']}/{total} loss {stats['loss']:.4f}"
                f" val acc {stats['val_accuracy']:.4f}"
            )

        yield line
        return
    bar = _bar("{task.description}", "loss {task.fields[loss]}  val acc {task.fields[acc]}")
    tasks: dict[str, TaskID] = {}

    def update(stats: dict) -> None:
        if not tasks:
            bar.start()
        if stats["run"] not in tasks:
            tasks[stats["run"]] = bar.add_task(stats["run"], total=total, loss="-", acc="-")
        bar.update(
            tasks[stats["run"]],
            completed=stats["epoch"],
            loss=f"{stats['loss']:.4f}",
            acc=f"{stats['val_accuracy']:.2%}",
        )

    try:
        yield update
    finally:
        if tasks:
            bar.stop()


def _duration(seconds: float) -> str:
    """12s, 3m04s, 1h02m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextmanager
def drift_progress(
    total: int, *, quiet: bool, label: str = "drift", clock: Callable[[], float] = time.monotonic
) -> Iterator[Callable[[dict], None] | None]:
    """drift's progress over training steps, told every step (stats["epoch"]: steps done), with the probe's loss,
    accuracy and sparsity at the logged ones. On a terminal, a live bar that moves at every step and shows the last
    measurement; without one, a line at every logged step (as many as --log-every asks for) and between them at
    most one every PLAIN_EVERY_S, each with the elapsed time and the ETA."""
    if quiet:
        yield None
        return
    started: list[float] = []  # the first report (step 0's measurement): the ETA counts training, not set-up
    if plain_progress():
        lines = PlainLines(every=PLAIN_EVERY_S, clock=clock)

        def line(stats: dict) -> None:
            started[:] = started or [clock()]
            done, elapsed = stats["epoch"], clock() - started[0]
            eta = _duration(elapsed / done * (total - done)) if done > 0 else "-"
            timing = f" elapsed {_duration(elapsed)} eta {eta}"
            if "loss" in stats:
                lines.emit(epoch_line(label, total, stats) + timing)
            else:
                lines.emit(f"{label} step {done}/{total}{timing}", throttled=True, last=done >= total)

        yield line
        return
    bar = _bar(
        "{task.description}", "loss {task.fields[loss]}  acc {task.fields[acc]}  sparsity {task.fields[sparsity]}"
    )
    task: TaskID | None = None

    def update(stats: dict) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total, loss="-", acc="-", sparsity="-")
        bar.update(task, completed=stats["epoch"])
        if "loss" in stats:  # a logged step: its measurement
            bar.update(
                task,
                loss=f"{stats['loss']:.4f}",
                acc=f"{stats['accuracy']:.2%}",
                sparsity=f"{stats['sparsity']:.2%}",
            )

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()
