"""A SIGTERM at every instant of every place that creates a file or opens a descriptor leaves nothing behind.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is; the handler of
`stop_on_signals` raises there. A signal that lands after `tempfile.mkstemp` made its file but before the name was
assigned used to leave `.NAME.XXXX.tmp` beside a checkpoint (seen once in CI, in a SIGTERM test that checkpoints
every epoch). Rather than that one instant, these tests replay each operation once per bytecode it executes, with
the handler called before that bytecode exactly as the interpreter would call it, and check the outcome every time:
no temporary file or folder and no empty placeholder left, every output absent or complete, no descriptor left
open, no signal left held, and the run stopping by the signal (Interrupted, exit 143) whenever it landed."""

from __future__ import annotations

import dis
import errno
import gc
import itertools
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ticketcli.drift import rundir
from ticketcli.errors import Interrupted, UsageError
from ticketcli.files import atomic, uninterrupted
from ticketcli.files.bounded import read_regular_file
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.sweep.claims import Claims, claim_path
from ticketcli.ticketfile.layout import open_file

PAYLOAD = b"complete payload\n" * 64
TEST_FILE = os.path.abspath(__file__)


def open_descriptors() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def descriptors_back_to(before: set[str]) -> bool:
    """Whether the open descriptors are those of `before`, once anything only garbage holds is collected (a full
    collection costs a tenth of a second with torch loaded: only when the cheap look differs)."""
    if open_descriptors() == before:
        return True
    gc.collect()
    return open_descriptors() == before


# Where CPython runs a pending signal handler (its "eval breaker" check): as a function starts or a generator
# resumes (RESUME), on a loop's backward jump, and once a call has returned, before the next instruction; a C
# function that sees the signal while it waits (EINTR) raises as it returns, which is the same instant. A call that
# raised is followed by no check.
BREAKER_AFTER = {"CALL", "CALL_KW", "CALL_FUNCTION_EX", "JUMP_BACKWARD"}


