"""The console: stdout for results (one JSON document with --json, tables otherwise), stderr for people (errors,
warnings, progress bars, silenced by --quiet); every string from a file or the user is shown literally."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

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


def stdout() -> Console:
    """The console for results."""
    return LiteralConsole(file=sys.stdout, soft_wrap=True)


def stderr() -> Console:
    """The console for people: progress, warnings."""
    return LiteralConsole(file=sys.stderr, soft_wrap=True)


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


@contextmanager
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator[Callable[[dict], None] | None]:
    """A progress bar over epochs (loss, running accuracy, current achieved sparsity), shown from the first epoch
    on, so that errors before training (bad data, bad spec) are not preceded by an empty bar."""
    if quiet:
        yield None
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


@contextmanager
def sweep_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict, bool], None] | None]:
    """A progress bar over a sweep's configurations (resumed ones count as done at once), with ETA."""
    if quiet:
        yield None
        return
    with _bar("sweep-k", "last {task.fields[last]}") as bar:
        task = bar.add_task("sweep-k", total=total, last="-")

        def update(record: dict, resumed: bool) -> None:
            how = "resumed" if resumed else f"{pct(record['test_accuracy'])} test"
            bar.update(task, advance=1, last=literal(f"{record['id']} ({how})"))  # ids come from --out-dir files too

        yield update


@contextmanager
def runs_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict], None] | None]:
    """One progress bar per training run (stats["run"]: masked, dense), each over epochs, with loss and
    validation accuracy."""
    if quiet:
        yield None
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
