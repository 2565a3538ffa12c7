"""SIGINT and SIGTERM during long commands: stop at once, say where the run stopped and what was (not) written,
and exit with 128 + the signal number (130, 143).

Any long command wraps its body in `stop_on_signals(...)` (inside `errors_to_exit_codes()`) and passes its
progress callback through `position.track(...)`. Files are never left half-written because every writer goes
through atomic.write_atomic (temp file + rename, the temp file unlinked on any exception); the few instructions
in which a new file exists before anything names it for clean-up are files.uninterrupted sections, which hold a
signal until they end.

From the first signal on, the shutdown is protected: a later SIGINT or SIGTERM is noted (hurried()), never raised,
so every clean-up runs and the exit code stays the first signal's (a SIGTERM after a Ctrl-C still exits 130).
What a later signal may skip is what writes nothing: entry.py ends the process at once once the outcome is final.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ticketcli.errors import Interrupted
from ticketcli.files import uninterrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)

# The signals caught while a handler of ours was set, until the outermost stop_on_signals is entered again: the
# run is ending with 128 + the first, and every later SIGINT/SIGTERM (a second Ctrl-C during the clean-up, in any
# handler of ours, entry.py's included) is only appended, so that the clean-up finishes and the exit code stays
# the first signal's instead of the process dying by the second.
_RECEIVED: list[int] = []
_DEPTH: list[int] = [0]
# What to do at once when the first signal arrives, before the stack unwinds (pool.py: end the worker processes).
_ON_STOP: list[Callable[[], None]] = []


def received() -> int | None:
    """The signal this run is ending by, if any."""
    return _RECEIVED[0] if _RECEIVED else None


def again(signum: int) -> None:
    """A further signal while the run is stopping (from any handler of ours): noted for hurried(), never raised."""
    _RECEIVED.append(signum)


def hurried() -> bool:
    """Whether a signal came after the one the run is ending by: the user insists, what is optional is skipped."""
    return len(_RECEIVED) > 1


@contextmanager
def on_stop(action: Callable[[], None]) -> Iterator[None]:
    """Run `action` as soon as a signal stops the run while inside this block (before any clean-up unwinds the
    stack: a suspended generator's own clean-up may run much later)."""
    _ON_STOP.append(action)
    try:
        yield
    finally:
        if action in _ON_STOP:
            _ON_STOP.remove(action)


def _stop_now() -> None:
    for action in list(_ON_STOP):
        try:
            action()
        except Exception:  # stopping goes on whatever one action did: the signal's one line still follows
            pass


class _Signal(BaseException):
    """Raised by the handler; a BaseException so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _deliver(signum: int) -> None:
    raise _Signal(signum)


class Position:
    """The last progress record a run reported (epoch, and round for iterated)."""

    def __init__(self, unit: str = "epoch"):
        self.last: dict[str, Any] | None = None
        self.unit = unit  # what the progress records count, for "before the first ... finished"

    def track(self, progress: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
        def record(stats: dict[str, Any]) -> None:
            self.last = stats
            if progress is not None:
                progress(stats)

        return record

    def describe(self) -> str:
        s = self.last
        if s is None:
            return f"before the first {self.unit} finished"
        where = f"after {s.get('unit', 'epoch')} {s['epoch']}" + (f" of {s['epochs']}" if "epochs" in s else "")
        if "run" in s:  # train-weak: the masked run or the dense baseline
            where += f" of the {s['run']} run"
        if "round" in s:
            where += f" of round {s['round']} (at most {s['rounds']})"
        return where


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


@contextmanager
def stop_on_signals(
    *, outputs: tuple[Path, ...] | None = (), note: Callable[[], str | None] | None = None, unit: str | None = "epoch"
) -> Iterator[Position]:
    """Turn SIGINT/SIGTERM (and KeyboardInterrupt) into errors.Interrupted naming the position reached, whether
    each output was written, and `note()` (e.g. where a checkpoint is). A second signal while stopping is ignored,
    here and by every outer handler (received()), so the cleanup (unlinking temp files) always finishes.
    `unit=None` names no position and `outputs=None` makes no claim about files (the CLI's outermost guard, which
    knows neither)."""
    position = Position(unit or "epoch")
    before = {p: _stamp(p) for p in outputs or ()}
    if _DEPTH[0] == 0:
        _RECEIVED.clear()  # a new run (in-process callers such as tests run several)

    def handler(signum: int, frame: FrameType | None) -> None:
        if _RECEIVED:  # the run is already stopping
            again(signum)
            return
        _RECEIVED.append(signum)
        _stop_now()
        if not uninterrupted.hold(lambda: _deliver(signum)):  # held: a file is being created and named
            _deliver(signum)

    main = threading.current_thread() is threading.main_thread()
    # handlers can only be set in the main thread; a signal the parent ignores (SIGINT of a background job) stays so
    kept = [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN] if main else []
    previous = {s: signal.signal(s, handler) for s in kept}
    _DEPTH[0] += 1
    try:
        yield position
    except (_Signal, KeyboardInterrupt) as e:
        signum = e.signum if isinstance(e, _Signal) else signal.SIGINT
        parts = [f"interrupted by {signal.Signals(signum).name}" + (f" {position.describe()}" if unit else "")]
        if outputs is not None:
            written = [str(p) for p in outputs if _stamp(p) != before[p]]
            parts.append(
                f"wrote {', '.join(written)} completely before stopping" if written else "no output was written"
            )
        extra = note() if note is not None else None
        raise Interrupted("; ".join(parts + ([extra] if extra else [])), signum) from None
    finally:
        _DEPTH[0] -= 1
        for s, h in previous.items():
            signal.signal(s, h)
