"""Progress for logs and colour for people: without a terminal (CI), progress is plain lines (one per epoch, or for
long loops the first, the last and at most one every PLAIN_EVERY_S), never Rich bar frames; NO_COLOR (any non-empty
value) removes every ANSI escape from what the tool writes, even where colour is forced."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
import threading
from contextlib import nullcontext
from pathlib import Path

import pytest
from helpers import full_record
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.report import plain as report_plain
from ticketcli.report import progress as report_progress
from ticketcli.sweep.result import SweepRecord

REPO = Path(__file__).resolve().parents[1]
QUICK = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-16-10",
    "--n-extract",
    "300",
    "--n-val",
    "100",
    "--batch-size",
    "100",
]
DURATION = r"(\d+s|\d+m\d\ds|\d+h\d\dm)"  # 7s, 3m05s, 2h04m
# every plain line ends in the time so far and, but for the last, an ETA
WHEN = rf", elapsed {DURATION}(, ETA {DURATION})?$"
EPOCH = re.compile(r"^augmented epoch (\d+)/3 loss \d+\.\d{4} acc \d+\.\d{2}% sparsity \d+\.\d{2}%" + WHEN)
HEARTBEAT = re.compile(
    rf"^augmented (epoch \d/3 running|3/3 epochs done, finishing|[a-z ]+ chunk \d+/\d+ running), elapsed {DURATION}"
)  # the last: the final recalibration or evaluation
ESC = "\x1b"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM", "TICKET_DEBUG")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return {**env, **extra}


def _ticket(*args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    cmd = [sys.executable, "-m", "ticketcli", *args]
    return subprocess.run(cmd, capture_output=True, env=_env(**env), timeout=300, check=False)


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[bytes]]:
    """One extraction as a child process, stdout and stderr pipes as in a CI log, colour forced."""
    out = tmp_path_factory.mktemp("progress") / "t.safetensors"
    run = _ticket("extract", *QUICK, "--epochs", "3", "--out", str(out), FORCE_COLOR="1")
    assert run.returncode == 0, run.stderr.decode()
    return out, run


@pytest.mark.slow
def test_piped_stderr_gets_plain_lines_for_the_first_and_last_epoch(extracted):
    _, run = extracted
    err = run.stderr.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    epochs = [int(m[1]) for m in map(EPOCH.match, lines) if m]
    assert epochs[0] == 1 and epochs[-1] == 3 and epochs == sorted(set(epochs)), err  # the rest throttled
    assert all(EPOCH.match(x) or HEARTBEAT.match(x) for x in lines), err  # nothing per batch, no final bar
    assert ESC not in err and "\r" not in err, repr(err)


@pytest.mark.slow
def test_no_color_removes_every_escape_even_when_forced(extracted):
    ticket, _ = extracted
    forced = _ticket("inspect", str(ticket), FORCE_COLOR="1")
    assert forced.returncode == 0 and ESC in forced.stdout.decode()  # the control: colour is really forced
    empty = _ticket("inspect", str(ticket), FORCE_COLOR="1", NO_COLOR="")
    assert ESC in empty.stdout.decode()  # no-color.org: an empty NO_COLOR does not count
    plain = _ticket("inspect", str(ticket), FORCE_COLOR="1", NO_COLOR="1")
    assert plain.returncode == 0 and "layers.0.weight" in plain.stdout.decode()
    assert ESC not in plain.stdout.decode() + plain.stderr.decode()


def _on_a_terminal(*args: str, **env: str) -> str:
    """Run ticket with stdout on a pseudo-terminal (where Rich colours by itself); what the terminal showed."""
    leader, follower = pty.openpty()
    try:
        cmd = [sys.executable, "-m", "ticketcli", *args]
        p = subprocess.Popen(cmd, stdout=follower, stderr=subprocess.PIPE, env=_env(**env))
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    finally:
        os.close(leader)
    return b"".join(chunks).decode()


@pytest.mark.slow
def test_no_color_on_a_terminal(extracted):
    ticket, _ = extracted
    assert ESC in _on_a_terminal("inspect", str(ticket), TERM="xterm-256color")
    shown = _on_a_terminal("inspect", str(ticket), TERM="xterm-256color", NO_COLOR="1")
    assert "layers.0.weight" in shown and ESC not in shown


@pytest.mark.slow
def test_train_weak_prints_a_line_per_epoch_of_each_run(extracted, tmp_path):
    ticket, _ = extracted
    args = ["train-weak", str(ticket), "--epochs", "2", "--dense-baseline", "--out", str(tmp_path / "w.safetensors")]
    r = CliRunner().invoke(app, args)  # CliRunner's stderr is no terminal
    assert r.exit_code == 0, r.output
    runs = re.findall(r"^(masked|dense) epoch (\d)/2 loss \d+\.\d{4} val acc \d+\.\d{2}%" + WHEN, r.stderr, re.M)
    runs = [r[:2] for r in runs]
    assert runs == [("masked", "1"), ("masked", "2"), ("dense", "1"), ("dense", "2")], r.stderr


@pytest.mark.slow
def test_quiet_silences_plain_progress(extracted, tmp_path):
    ticket, _ = extracted
    r = CliRunner().invoke(app, ["train-weak", str(ticket), "--epochs", "2", "--quiet"])
    assert r.exit_code == 0 and r.stderr == "", r.stderr


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_throttled_lines_first_last_and_one_per_interval(capsys):
    clock = FakeClock()
    lines = report_plain.PlainLines(every=10.0, clock=clock)
    for i in range(1, 101):  # 100 items, one every 0.5 s: 50 s in all
        lines.emit(f"item {i}", throttled=True, last=i == 100)
        clock.now += 0.5
    shown = [int(s.split()[1]) for s in capsys.readouterr().err.splitlines()]
    assert shown == [1, 21, 41, 61, 81, 100]


@pytest.fixture()
def clock(monkeypatch) -> FakeClock:
    """Plain progress on, timed by a fake clock, with no heartbeat thread: each test calls heartbeat() itself."""
    fake = FakeClock()
    monkeypatch.setattr(report_progress, "plain_progress", lambda: True)
    monkeypatch.setattr(report_plain, "CLOCK", fake)
    monkeypatch.setattr(report_plain.PlainProgress, "beating", lambda self: nullcontext(self))
    return fake


STATS = {"loss": 0.5, "accuracy": 0.25, "sparsity": 0.9}


def test_fast_epochs_get_the_first_last_and_one_line_per_interval(clock, capsys):
    with report_progress.display(100, quiet=False, label="edge-popup") as progress:
        assert progress is not None
        for e in range(1, 101):  # 100 epochs of 0.5 s: 50 s in all
            clock.now += 0.5
            progress({**STATS, "epoch": e})
    err = capsys.readouterr().err.splitlines()
    assert [int(x.split()[2].split("/")[0]) for x in err] == [1, 21, 41, 61, 81, 100]
    assert err[0] == "edge-popup epoch 1/100 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 0s, ETA 50s"
    assert err[2] == "edge-popup epoch 41/100 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 20s, ETA 30s"
    assert err[-1] == "edge-popup epoch 100/100 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 50s"


def test_drift_steps_are_throttled_like_epochs(clock, capsys):
    with report_progress.display(400, quiet=False, label="drift") as progress:
        assert progress is not None
        for step in range(0, 401, 10):
            progress({**STATS, "epoch": step, "unit": "step"})
    assert capsys.readouterr().err.splitlines() == [
        "drift step 0/400 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 0s",  # no ETA before a timed step
        "drift step 400/400 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 0s",
    ]


def test_a_slow_epoch_gets_a_heartbeat_every_interval_with_its_eta(clock, capsys):
    """Epochs of 25 s: while one runs, a heartbeat after every 10 s of silence says which epoch runs and when the
    loop should end (the running epoch counts as at most finished); the epoch lines stay throttled."""
    plain = report_plain.PlainProgress("augmented", 3)
    for e in range(1, 4):
        for _ in range(5):  # 25 s in steps of 5 s, the heartbeat thread's check at each
            clock.now += 5
            plain.heartbeat()
        plain.update(report_progress.progress_line("augmented", 3, {**STATS, "epoch": e}), e, first=e == 1)
    running = "augmented epoch {}/3 running, elapsed {}, ETA {}"
    assert capsys.readouterr().err.splitlines() == [
        running.format(1, "10s", "after the first epoch"),
        running.format(1, "20s", "after the first epoch"),
        "augmented epoch 1/3 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 25s, ETA 50s",
        running.format(2, "35s", "40s"),
        running.format(2, "45s", "30s"),  # epoch 2's own line (at 50 s) is throttled: 5 s after this one
        running.format(3, "55s", "20s"),
        running.format(3, "1m05s", "10s"),
        running.format(3, "1m15s", "0s"),
        "augmented epoch 3/3 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 1m15s",
    ]


def test_after_the_last_epoch_the_heartbeat_says_finishing(clock, capsys):
    plain = report_plain.PlainProgress("augmented", 2)
    for e in (1, 2):
        clock.now += 3
        plain.update(f"augmented epoch {e}/2", e, first=e == 1)
    clock.now += 12
    plain.heartbeat()
    clock.now += 5
    plain.heartbeat()  # only 5 s since the last line: nothing
    assert capsys.readouterr().err.splitlines() == [
        "augmented epoch 1/2, elapsed 3s, ETA 3s",
        "augmented epoch 2/2, elapsed 6s",
        "augmented 2/2 epochs done, finishing, elapsed 18s",
    ]


def test_working_lines_for_a_step_without_a_loop(clock, capsys):
    plain = report_plain.PlainProgress("export", None)
    for _ in range(25):
        clock.now += 1
        plain.heartbeat()
    assert capsys.readouterr().err.splitlines() == [
        "export working, elapsed 10s",
        "export working, elapsed 20s",
    ]


def test_the_heartbeat_thread_calls_heartbeat_while_the_body_runs(monkeypatch, capsys):
    called = threading.Event()
    plain = report_plain.PlainProgress("export", None, every=0.01)
    original = plain.heartbeat

    def heartbeat() -> None:
        original()
        called.set()

    monkeypatch.setattr(plain, "heartbeat", heartbeat)
    with plain.beating():
        assert called.wait(30)  # the thread wakes by itself; no interval is asserted
    assert not any(t.name == "ticket-progress" and t.is_alive() for t in threading.enumerate())
    assert capsys.readouterr().err.startswith("export working, elapsed ")


def _record(run_id: str) -> SweepRecord:
    """A finished sweep run named `run_id`, at 50% test accuracy."""
    fields = {"id": run_id, "seed": 0, "group": "edge-popup", "config": "k", "fixed": False, "val_accuracy": 0.5}
    return full_record({**fields, "test_accuracy": 0.5, "achieved_sparsity": 0.9})


def test_sweep_lines_count_configurations_and_show_ids_literally(clock, capsys):
    with report_progress.display(3, quiet=False, label="sweep-k", unit="configuration", items=True) as progress:
        assert progress is not None
        clock.now += 30
        progress(report_progress.sweep_done(1, 3, _record("k=0.3\x1b[31m"), False))
        progress(report_progress.sweep_done(2, 3, _record("k=0.5"), True))  # resumed: done, but not in the rate
        clock.now += 30
        progress(report_progress.sweep_done(3, 3, _record("k=0.7"), False))
    assert capsys.readouterr().err.splitlines() == [
        "sweep-k 1/3 last k=0.3\\x1b[31m (50.00% test), elapsed 30s, ETA 1m00s",
        "sweep-k 3/3 last k=0.7 (50.00% test), elapsed 1m00s",
    ]


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("tty", "term", "plain"),
    [(False, "xterm", True), (True, "xterm", False), (True, "dumb", True), (True, "", False), (False, "dumb", True)],
)
def test_plain_when_stderr_is_no_terminal_or_a_dumb_one(monkeypatch, tty, term, plain):
    monkeypatch.setattr(sys, "stderr", _Stream(tty))
    monkeypatch.setenv("TERM", term)
    assert report_plain.plain_progress() is plain
