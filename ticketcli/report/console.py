"""The console: stdout for results (one JSON document with --json, tables otherwise), stderr for people (errors,
warnings, progress bars, silenced by --quiet); every string from a file or the user is shown literally."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import select
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import IO, Any, cast

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

from ticketcli.errors import OutputFailed

# Characters that must never reach a terminal raw, by Unicode category rather than by example: controls (Cc: C0
# with ESC and CR, DEL, C1 with CSI \x9b), format characters (Cf: the bidi marks, embeddings, overrides and
# isolates U+200E/200F/061C/202A-202E/2066-2069, zero-width characters, the BOM), line and paragraph separators
# (Zl, Zp: U+2028/2029), lone surrogates (Cs: invalid text, e.g. an undecodable file name), private-use (Co)
# and unassigned (Cn) code points. Printable ASCII is never looked up, only the other characters.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def _escape(m: re.Match[str]) -> str:
    ch = m[0]
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES:
        return ch
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def literal(value: object) -> str:
    """Text that came from a file or the user, made safe to show: every character of an unsafe category escaped
    (\\x1b, \\x0d, \\u202e, \\u2028, \\ud800), so a ticket's metadata, a path or a --model string can never move
    the cursor, recolour, reorder or rewrite the terminal, and a lone surrogate cannot fail the write."""
    return _NOT_PRINTABLE_ASCII.sub(_escape, str(value))


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


# COLUMNS and LINES are input too: COLUMNS=0 would make Rich render every table as nothing, a huge value
# would make it pad lines without end. A value outside these bounds is clamped; one that is not a number is
# ignored (Rich measures the terminal, or assumes 80 columns).
COLUMNS_RANGE = (40, 10_000)
LINES_RANGE = (10, 10_000)


def _dimension(name: str, bounds: tuple[int, int]) -> int | None:
    """The environment's COLUMNS or LINES clamped to `bounds`; None when unset or not a decimal number."""
    raw = os.environ.get(name, "").strip()
    if not (raw.isascii() and raw.isdigit()):
        return None
    return min(max(int(raw) if len(raw) <= 9 else bounds[1], bounds[0]), bounds[1])


class ResultsStream:
    """stdout for results. A write that fails for any reason but a closed pipe (a full disk, /dev/full, an I/O
    error) ends the run with one error line (exit 2) instead of an internal error, and what is still buffered is
    dropped (fd 1 then points at /dev/null), so that the interpreter's final flush cannot fail again. A closed
    pipe keeps its own quiet ending (exit 141, exits.py)."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            raw = getattr(self._stream, "buffer", None)
            if isinstance(raw, io.RawIOBase):
                self._write_all(raw, text)
                return len(text)
            return self._stream.write(text)
        except OSError as e:
            raise _output_failed(self._stream, e) from None

    def _write_all(self, raw: io.RawIOBase, text: str) -> None:
        """Unbuffered stdout (PYTHONUNBUFFERED=1, python -u): the text layer writes straight to the file and drops
        whatever a partial write left over (a reader that went away mid-write), so the run would end 0 with its
        output cut. Written here until every byte is out, or the write fails (EPIPE: exit 141)."""
        self._stream.flush()
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        view = memoryview(text.encode(encoding, getattr(self._stream, "errors", None) or "strict"))
        while view:
            n = raw.write(view)
            if n is None:  # a non-blocking stdout that is full: wait for room
                select.select([], [raw], [])
                continue
            view = view[n:]

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise _output_failed(self._stream, e) from None

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: what Rich asks of its file
        return getattr(self._stream, name)


def results() -> IO[str]:
    """The current sys.stdout as a ResultsStream."""
    return cast(IO[str], ResultsStream(sys.stdout))


def _output_failed(stream: IO[str], e: OSError) -> BaseException:
    if e.errno == errno.EPIPE:  # the reader went away: exits.closed_output ends the run quietly
        return e
    _drop_buffered(stream, 1)
    return OutputFailed(f"cannot write the results to stdout: {e.strerror or e}")


def _drop_buffered(stream: IO[str], fd: int) -> None:
    """Point fd at /dev/null and drain the stream's buffer there: its content could not be written anyway."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)
        stream.flush()
    except (OSError, ValueError):
        pass


