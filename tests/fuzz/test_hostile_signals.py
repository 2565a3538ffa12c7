"""SIGINT and SIGTERM end every command with one line and exit 130/143, never a traceback or a silent kill: during
start-up (while torch is importing, before the CLI exists), inside `inspect`, `evaluate` and `export` (like the
long commands), while results are printed, and in the middle of writing --out, which then leaves neither a temp
file nor a half-written or clobbered --out."""

from __future__ import annotations

import os
import signal

import pytest
from hostile import QUICK_SWEEP, REPO, assert_clean, child, cli, snapshot

from ticketcli.export import run as export_core
from ticketcli.report import tables as report_tables
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import inspect as runs_inspect
from ticketcli.ticketfile import ticket as ticket_io

SIGNALS = [signal.SIGINT, signal.SIGTERM]


@pytest.fixture(autouse=True)
def signals_must_not_reach_pytest():
    """Signals sent to this process must be caught by ticket's handlers; if none is set, fail instead of dying."""

    def unhandled(signum, frame):
        raise AssertionError(f"{signal.Signals(signum).name} reached the test process: ticket set no handler")

    previous = {s: signal.signal(s, unhandled) for s in SIGNALS}
    yield
    for s, h in previous.items():
        signal.signal(s, h)


def signal_then(sig: int, real=None):
    """A stand-in that receives `sig` (as from the terminal or a scheduler) and then carries on as `real` would."""

    def stand_in(*args, **kwargs):
        os.kill(os.getpid(), sig)
        return real(*args, **kwargs) if real is not None else None

    return stand_in


def exit_of(sig: int) -> int:
    return 128 + sig


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("command", ["inspect", "evaluate", "export"])
def test_inspect_evaluate_export_stop_with_one_line(command, sig, ticket, tmp_path, monkeypatch):
    out = tmp_path / "x.safetensors"
    where = {
        "inspect": (runs_inspect, "inspect_ticket"),
        "evaluate": (runs_evaluate, "evaluate_ticket"),
        "export": (export_core, "export_ticket"),
    }[command]
    monkeypatch.setattr(*where, signal_then(sig, getattr(*where)))
    args = {
        "inspect": ["inspect", str(ticket)],
        "evaluate": ["evaluate", str(ticket), "--device", "cpu"],
        "export": ["export", str(ticket), "--format", "masks", "--out", str(out)],
    }[command]
    run = cli(*args)
    assert_clean(run, exit_of(sig), contains=f"interrupted by {sig.name}", folder=tmp_path)
    assert run.stdout == "" and not out.exists()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("existing", [False, True], ids=["new-out", "forced-over-old-out"])
