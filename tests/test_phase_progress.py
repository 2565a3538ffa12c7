"""Progress over chunks (BatchNorm recalibration, evaluation): the callback counts every chunk of each phase, from 0
to the number of chunks the loop really runs, and changes no result; export and evaluate show the phases as plain
lines with elapsed time and ETA (first and last chunk, at most one line every PLAIN_EVERY_S between, timed here by
a fake clock), an extraction's final measurements only through the heartbeat; on a terminal, one bar row."""

from __future__ import annotations

import io
import json
import math
import re
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from helpers import make_net
from rich.console import Console
from rich.progress import Progress
from safetensors import safe_open
from typer.testing import CliRunner

from ticketcli import train
from ticketcli.cli.app import app
from ticketcli.export.run import export_ticket
from ticketcli.models import batchnorm
from ticketcli.models.registry import parse_model
from ticketcli.report import plain as report_plain
from ticketcli.report import progress as report_progress
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ReaderSpec, RunSpec

BN = "mlp:64-16-10+norm=batch"
N_EXTRACT = 1200  # 3 recalibration chunks of batchnorm.CALIBRATION_BATCH = 500
DURATION = r"(\d+s|\d+m\d\ds|\d+h\d\dm)"


class Recorder:
    """A ChunkProgress that keeps what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []

    def __call__(self, phase: str, done: int, total: int) -> None:
        self.events.append((phase, done, total))


def counted(phase: str, total: int) -> list[tuple[str, int, int]]:
    """What a phase of `total` chunks reports: its start, then each chunk in order."""
    return [(phase, i, total) for i in range(total + 1)]


@pytest.mark.parametrize(("n", "batch"), [(1200, 500), (1000, 500), (10, 500), (7, 2), (2, 2)])
def test_recalibration_reports_every_chunk_and_the_same_statistics(n, batch):
    x = torch.randn(n, 64, generator=torch.Generator().manual_seed(n))
    told, silent = make_net(BN), make_net(BN)
    chunks = Recorder()
    batchnorm.recalibrate(told.batchnorms, told.module, x, batch, chunks)
    batchnorm.recalibrate(silent.batchnorms, silent.module, x, batch)
    # the oracle: as many chunks as examples allow, never fewer than 2 examples each
    assert chunks.events == counted("recalibration", min(math.ceil(n / batch), n // 2))
    a, b = told.module.state_dict(), silent.module.state_dict()
    assert [k for k in a if "running" in k] and all(torch.equal(a[k], b[k]) for k in a)


def _masks(net) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {n: torch.rand(net.weights[n].shape, generator=g) < 0.3 for n in net.names}


@pytest.mark.parametrize("eval_chunk", [100, 397, 2048])
def test_evaluation_reports_the_recalibration_then_each_batch(monkeypatch, eval_chunk):
    monkeypatch.setattr(train, "EVAL_CHUNK", eval_chunk)
    g = torch.Generator().manual_seed(0)
    calibration, x, y = (
        torch.randn(N_EXTRACT, 64, generator=g),
        torch.randn(397, 64, generator=g),
        torch.arange(397) % 10,
    )
    told, silent = make_net(BN), make_net(BN)
    told.calibration = silent.calibration = calibration
    chunks = Recorder()
    with_progress = train.evaluate(told, _masks(told), x, y, chunks=chunks, phase="test")
    assert with_progress == train.evaluate(silent, _masks(silent), x, y)
    assert chunks.events == counted("recalibration", 3) + counted("test", math.ceil(397 / eval_chunk))
    masks = _masks(told)
    told.calibrate(masks)  # statistics already recomputed for these masks: no recalibration phase below
    chunks.events.clear()
    train.evaluate(told, masks, x, y, chunks=chunks, phase="validation")
    assert chunks.events == counted("validation", math.ceil(397 / eval_chunk))


@pytest.fixture(scope="module")
def bn_ticket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ticket of a BatchNorm MLP on digits, its extraction split 3 recalibration chunks long."""
    spec = RunSpec(
        model=parse_model(BN),
        init=InitSpec(seed=3),
        data=DataSpec(name="digits", n_extract=N_EXTRACT, n_val=100, split_seed=3),
        method=MethodSpec(name="augmented", sparsity=0.7, epochs=1, batch_size=400),
        device="cpu",
    )
    out = tmp_path_factory.mktemp("bn") / "ticket.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