class SignalAt:
    """Trace the main thread and call the installed SIGTERM handler at the `at`-th instant where the interpreter
    could run it, below the traced call (0: count only). The handler is called as the interpreter calls it, so
    whatever it does (raise at once, or hold the signal inside a section) is what a real signal there would do."""

    def __init__(self, at: int):
        self.at, self.count, self.fired, self.place = at, 0, False, ""
        self.previous: dict[int, str] = {}  # frame id -> the instruction it executed last

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "exception":  # the call raised: no check follows it, the handler's code runs next
            self.previous[id(frame)] = ""
        if event != "opcode":
            return self._local
        op = dis.opname[frame.f_code.co_code[frame.f_lasti]]
        before, self.previous[id(frame)] = self.previous.get(id(frame)), op
        if op == "RESUME" or before in BREAKER_AFTER:
            self.count += 1
            if self.count == self.at:
                self.fired = True
                code = frame.f_code
                self.place = f"{Path(code.co_filename).name}:{frame.f_lineno} in {code.co_name}"
                handler = signal.getsignal(signal.SIGTERM)
                assert callable(handler)
                handler(signal.SIGTERM, frame)  # may raise: the exception enters the traced frame right here
        return self._local

    def _global(self, frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename == TEST_FILE:
            return None  # the operation's own call site is not part of it
        frame.f_trace_opcodes = True
        self.previous[id(frame)] = ""  # a new frame (an id may be reused)
        return self._local

    def run(self, operation: Callable[[], Any]) -> str:
        """'finished' or 'interrupted' (Interrupted raised by stop_on_signals)."""
        try:
            with stop_on_signals(outputs=None, unit=None):
                sys.settrace(self._global)
                try:
                    operation()
                finally:
                    sys.settrace(None)
        except Interrupted as e:
            assert e.exit_code == 128 + signal.SIGTERM
            return "interrupted"
        return "finished"


def every_instant(operation: Callable[[], Any], check: Callable[[str], None], reset: Callable[[], None]) -> int:
    """Run `operation` once untouched, then with the signal at its first instant, its second, ... until a run ends
    before the chosen instant (the count may shift by a few between runs: a cache warmed by the first call); after
    each run `check(outcome)` and then `reset()`. Returns how many instants were tried."""
    reset()
    fds = open_descriptors()
    assert SignalAt(0).run(operation) == "finished"
    check("finished")
    reset()
    for at in itertools.count(1):
        probe = SignalAt(at)
        outcome = probe.run(operation)
        where = f"signal at instant {at} ({probe.place})"
        assert outcome == ("interrupted" if probe.fired else "finished"), f"{where}: the signal was not what stopped it"
        assert not uninterrupted.holding(), f"{where}: a signal is still held"
        assert uninterrupted._OPEN == [0], f"{where}: a section was left open"
        check(outcome)
        assert descriptors_back_to(fds), f"{where}: a descriptor was left open"
        reset()
        if not probe.fired:
            assert at > 5, at  # the operation was traced
            return at - 1
    raise AssertionError("unreachable")


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(autouse=True)
def signals_stay_here():
    """If a handler of ours were not installed, the traced call would kill the test process: fail instead."""

    def unhandled(signum, frame):
        raise AssertionError("SIGTERM reached the test process: no handler of ticket's was set")

    previous = signal.signal(signal.SIGTERM, unhandled)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("case", ["new", "replaced", "no-hard-links"])
def test_an_atomic_write_leaves_the_old_file_or_the_complete_new_one_and_no_temp(case, tmp_path, monkeypatch):
    out = tmp_path / "t.safetensors"
    old = b"the file that was there"
    if case == "no-hard-links":  # FAT and some network mounts: an exclusive placeholder, then a rename over it
        monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
        monkeypatch.setattr(atomic, "_rename_noreplace", lambda src, dst: None)

    def reset():
        for p in tmp_path.iterdir():
            p.unlink()
        if case == "replaced":
            out.write_bytes(old)

    def check(outcome):
        assert names(tmp_path) == ["t.safetensors"] or (case != "replaced" and names(tmp_path) == []), names(tmp_path)
        if out.exists():
            assert out.read_bytes() in ((PAYLOAD,) if case != "replaced" else (PAYLOAD, old))
        if outcome == "finished":
            assert out.read_bytes() == PAYLOAD

    tried = every_instant(lambda: atomic.write_atomic(out, PAYLOAD, overwrite=case == "replaced"), check, reset)
    assert tried > 50, tried


def test_the_writability_probe_leaves_nothing(tmp_path):
    every_instant(lambda: atomic.probe_writable(tmp_path), lambda outcome: assert_empty(tmp_path), lambda: None)


def assert_empty(folder: Path) -> None:
    assert names(folder) == [], names(folder)


def test_a_scratch_folder_is_removed_whenever_the_signal_lands(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def operation():
        with atomic.ScratchFolder("ticket-sweep-") as d:
            (d / "x.safetensors").write_bytes(PAYLOAD)

    def check(outcome):
        if names(tmp_path):
            gc.collect()  # a folder whose removal was interrupted goes with its object (the run's stack, unwound)
        assert_empty(tmp_path)

    every_instant(operation, check, lambda: None)


def test_a_sweep_claim_is_whole_and_held_or_absent(tmp_path):
    out_dir = tmp_path / "sweep"
    out_dir.mkdir()
    claims = Claims(out_dir)
    path = claim_path(out_dir, "r1")

    def check(outcome):
        if "r1" in claims.held:
            assert json.loads(path.read_text())["token"] == claims.token  # complete, and the sweep releases it
            claims.release("r1")
        assert names(out_dir) == [], f"{names(out_dir)}: a claim the sweep does not know it holds stays behind"

    every_instant(lambda: claims.take("r1"), check, lambda: None)


def test_a_run_dir_is_started_whole_or_not_at_all(tmp_path):
    folder = tmp_path / "run"

    def reset():
        for p in folder.glob("*") if folder.exists() else ():
            p.unlink()
        if folder.exists():
            folder.rmdir()

    def check(outcome):
        if folder.exists():
            assert names(folder) == sorted([rundir.SETTINGS, rundir.MEASUREMENTS]), names(folder)
            rundir.open_settings(folder)

    every_instant(lambda: rundir.create(folder, {"seed": 0}), check, reset)


@pytest.mark.parametrize("reader", ["bounded", "ticket", "measurements"])
def test_an_opened_file_is_closed_whenever_the_signal_lands(reader, tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"")
    open_one = {
        "bounded": lambda: read_regular_file(path, 1 << 20, "a file"),
        "ticket": lambda: open_file(path)[0].close(),
        "measurements": lambda: rundir.Measurements(path).file.close(),
    }[reader]
    every_instant(open_one, lambda outcome: None, lambda: None)  # every_instant compares the open descriptors


def test_an_error_inside_a_section_gives_way_to_the_held_signal():
    """A section that fails after a signal was held ends with the signal (the run is stopping), not the error."""

    def operation():
        with uninterrupted.uninterrupted():
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs at the next bytecode, here: held
            assert uninterrupted.holding()
            raise UsageError("the disk is full")

    with pytest.raises(Interrupted) as e:
        with stop_on_signals(outputs=None, unit=None):
            operation()
    assert e.value.exit_code == 128 + signal.SIGTERM and not uninterrupted.holding()


def test_a_section_outside_the_main_thread_holds_nothing():
    import threading

    seen: list[int] = []

    def worker():
        with uninterrupted.uninterrupted():
            seen.append(uninterrupted._OPEN[0])

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [0]
