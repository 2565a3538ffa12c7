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
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli import app
from ticketcli.report import console

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
EPOCH = re.compile(r"^augmented epoch (\d+)/3 loss \d+\.\d{4} acc \d\.\d{4} sparsity \d\.\d{3}$")
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


def test_piped_stderr_gets_one_plain_line_per_epoch(extracted):
    _, run = extracted
    err = run.stderr.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert [int(m[1]) for m in map(EPOCH.match, lines) if m] == [1, 2, 3], err
    assert len(lines) == 3, err  # nothing per batch, no final bar
    assert ESC not in err and "\r" not in err, repr(err)


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


def test_no_color_on_a_terminal(extracted):
    ticket, _ = extracted
    assert ESC in _on_a_terminal("inspect", str(ticket), TERM="xterm-256color")
    shown = _on_a_terminal("inspect", str(ticket), TERM="xterm-256color", NO_COLOR="1")
    assert "layers.0.weight" in shown and ESC not in shown


def test_train_weak_prints_a_line_per_epoch_of_each_run(extracted, tmp_path):
    ticket, _ = extracted
    args = ["train-weak", str(ticket), "--epochs", "2", "--dense-baseline", "--out", str(tmp_path / "w.json")]
    r = CliRunner().invoke(app, args)  # CliRunner's stderr is no terminal
    assert r.exit_code == 0, r.output
    runs = re.findall(r"^(masked|dense) epoch (\d)/2 loss \d+\.\d{4} val acc \d\.\d{4}$", r.stderr, re.M)
    assert runs == [("masked", "1"), ("masked", "2"), ("dense", "1"), ("dense", "2")], r.stderr


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
    lines = console.PlainLines(every=10.0, clock=clock)
    for i in range(1, 101):  # 100 items, one every 0.5 s: 50 s in all
        lines.emit(f"item {i}", throttled=True, last=i == 100)
        clock.now += 0.5
    shown = [int(s.split()[1]) for s in capsys.readouterr().err.splitlines()]
    assert shown == [1, 21, 41, 61, 81, 100]


def test_epochs_are_never_throttled_but_drift_steps_are(monkeypatch, capsys):
    monkeypatch.setattr(console, "plain_progress", lambda: True)
    monkeypatch.setattr(console, "PLAIN_EVERY_S", 1e9)  # no interval passes: only the first and the last
    stats = {"loss": 0.5, "accuracy": 0.25, "sparsity": 0.9}
    with console.epoch_progress(4, quiet=False, label="edge-popup") as progress:
        assert progress is not None
        for e in range(1, 5):
            progress({**stats, "epoch": e})
    with console.epoch_progress(400, quiet=False, label="drift") as progress:
        assert progress is not None
        for step in range(0, 401, 10):
            progress({**stats, "epoch": step, "unit": "step"})
    err = capsys.readouterr().err.splitlines()
    assert err[:4] == [f"edge-popup epoch {e}/4 loss 0.5000 acc 0.2500 sparsity 0.900" for e in range(1, 5)]
    assert err[4:] == [
        "drift step 0/400 loss 0.5000 acc 0.2500 sparsity 0.900",
        "drift step 400/400 loss 0.5000 acc 0.2500 sparsity 0.900",
    ]


def test_sweep_lines_count_configurations_and_show_ids_literally(monkeypatch, capsys):
    monkeypatch.setattr(console, "plain_progress", lambda: True)
    with console.sweep_progress(2, quiet=False) as progress:
        assert progress is not None
        progress({"id": "k=0.3\x1b[31m", "test_accuracy": 0.5}, False)
        progress({"id": "k=0.5", "test_accuracy": 0.5}, True)
    assert capsys.readouterr().err.splitlines() == [
        "sweep-k 1/2 last k=0.3\\x1b[31m (50.00% test)",
        "sweep-k 2/2 last k=0.5 (resumed)",
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
    assert console.plain_progress() is plain