@pytest.mark.slow
def test_evaluate_ticket_counts_each_phase_and_measures_the_same(bn_ticket):
    chunks = Recorder()
    told = runs_evaluate.evaluate_ticket(bn_ticket, ReaderSpec(data=DataSpec(), device="cpu"), chunks=chunks)
    assert told == runs_evaluate.evaluate_ticket(bn_ticket, ReaderSpec(data=DataSpec(), device="cpu"))
    n_test, n_val = told.test.n, told.val.n
    expected = counted("recalibration", 3) + counted("test", math.ceil(n_test / train.EVAL_CHUNK))
    assert chunks.events == expected + counted("validation", math.ceil(n_val / train.EVAL_CHUNK))


@pytest.mark.parametrize("fmt", ["masked", "prune"])
@pytest.mark.slow
def test_export_counts_the_recalibration_and_writes_the_same_file(bn_ticket, tmp_path, fmt):
    chunks = Recorder()
    told = export_ticket(bn_ticket, fmt=fmt, out=tmp_path / "told.safetensors", chunks=chunks)
    silent = export_ticket(bn_ticket, fmt=fmt, out=tmp_path / "silent.safetensors")
    assert chunks.events == counted("recalibration", 3)
    # the same tensors, bit for bit, and metadata (a safetensors header orders its metadata keys at random)
    a, b = (safe_open(str(tmp_path / f"{name}.safetensors"), "pt") for name in ("told", "silent"))
    assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
    assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())
    assert {k: v for k, v in told.items() if k != "out"} == {k: v for k, v in silent.items() if k != "out"}


# ---- what people see ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch) -> FakeClock:
    """Plain progress on, timed by a fake clock, with no heartbeat thread: each test calls heartbeat() itself."""
    fake = FakeClock()
    monkeypatch.setattr(report_progress, "plain_progress", lambda: True)
    monkeypatch.setattr(report_plain, "CLOCK", fake)
    monkeypatch.setattr(report_plain.PlainProgress, "beating", lambda self: nullcontext(self))
    return fake


def test_export_lines_come_every_interval_with_an_eta_and_a_quick_phase_prints_none(clock, capsys):
    with report_progress.display(None, quiet=False, label="export", lines=True) as shown:
        chunks = report_progress.phases_of(shown)
        assert chunks is not None
        clock.now += 4  # rebuilding the network, loading the data
        for phase, total, seconds in [("recalibration", 10, 3), ("test", 5, 4), ("validation", 1, 1)]:
            chunks(phase, 0, total)
            for i in range(1, total + 1):  # each phase its own rate, so its own ETA
                clock.now += seconds
                chunks(phase, i, total)
    assert capsys.readouterr().err.splitlines() == [
        "export recalibration chunk 2/10, elapsed 10s, ETA 24s",  # 10 s after the start
        "export recalibration chunk 6/10, elapsed 22s, ETA 12s",  # chunk 5 came 9 s after the line before
        "export recalibration chunk 10/10, elapsed 34s",  # the last chunk of a phase that showed a line
        "export test chunk 3/5, elapsed 46s, ETA 8s",
        "export test chunk 5/5, elapsed 54s",
    ]  # the validation took 1 s: no line