def write_stderr(text: str) -> None:
    """Write to stderr for people. A stderr that cannot be written (2>/dev/full, a full disk) changes nothing: the
    line is dropped and the exit code stays the run's own. A closed pipe still ends the run quietly (141)."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError as e:
        if e.errno == errno.EPIPE:
            raise
        _drop_buffered(sys.stderr, 2)
    except ValueError:  # a closed stream
        pass


def tolerate_encodings() -> None:
    """stdout and stderr escape what their encoding cannot write (PYTHONIOENCODING=ascii, a Latin-1 locale) as
    \\u2026 rather than failing on the first non-ASCII character."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _console(file: IO[str]) -> Console:
    # Rich's own NO_COLOR handling drops colours but keeps bold and underline escapes; without a colour system it
    # writes none at all, even under FORCE_COLOR. TERM=dumb needs nothing here: Rich gives a dumb terminal no colour.
    width, height = _dimension("COLUMNS", COLUMNS_RANGE), _dimension("LINES", LINES_RANGE)  # None: Rich decides
    if no_color():
        return LiteralConsole(file=file, soft_wrap=True, color_system=None, width=width, height=height)
    return LiteralConsole(file=file, soft_wrap=True, width=width, height=height)


def stdout() -> Console:
    """The console for results."""
    return _console(results())


def stderr() -> Console:
    """The console for people: progress, warnings."""
    return _console(sys.stderr)


def flush_results() -> None:
    """Flush stdout before the exit code is final: a failed write is reported here, not lost at shutdown."""
    results().flush()


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def finite_json(obj: object) -> object:
    """NaN and ±Infinity as null: strict JSON has no such numbers, and CI parsers (jq, JSON.parse) reject them.
    A lone surrogate in a string (or key) becomes U+FFFD: JSON can only write it as an escape that encodes no
    character, which strict parsers reject, so the document stays valid Unicode whatever a file held."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, dict):
        return {finite_json(k) if isinstance(k, str) else k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def print_json(obj: dict) -> None:
    """Exactly one strict JSON document on stdout (non-finite numbers as null, lone surrogates as U+FFFD, non-ASCII
    and controls escaped)."""
    results().write(json.dumps(finite_json(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def _line(text: str) -> str:
    return literal(text.replace("\r\n", " ").replace("\n", " ")) + "\n"


def error(message: str, hint: str | None = None) -> None:
    """One line on stderr, shown literally (a message quotes paths and file contents)."""
    write_stderr(_line(f"error: {message}" + (f" (hint: {hint})" if hint else "")))


def internal_error(e: BaseException, *, traceback_shown: bool = False) -> None:
    """The one line of an unexpected exception (a bug): its type and first line, and how to see the traceback."""
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    what = type(e).__name__ + (f": {first}" if first else "")
    how = "the traceback is above" if traceback_shown else "rerun with TICKET_DEBUG=1 for the traceback"
    write_stderr(_line(f"internal error: {what}; {how}"))


def warn(message: str) -> None:
    """One line on stderr (only from rank 0 under torchrun: every rank would say the same)."""
    from ticketcli.world import quiet_rank  # torch-free (distributed.py imports torch)

    if not quiet_rank():
        write_stderr(_line(f"warning: {message}"))


def pct(x: float | None) -> str:
    """A fraction as a percentage with two decimals ("-" when absent)."""
    return "-" if x is None else f"{100 * x:.2f}%"


def method_name(method: object) -> str:
    """The name of a result's `method`: the ticket's method record (an object with a `name`), or a bare name."""
    return str(method.get("name")) if isinstance(method, dict) else str(method)


# Off a terminal (a CI log), progress is plain lines: the first and the last of a loop, and between them at most one
# every PLAIN_EVERY_S seconds; while a long step runs silently (an epoch of a big model, evaluation, BatchNorm
# recalibration), a heartbeat line at least every PLAIN_EVERY_S seconds, so that a log shows that the run is alive,
# how far it got and when it should end, without flooding.
PLAIN_EVERY_S = 10.0
CLOCK: Callable[[], float] = time.monotonic  # what progress lines measure time with (tests put a fake clock here)


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
    `every` seconds: a log shows that the run is alive and how far it got without a line per step. Thread-safe (a
    heartbeat thread writes through the same object)."""

    def __init__(self, every: float | None = None, clock: Callable[[], float] | None = None):
        self.every = PLAIN_EVERY_S if every is None else every  # read when made: tests change PLAIN_EVERY_S
        self.clock = CLOCK if clock is None else clock
        self.shown_at: float | None = None
        self.lock = threading.Lock()

    def emit(self, text: str, *, throttled: bool = False, last: bool = False) -> bool:
        """Write one line, unless throttled and the previous one is less than `every` seconds old; whether it
        was written."""
        with self.lock:
            now = self.clock()
            if throttled and not last and self.shown_at is not None and now - self.shown_at < self.every:
                return False
            self.shown_at = now
            write_stderr(_line(text))
            return True