def test_a_signal_in_the_middle_of_writing_leaves_no_temp_and_no_partial_out(
    existing, sig, ticket, tmp_path, monkeypatch
):
    out = tmp_path / "x.safetensors"
    if existing:
        out.write_bytes(b"the previous export")
    before = snapshot(out)
    monkeypatch.setattr(os, "fsync", signal_then(sig, os.fsync))  # the temp file is written, not yet renamed
    run = cli("export", str(ticket), "--format", "masked", "--out", str(out), *(["--force"] if existing else []))
    assert_clean(run, exit_of(sig), contains="no output was written", unchanged=before, folder=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == (["x.safetensors"] if existing else [])


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_while_results_are_printed_is_one_line(sig, ticket, monkeypatch):
    monkeypatch.setattr(report_tables, "evaluate_table", signal_then(sig))
    assert_clean(cli("evaluate", str(ticket), "--device", "cpu"), exit_of(sig), contains=f"interrupted by {sig.name}")


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_signal_outside_any_command_handler_is_one_line(sig, tmp_path, monkeypatch):
    """extract prints its table after its own handler is gone: the CLI's outermost guard catches the signal."""
    monkeypatch.setattr(report_tables, "extract_table", signal_then(sig))
    out = tmp_path / "t.safetensors"
    run = cli(
        "extract",
        "--method",
        "random",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-13-10",
        "--n-extract",
        "100",
        "--n-val",
        "50",
        "--quiet",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert_clean(run, exit_of(sig), folder=tmp_path)
    assert run.stderr.strip() == f"error: interrupted by {sig.name}" and out.is_file()


# Start-up is fast now that the CLI imports torch late, so the child's start-up is made slow on purpose: a
# sitecustomize (imported by site before anything else) holds the import of ticketcli.cli.app for seconds.
SLOW_START = """
import importlib.abc, sys, time
class SlowCli(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ticketcli.cli.app":
            time.sleep(10)
        return None
sys.meta_path.insert(0, SlowCli())
"""


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.slow
def test_a_signal_during_start_up_is_one_line(sig, tmp_path):
    """1 s after the start the child is importing the command line (held there), with entry's handler set."""
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text(SLOW_START)
    env = {"PYTHONPATH": os.pathsep.join([str(slow), str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = child("inspect", str(tmp_path / "t.safetensors"), env=env, signal_after=(1.0, sig))
    assert_clean(run, exit_of(sig), folder=tmp_path)
    assert run.stderr.strip() == f"error: interrupted by {sig.name} during start-up; nothing was written"


# A driver that runs the real console entry point with the first signal sent from inside `inspect`, a second one
# while the first one's error line is being written (the clean-up), and a third during the interpreter's shutdown.
TWO_SIGNALS = """
import atexit, os, signal, sys, time
from ticketcli.report import console
from ticketcli.runs import inspect as runs_inspect
from ticketcli.ticketfile import ticket as ticket_io
first, second = signal.Signals[sys.argv[1]], signal.Signals[sys.argv[2]]

def send(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.2)  # the handler runs at the next bytecode: within this sleep

def inspect_ticket(*args, **kwargs):
    send(first)
    raise AssertionError("the first signal did not stop the command")

real_error = console.error

def error(*args, **kwargs):
    send(second)
    real_error(*args, **kwargs)

runs_inspect.inspect_ticket = inspect_ticket
console.error = error
atexit.register(send, second)
sys.argv = ["ticket", "inspect", sys.argv[3]]
from ticketcli.cli.entry import main
main()
"""


@pytest.mark.parametrize(
    "first, second",
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=lambda s: s.name,
)
def test_a_second_signal_during_the_clean_up_keeps_the_first_ones_exit(first, second, ticket, tmp_path):
    """A second Ctrl-C while the first one's clean-up runs (and again while the interpreter shuts down) is
    ignored: exit 128 + the first signal, its one line, never death by the second signal or a second line."""
    driver = tmp_path / "driver.py"
    driver.write_text(TWO_SIGNALS)
    run = child(first.name, second.name, str(ticket), program=(str(driver),), timeout=90, warm=True)
    assert_clean(run, exit_of(first), contains=f"interrupted by {first.name}")


# The same for the long commands, run for real, with a terminal's Ctrl-C: the first signal goes to the whole process
# group (the driver's own, so sweep-k's workers get it too) when the first progress record arrives, the second at
# one of several moments of the shutdown: at once (both pending together), while the first one's line is written
# (the clean-up), among the exit handlers (after the outcome is final), or during the interpreter's teardown (a
# module's object finalised after the interpreter has reset its signal handlers).
TWO_SIGNALS_RUN = """
import atexit, os, signal, sys, time, types
from ticketcli.report import console
from ticketcli.runtime import interrupts


def run():
    first, second, when = signal.Signals[sys.argv[1]], signal.Signals[sys.argv[2]], sys.argv[3]
    os.setpgid(0, 0)

    def send(*sigs):
        for sig in sigs:
            os.killpg(0, sig)
        time.sleep(0.5)  # the handler runs at the next bytecode: within this sleep

    real_track = interrupts.Position.track

    def track(self, progress):
        record = real_track(self, progress)
        def first_record(stats):
            record(stats)
            if not getattr(interrupts, "sent", False):
                interrupts.sent = True
                send(first, *([second] if when == "at-once" else []))
        return first_record

    real_error = console.error

    def error(*args, **kwargs):
        if when == "clean-up":
            send(second)
        if when == "exit-handlers":
            atexit.register(send, second)  # registered after entry's own: runs before it
        real_error(*args, **kwargs)

    class Finalised:
        def __del__(self, kill=os.kill, pid=os.getpid(), sleep=time.sleep, sig=second):
            kill(pid, sig)
            sleep(0.5)

    if when == "teardown":
        sys.modules["finalised_in_teardown"] = probe = types.ModuleType("finalised_in_teardown")
        probe.obj = Finalised()
    interrupts.Position.track = track
    console.error = error
    sys.argv = ["ticket", *sys.argv[4:]]
    from ticketcli.cli.entry import main
    main()


if __name__ == "__main__":  # not in sweep-k's spawned workers, which import this file
    run()
"""
LONG = {
    "extract": [
        "extract",
        "--method",
        "edge-popup",
        "--epochs",
        "3",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-13-10",
        "--n-extract",
        "100",
        "--n-val",
        "50",
        "--device",
        "cpu",
        "--quiet",
        "--out",
        "{d}/t.safetensors",
    ],
    "drift": [
        "drift",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-16-10",
        "--steps",
        "5",
        "--quiet",
        "--plot",
        "{d}/d.png",
    ],
    "sweep-k": [*QUICK_SWEEP, "--seeds", "0,1", "--workers", "2", "--threads", "1", "--out-dir", "{d}/sweep"],
}


@pytest.mark.parametrize(
    "command, when, first, second",
    [
        ("extract", "clean-up", signal.SIGTERM, signal.SIGINT),
        ("extract", "teardown", signal.SIGINT, signal.SIGINT),
        ("drift", "at-once", signal.SIGINT, signal.SIGINT),
        ("drift", "exit-handlers", signal.SIGINT, signal.SIGTERM),
        ("drift", "teardown", signal.SIGINT, signal.SIGINT),
        ("sweep-k", "at-once", signal.SIGINT, signal.SIGINT),
        ("sweep-k", "clean-up", signal.SIGINT, signal.SIGINT),
    ],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else v,
)
@pytest.mark.slow
def test_two_signals_to_a_long_command_exit_by_the_first(command, when, first, second, tmp_path):
    """However soon the second signal comes: exit 128 + the first one (a SIGTERM after a Ctrl-C too), its one
    line, no traceback from the process or a worker, no temp file, and every file there is complete."""
    driver = tmp_path / "driver.py"
    driver.write_text(TWO_SIGNALS_RUN)
    args = [a.replace("{d}", str(tmp_path)) for a in LONG[command]]
    run = child(first.name, second.name, when, *args, program=(str(driver),), timeout=300, warm=True)
    assert_clean(run, exit_of(first), contains=f"interrupted by {first.name}")
    assert not [p.name for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    assert not (tmp_path / "t.safetensors").exists() and not (tmp_path / "d.png").exists()
    for kept in (tmp_path / "sweep").rglob("*.safetensors"):  # a configuration finished before the signal
        ticket_io.load(kept)