def test_a_slow_phase_gets_a_heartbeat_with_its_eta(clock, capsys):
    plain = report_plain.PlainProgress("evaluate", None, unit="chunk")
    for t in range(5, 90, 5):  # the heartbeat thread's check every 5 s; chunks of 25 s from t = 12
        clock.now = t
        if t == 15:
            plain.chunk("recalibration", 0, 3)
        if t in (40, 65):
            plain.chunk("recalibration", (t - 15) // 25, 3)
        if t == 85:
            plain.chunk("recalibration", 3, 3)
        plain.heartbeat()
    assert capsys.readouterr().err.splitlines() == [
        "evaluate working, elapsed 10s",
        "evaluate recalibration chunk 1/3 running, elapsed 20s, ETA after the first chunk",
        "evaluate recalibration chunk 1/3 running, elapsed 30s, ETA after the first chunk",
        "evaluate recalibration chunk 1/3, elapsed 40s, ETA 50s",
        "evaluate recalibration chunk 2/3 running, elapsed 50s, ETA 40s",
        "evaluate recalibration chunk 2/3 running, elapsed 1m00s, ETA 30s",
        "evaluate recalibration chunk 3/3 running, elapsed 1m10s, ETA 20s",  # chunk 2 (at 65 s) throttled
        "evaluate recalibration chunk 3/3 running, elapsed 1m20s, ETA 10s",
        "evaluate recalibration chunk 3/3, elapsed 1m25s",
    ]


def test_the_evaluation_after_the_epochs_shows_only_in_the_heartbeat(clock, capsys):
    """An extraction's log gets no line per phase (a fast evaluation adds nothing); a slow one gets the heartbeat,
    with the phase and its ETA instead of "finishing"."""
    stats = {"loss": 0.5, "accuracy": 0.25, "sparsity": 0.9}
    with report_progress.display(2, quiet=False, label="augmented") as progress:
        assert progress is not None
        chunks = report_progress.phases_of(progress)
        assert chunks is not None
        for e in (1, 2):
            clock.now += 3
            progress({**stats, "epoch": e})
        chunks("recalibration", 0, 4)
        for i in range(1, 5):
            clock.now += 4
            chunks("recalibration", i, 4)
        chunks("test", 0, 1)
        clock.now += 1
        chunks("test", 1, 1)
    assert capsys.readouterr().err.splitlines() == [
        "augmented epoch 1/2 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 3s, ETA 3s",
        "augmented epoch 2/2 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 6s",
    ]


def test_heartbeat_after_the_epochs_names_the_phase_and_its_eta(clock, capsys):
    plain = report_plain.PlainProgress("augmented", 2)
    for e in (1, 2):
        clock.now += 3
        plain.update(f"augmented epoch {e}/2", e, first=e == 1)
    plain.chunk("recalibration", 0, 4, lines=False)
    for i in (1, 2):
        clock.now += 4
        plain.chunk("recalibration", i, 4, lines=False)  # no line
    clock.now += 3
    plain.heartbeat()  # 11 s after the last line
    plain.chunk("recalibration", 4, 4, lines=False)  # done: the heartbeat is the loop's again
    clock.now += 10
    plain.heartbeat()
    assert capsys.readouterr().err.splitlines() == [
        "augmented epoch 1/2, elapsed 3s, ETA 3s",
        "augmented epoch 2/2, elapsed 6s",
        "augmented recalibration chunk 3/4 running, elapsed 17s, ETA 5s",
        "augmented 2/2 epochs done, finishing, elapsed 27s",
    ]


def test_quiet_and_other_ranks_get_no_callback(monkeypatch):
    with report_progress.display(None, quiet=True, label="evaluate", lines=True) as chunks:
        assert chunks is None
    monkeypatch.setattr("ticketcli.runtime.world.quiet_rank", lambda: True)
    with report_progress.display(None, quiet=False, label="evaluate", lines=True) as chunks:
        assert chunks is None


def test_on_a_terminal_the_phases_share_one_bar_row_each_with_its_own_total():
    bar = Progress(console=Console(file=io.StringIO(), force_terminal=True), auto_refresh=False)
    update = report_progress._phase_tasks(bar, "evaluate")
    try:
        update("recalibration", 0, 3)
        update("recalibration", 3, 3)
        update("test", 0, 5)
        update("test", 2, 5)
        assert bar.live.is_started
        (task,) = bar.tasks
        assert (task.description, task.total, task.completed) == ("evaluate test", 5, 2)
    finally:
        bar.stop()


PHASE_LINE = re.compile(rf"^(evaluate|export) (recalibration|test|validation) chunk (\d+)/(\d+), elapsed {DURATION}")


class Ticking:
    """A clock that moves 3 s at every reading: every command's work looks slow enough for its phase lines."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 3
        return self.now


@pytest.mark.parametrize("command", ["evaluate", "export"])
@pytest.mark.slow
def test_commands_print_phase_lines_on_stderr_and_pure_json_on_stdout(bn_ticket, tmp_path, command, monkeypatch):
    monkeypatch.setattr(report_plain, "CLOCK", Ticking())
    monkeypatch.setattr(report_plain.PlainProgress, "beating", lambda self: nullcontext(self))  # no heartbeat thread

    def args(out: str) -> list[str]:
        where = ["--format", "masked", "--out", str(tmp_path / out)] if command == "export" else []
        return [command, str(bn_ticket), "--json", *where]

    r = CliRunner().invoke(app, args("m.safetensors"))  # CliRunner's stderr is no terminal: plain lines
    assert r.exit_code == 0, r.stderr
    json.loads(r.stdout)  # stdout holds the one document, nothing else
    lines = r.stderr.splitlines()
    matched = [PHASE_LINE.match(x) for x in lines]
    assert lines and all(matched), r.stderr
    shown = [(m[2], int(m[3]), int(m[4])) for m in matched if m]
    for x, (phase, done, total) in zip(lines, shown):
        assert (phase, total, total) in shown, r.stderr  # a phase that showed a line shows its end
        assert (", ETA " in x) == (done < total), x  # an ETA on every line but a phase's last
    assert ("recalibration", 3, 3) in shown  # the ticket's 3 recalibration chunks
    if command == "export":
        assert {phase for phase, _, _ in shown} == {"recalibration"}  # export evaluates nothing
    quiet = CliRunner().invoke(app, [*args("q.safetensors"), "--quiet"])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
    json.loads(quiet.stdout)