def duration(seconds: float) -> str:
    """A duration for a log line: 7s, 3m05s, 2h04m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Pace:
    """Elapsed time and the ETA of a loop of `total` units, from the rate of the units finished so far (units
    that took no time, e.g. a resumed sweep configuration, are counted as done but not in the rate)."""

    def __init__(self, total: int, clock: Callable[[], float], started: float | None = None):
        self.total, self.clock = total, clock
        self.started = clock() if started is None else started
        self.done = self.skipped = 0
        self.done_at = self.started

    def advance(self, done: int, *, timed: bool = True) -> None:
        """`done` units are finished now (timed=False: the last one took no time)."""
        if not timed:
            self.skipped += done - self.done
        self.done, self.done_at = done, self.clock()

    def eta(self) -> str | None:
        """Seconds left as text, or None before the first timed unit finished."""
        timed = self.done - self.skipped
        if timed <= 0:
            return None
        per_unit = (self.done_at - self.started) / timed
        left = max(0, self.total - self.done)
        # the unit now running counts as at most finished, never as less than the units after it
        return duration(max(per_unit * (left - 1), per_unit * left - (self.clock() - self.done_at)))


class PlainProgress:
    """A loop's plain-line progress off a terminal: each update is a throttled line with elapsed time and ETA (the
    first and the last always shown), and heartbeat() (called by a background thread, or by a test with its own
    clock) adds a line when nothing was written for `every` seconds, saying which unit is running."""

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        unit: str = "epoch",
        every: float | None = None,
        clock: Callable[[], float] | None = None,
    ):
        self.lines = PlainLines(every, clock)
        self.label, self.unit, self.clock = label, unit, self.lines.clock
        self.pace: Pace | None = None if total is None else Pace(total, self.clock)
        self.started = self.clock()
        self.phase: tuple[str, Pace] | None = None  # a phase over chunks now running (chunk()), with its own ETA
        self.phase_shown = False  # whether it printed a line

    def restart(self, total: int) -> None:
        """The loop's total, at its first update; a later loop (train-weak's dense run, iterated's next round)
        starts its ETA over, timed from the end of the loop before."""
        pace = self.pace
        if pace is None or pace.done == 0:
            self.pace = Pace(total, self.clock, self.started)
        else:
            self.pace = Pace(total, self.clock, pace.done_at)

    def update(self, text: str, done: int, *, first: bool = False, timed: bool = True) -> None:
        """`done` units are finished: a line `text, elapsed X, ETA Y` (throttled unless first or last)."""
        pace = self.pace
        assert pace is not None, "update() needs a total"
        pace.advance(done, timed=timed)
        last = done >= pace.total
        eta = None if last else pace.eta()
        when = f", elapsed {duration(self.clock() - self.started)}" + ("" if eta is None else f", ETA {eta}")
        self.lines.emit(text + when, throttled=not first, last=last)

    def chunk(self, phase: str, done: int, total: int, *, lines: bool = True) -> None:
        """A ChunkProgress: `done` of the `total` chunks of `phase` (BatchNorm recalibration, an evaluation) are
        finished, 0 when it starts (its ETA is timed from then). lines (export, evaluate): a line `label phase chunk
        3/10, elapsed X, ETA Y` once `every` seconds passed since the last line (or the start), and the phase's last
        chunk also when it showed one before, so that work done within `every` seconds prints nothing (a quick
        evaluate's stderr stays empty, or holds only its error) and longer work a line at least every `every`
        seconds. Without lines, only the heartbeat names the phase and its ETA (after an extraction's epochs)."""
        if done == 0 or self.phase is None or self.phase[0] != phase:
            self.phase, self.phase_shown = (phase, Pace(total, self.clock)), False
        pace = self.phase[1]
        if done == 0:
            return
        pace.advance(done)
        last = done >= pace.total
        if lines and (self.quiet_for() >= self.lines.every or (last and self.phase_shown)):
            eta = None if last else pace.eta()
            when = f", elapsed {duration(self.clock() - self.started)}" + ("" if eta is None else f", ETA {eta}")
            self.phase_shown = self.lines.emit(f"{self.label} {phase} chunk {done}/{pace.total}{when}")
        if last:
            self.phase = None  # the heartbeat goes back to the loop (or to "working") until the next phase

    def quiet_for(self) -> float:
        """Seconds since the last line, or since the start before the first."""
        shown = self.lines.shown_at
        return self.clock() - (self.started if shown is None else shown)

    def heartbeat(self) -> None:
        """A line when the last one (or the start) is `every` seconds old: the unit running, elapsed time, ETA."""
        if self.quiet_for() < self.lines.every:
            return
        elapsed = duration(self.clock() - self.started)
        pace, running = self.pace, self.phase  # read once: the loop's thread may end the phase meanwhile
        if running is not None:
            phase, chunks = running
            eta = chunks.eta()
            text = f"{self.label} {phase} chunk {chunks.done + 1}/{chunks.total} running, elapsed {elapsed}, " + (
                f"ETA {eta}" if eta is not None else "ETA after the first chunk"
            )
        elif pace is None:
            text = f"{self.label} working, elapsed {elapsed}"
        elif pace.done >= pace.total:
            text = f"{self.label} {pace.done}/{pace.total} {self.unit}s done, finishing, elapsed {elapsed}"
        else:
            eta = pace.eta()
            text = f"{self.label} {self.unit} {pace.done + 1}/{pace.total} running, elapsed {elapsed}, " + (
                f"ETA {eta}" if eta is not None else f"ETA after the first {self.unit}"
            )
        self.lines.emit(text, throttled=True)

    @contextmanager
    def beating(self) -> Iterator[PlainProgress]:
        """Call heartbeat() from a daemon thread while the body runs (it wakes when a line could be due)."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(max(0.05, min(self.lines.every - self.quiet_for(), self.lines.every))):
                self.heartbeat()

        thread = threading.Thread(target=run, name="ticket-progress", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=5)


ChunkProgress = Callable[[str, int, int], None]  # (phase, chunks done, chunks in it): batchnorm.ChunkProgress


@contextmanager
def working(label: str, *, quiet: bool, lines: bool = False) -> Iterator[ChunkProgress | None]:
    """A step without a loop to count (rebuilding a ticket's network, a method without epochs), and the phases over
    chunks it reports through the callback it yields (BatchNorm recalibration, evaluation). Off a terminal, a line
    every PLAIN_EVERY_S seconds while nothing else is written, with the running phase and its ETA, and with `lines`
    a phase's chunk (elapsed, ETA) once PLAIN_EVERY_S passed since the last line, and its last chunk if it showed
    one (PlainProgress.chunk); on a terminal, a bar row for the phases, from the first one on. Nothing when quiet,
    or in a torchrun worker but rank 0."""
    from ticketcli.world import quiet_rank  # torch-free

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
    """The callback a loop's progress display yields (called with each stats dict), carrying `phases`: the
    ChunkProgress of the work after or between the loops (the final BatchNorm recalibration and evaluation), shown on
    the same display."""

    def __init__(self, update: Callable[[dict], None], phases: ChunkProgress):
        self.update, self.phases = update, phases

    def __call__(self, stats: dict) -> None:
        self.update(stats)


def phases_of(progress: object) -> ChunkProgress | None:
    """The phases' callback of what a progress display yielded (None for a plain function or no display)."""
    return progress.phases if isinstance(progress, StatsProgress) else None


def epoch_line(label: str, total: int, stats: dict) -> str:
    """One plain progress line of an epoch (or step, or run) loop: `augmented epoch 12/100 loss 0.4123 acc 87.12%
    sparsity 90.00%` (accuracy and sparsity as percentages, as the tables and the bar print them)."""
    where = f"{label} round {stats['round']}" if "round" in stats else label
    unit = stats.get("unit", "epoch")
    return (
        f"{where} {unit} {stats['epoch']}/{stats.get('epochs', total)} loss {stats['loss']:.4f}"
        f" acc {pct(stats['accuracy'])} sparsity {pct(stats['sparsity'])}"
    )


@contextmanager
def _stats_bar(label: str, total: int) -> Iterator[StatsProgress]:
    """A Rich bar over a loop of `total` units (epochs, steps), started at the first report: the units done, the
    loss, accuracy and sparsity of the reports that carry them, and the round of iterated's loops; the phases
    after the loop (StatsProgress.phases) are rows of the same bar."""
    bar = _bar("{task.description}", "{task.fields[stats]}")
    task: TaskID | None = None

    def update(stats: dict) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total, stats="loss -  acc -  sparsity -")
        if "round" in stats:  # iterated: the bar restarts each round
            bar.update(task, description=f"{label} round {stats['round']}")
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
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator[Callable[[dict], None] | None]:
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

        def line(stats: dict) -> None:
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


def _sweep_what(record: dict, resumed: bool) -> str:
    # ids come from --out-dir files too, hence literal()
    return literal(f"{record['id']} ({'resumed' if resumed else pct(record['test_accuracy']) + ' test'})")


@contextmanager
def sweep_progress(total: int, *, quiet: bool) -> Iterator[Callable[[dict, bool], None] | None]:
    """A progress bar over a sweep's configurations (resumed ones count as done at once), with ETA; without a
    terminal, a plain line for the first and last configuration and at most one every PLAIN_EVERY_S between, with a
    heartbeat while a configuration runs."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain, done = PlainProgress("sweep-k", total, unit="configuration"), 0

        def line(record: dict, resumed: bool) -> None:
            nonlocal done
            done += 1
            text = f"sweep-k {done}/{total} last {_sweep_what(record, resumed)}"
            plain.update(text, done, first=done == 1, timed=not resumed)

        with plain.beating():
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
    validation accuracy; without a terminal, plain lines as epoch_progress writes them, per run."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain = PlainProgress("train-weak", total)
        runs: list[str] = []

        def line(stats: dict) -> None:
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

    def update(stats: dict) -> None:
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
) -> Iterator[Callable[[dict], None] | None]:
    """drift's progress over training steps, told every step (stats["epoch"]: steps done), with the probe's loss,
    accuracy and sparsity at the logged ones. On a terminal, a live bar that moves at every step and shows the last
    measurement; without one, a line at every logged step (as many as --log-every asks for) and between them at
    most one every PLAIN_EVERY_S (and a heartbeat while a step runs silently), each with the elapsed time and the
    ETA, which counts from the first report (step 0's measurement): training, not set-up."""
    if quiet:
        yield None
        return
    if plain_progress():
        plain = PlainProgress(label, total, unit="step", clock=clock)
        started = False

        def line(stats: dict) -> None:
            nonlocal started
            if not started:
                started, plain.pace = True, Pace(total, plain.clock)
            logged = "loss" in stats
            text = epoch_line(label, total, stats) if logged else f"{label} step {stats['epoch']}/{total}"
            plain.update(text, stats["epoch"], first=logged)

        with plain.beating():
            yield line
        return
    with _stats_bar(label, total) as update:
        yield update
