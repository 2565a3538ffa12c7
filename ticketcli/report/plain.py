"""Progress as plain lines on stderr, off a terminal (a CI log, a file, a pipe): throttled lines, elapsed time and
ETA, and a heartbeat while a long step runs silently. progress.py chooses between these and a Rich bar."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ticketcli.report.console import one_line, write_stderr

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
            write_stderr(one_line(text))
            return True


def duration(seconds: float) -> str:
    """A duration for a log line: 7s, 3m05s, 2h04m."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def rate_text(per_second: float) -> str:
    """A rate for a progress line, three digits at most past the leading ones: 1234, 56.7, 8.90, 0.042."""
    if per_second >= 100:
        return f"{per_second:.0f}"
    if per_second >= 10:
        return f"{per_second:.1f}"
    return f"{per_second:.2f}" if per_second >= 0.1 else f"{per_second:.2g}"


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

    def rate(self) -> float | None:
        """Timed units per second since the start, or None before the first timed unit finished."""
        timed, spent = self.done - self.skipped, self.done_at - self.started
        return timed / spent if timed > 0 and spent > 0 else None

    def eta(self) -> str | None:
        """Seconds left as text, or None before the first timed unit finished."""
        left = self.seconds_left()
        return None if left is None else duration(left)

    def seconds_left(self) -> float | None:
        """Seconds left, or None before the first timed unit finished."""
        timed = self.done - self.skipped
        if timed <= 0:
            return None
        per_unit = (self.done_at - self.started) / timed
        left = max(0, self.total - self.done)
        # the unit now running counts as at most finished, never as less than the units after it
        return max(0.0, per_unit * (left - 1), per_unit * left - (self.clock() - self.done_at))


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
        self.rated = False  # whether the loop's lines show its rate (a rated loop's steps/s) before the ETA

    def restart(self, total: int) -> None:
        """The loop's total, at its first update; a later loop (train-weak's dense run, iterated's next round)
        starts its ETA over, timed from the end of the loop before."""
        pace = self.pace
        if pace is None or pace.done == 0:  # a rated loop's rate and ETA count from its first report, not set-up
            self.pace = Pace(total, self.clock, None if self.rated else self.started)
        else:
            self.pace = Pace(total, self.clock, pace.done_at)

    def update(self, text: str, done: int, *, first: bool = False, timed: bool = True) -> None:
        """`done` units are finished: a line `text, elapsed X, ETA Y` (throttled unless first or last)."""
        pace = self.pace
        assert pace is not None, "update() needs a total"
        pace.advance(done, timed=timed)
        last = done >= pace.total
        eta = None if last else pace.eta()
        when = f", elapsed {duration(self.clock() - self.started)}" + self._rate(pace)
        self.lines.emit(text + when + ("" if eta is None else f", ETA {eta}"), throttled=not first, last=last)

    def _rate(self, pace: Pace) -> str:
        """`, 12.3 steps/s` when the lines show the rate and a timed unit has finished, else nothing."""
        rate = pace.rate() if self.rated else None
        return "" if rate is None else f", {rate_text(rate)} {self.unit}s/s"

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
            text = (
                f"{self.label} {self.unit} {pace.done + 1}/{pace.total} running, elapsed {elapsed}{self._rate(pace)}, "
                + (f"ETA {eta}" if eta is not None else f"ETA after the first {self.unit}")
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
