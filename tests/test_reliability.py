"""Reliability through the real command line: bad values are one-line exit-2 errors that leave nothing behind,
SIGINT/SIGTERM stop `extract` cleanly (exit 130/143, where it stopped, no output), and every registered method
is deterministic: same command, same bits; evaluate reproduces the stored accuracy exactly, also in a fresh
process with another working directory and environment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm
from helpers import flags_for, one_line_error
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.methods import METHODS
from ticketcli.models.registry import MODELS

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
QUICK = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-32-32-10",
    "--epochs",
    "2",
    "--batch-size",
    "128",
    "--n-extract",
    "300",
    "--n-val",
    "100",
    "--device",
    "cpu",
    "--quiet",
]
METHOD_FLAGS = {
    "iterated": ["--max-rounds", "2"],
    "imp": ["--imp-rounds", "2"],
    "synflow": ["--synflow-rounds", "10"],
    "set": ["--regrow-every", "2"],
    "rigl": ["--regrow-every", "2"],
}  # keep the quick runs quick


def invoke(*args: str):
    return runner.invoke(app, list(args))


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


# ---- bad command-line values ----------------------------------------------------------------------------------

BAD_EXTRACT = {
    "sparsity-negative": (["--sparsity", "-0.1"], "--sparsity must lie in (0, 1)"),
    "sparsity-one": (["--sparsity", "1"], "--sparsity must lie in (0, 1)"),
    "sparsity-above": (["--sparsity", "1.5"], "--sparsity must lie in (0, 1)"),
    "sparsity-nan": (["--sparsity", "nan"], "--sparsity must lie in (0, 1)"),
    "sparsity-not-a-number": (["--sparsity", "ninety"], "'--sparsity'"),
    "densities-do-not-parse": (["--method", "edge-popup", "--layer-densities", "0.1,x,0.2"], "--layer-densities"),
    "densities-out-of-range": (["--method", "edge-popup", "--layer-densities", "0.1,1.5,0.2"], "(0, 1]"),
    "aug-density-not-a-number": (["--aug-density", "half"], "'--aug-density'"),
    "epochs-negative": (["--epochs", "-3"], "--epochs must be >= 1"),
    "epochs-zero": (["--epochs", "0"], "--epochs must be >= 1"),
    "epochs-not-an-int": (["--epochs", "2.5"], "'--epochs'"),
    "checkpoint-every-zero": (["--checkpoint-every", "0"], "--checkpoint-every must be >= 1"),
    "unknown-method": (["--method", "magic"], "'augmented', 'edge-popup'"),
    "unknown-dataset": (["--dataset", "imagenet"], "'digits', 'fashion-mnist'"),
    "unknown-model": (
        ["--model", "resnet:64-10"],
        f"unknown model 'resnet'; choose one of: {', '.join(MODELS.names())}",
    ),
    "unknown-init": (["--init", "zeros"], "is not one of"),
    "unknown-option": (["--sparsty", "0.5"], "No such option: --sparsty"),
}


@pytest.mark.parametrize("case", list(BAD_EXTRACT))
def test_bad_extract_values(tmp_path, case):
    args, needle = BAD_EXTRACT[case]
    out = tmp_path / "t.safetensors"
    err = one_line_error(invoke("extract", *QUICK, "--out", str(out), *args))
    assert needle in err
    assert listing(tmp_path) == []  # no output, no temp file, no checkpoint


def test_output_in_missing_directory_creates_it(tmp_path):
    """--out makes the folders it names, as --out-dir does."""
    out = tmp_path / "no" / "such" / "t.safetensors"
    r = invoke("extract", *QUICK, "--out", str(out))
    assert r.exit_code == 0, r.output
    assert listing(out.parent) == ["t.safetensors"]


def test_output_under_a_file_in_a_missing_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    err = one_line_error(invoke("extract", *QUICK, "--out", str(tmp_path / "file" / "sub" / "t.safetensors")))
    assert "does not exist" in err and listing(tmp_path) == ["file"]


def test_output_under_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x")
    err = one_line_error(invoke("extract", *QUICK, "--out", str(tmp_path / "file" / "t.safetensors")))
    assert "does not exist" in err and listing(tmp_path) == ["file"]


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root writes into read-only directories; test_output_under_a_regular_file covers an unwritable parent",
)
def test_output_in_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        err = one_line_error(
            invoke("extract", *flags_for("random", QUICK), "--method", "random", "--out", str(ro / "t.safetensors"))
        )
        assert "cannot write" in err and listing(ro) == []
    finally:
        ro.chmod(0o755)


def test_existing_output_without_force_is_untouched(tmp_path):
    out = tmp_path / "t.safetensors"
    out.write_bytes(b"precious")
    err = one_line_error(invoke("extract", *QUICK, "--out", str(out)))
    assert "already exists" in err and "--force" in err
    assert out.read_bytes() == b"precious" and listing(tmp_path) == ["t.safetensors"]


BAD_READ = {
    "missing-ticket": (["evaluate", "{dir}/none.safetensors"], "no such file"),
    "directory-without-tickets": (["inspect", "{dir}"], "no ticket files"),  # a folder is read as tickets
    "min-accuracy-above-one": (["evaluate", "{ticket}", "--min-accuracy", "80"], "--min-accuracy must lie in [0, 1]"),
    "min-accuracy-not-a-number": (["evaluate", "{ticket}", "--min-accuracy", "high"], "'--min-accuracy'"),
    "unknown-device": (["evaluate", "{ticket}", "--device", "tpu"], "device"),
    "no-ticket-argument": (["inspect"], "Missing argument"),
}


@pytest.fixture(scope="module")
def a_ticket(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ticket") / "t.safetensors"
    assert invoke("extract", *flags_for("random", QUICK), "--method", "random", "--out", str(out)).exit_code == 0
    return out


@pytest.mark.parametrize("case", list(BAD_READ))
def test_bad_evaluate_and_inspect_values(tmp_path, a_ticket, case):
    args, needle = BAD_READ[case]
    args = [a.format(dir=tmp_path, ticket=a_ticket) for a in args]
    before = listing(a_ticket.parent)
    assert needle in one_line_error(invoke(*args))
    assert listing(a_ticket.parent) == before


# ---- interrupts -----------------------------------------------------------------------------------------------


def child_env(home: Path, **extra: str) -> dict[str, str]:
    """This checkout's ticketcli (not an installed one), a private HOME and cache, no $TICKET_DATA."""
    env = {k: v for k, v in os.environ.items() if k not in ("TICKET_DATA", "PYTHONPATH")}
    return {**env, "PYTHONPATH": str(ROOT), "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"), **extra}


def interrupt_when_training(cmd: list[str], cwd: Path, sig: signal.Signals, ready: str = r"loss \d") -> tuple[int, str]:
    """Run `python -m ticketcli *cmd`, send `sig` once stderr matches `ready` (by default: the progress bar shows a
    loss); returns (exit code, last stderr line)."""
    err = cwd / "stderr.txt"
    # TTY_COMPATIBLE: rich draws the progress bar into the pipe, so we can see that training has started
    with err.open("w") as stderr:
        env = child_env(cwd / "home", TTY_COMPATIBLE="1", COLUMNS="160")
        proc = subprocess.Popen(  # a fork server's child: no seconds of imports before training starts
            [*warm.client(env), "-m", "ticketcli", *cmd], stdout=subprocess.DEVNULL, stderr=stderr, cwd=cwd, env=env
        )
        try:
            deadline = time.monotonic() + 300
            while not re.search(ready, err.read_text()) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert proc.poll() is None, err.read_text()[-2000:]
            proc.send_signal(sig)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    return rc, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", err.read_text()).strip().splitlines()[-1]  # minus terminal codes


@pytest.mark.parametrize(
    "sig,code,checkpoint",
    [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)],
    ids=["SIGINT", "SIGTERM-with-checkpoints"],
)
@pytest.mark.slow
def test_signal_during_extract(tmp_path, sig, code, checkpoint):
    out = tmp_path / "t.safetensors"
    cmd = [
        "extract",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-32-32-10",
        "--epochs",
        "100000",  # far more than the test waits for: under load 1000 epochs could end before the signal lands
        "--n-extract",
        "300",
        "--n-val",
        "100",
        "--batch-size",
        "64",
        "--device",
        "cpu",
        "--out",
        str(out),
        *(["--checkpoint-every", "1"] if checkpoint else []),
    ]
    rc, last = interrupt_when_training(cmd, tmp_path, sig)
    assert rc == code, last
    assert re.fullmatch(rf"error: interrupted by {sig.name} after epoch \d+ of 100000; no output was written.*", last)
    assert not out.exists()
    ckpt = tmp_path / "t.safetensors.ckpt"
    assert ckpt.exists() == checkpoint
    if checkpoint:
        assert f"checkpoint {ckpt} holds epoch" in last and "--resume" in last
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(
        ["stderr.txt", *(["t.safetensors.ckpt"] if checkpoint else [])]
    )  # no stray temp files


@pytest.mark.slow
def test_signal_during_train_weak(tmp_path, a_ticket):
    out, plot = tmp_path / "w.safetensors", tmp_path / "w.png"
    cmd = [
        "train-weak",
        str(a_ticket),
        "--epochs",
        "100000",
        "--batch-size",
        "16",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--plot",
        str(plot),
    ]
    rc, last = interrupt_when_training(cmd, tmp_path, signal.SIGTERM)
    assert rc == 143, last
    assert re.fullmatch(r"error: interrupted by SIGTERM after epoch \d+ of the masked run; no output was written", last)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["stderr.txt"]


@pytest.mark.slow
def test_keyboard_interrupt_in_process_names_the_epoch(tmp_path, monkeypatch):
    """The same path without a subprocess: the progress callback raises KeyboardInterrupt after epoch 1."""
    from ticketcli.report import progress as report_progress

    real = report_progress.display

    def stopping(total, **kw):
        def stop(stats):
            raise KeyboardInterrupt

        class Ctx:
            def __enter__(self):
                return stop

            def __exit__(self, *exc):
                return False

        return Ctx()

    monkeypatch.setattr(report_progress, "display", stopping)
    out = tmp_path / "t.safetensors"
    err = one_line_error(invoke("extract", *QUICK, "--method", "edge-popup", "--out", str(out)), code=130)
    assert err == "error: interrupted by SIGINT after epoch 1 of 2; no output was written"
    assert listing(tmp_path) == []
    assert real is not stopping


# ---- determinism, for every registered method -----------------------------------------------------------------


@pytest.fixture(scope="module")
def twice(tmp_path_factory) -> dict[str, tuple[Path, Path, dict]]:
    """Each method's ticket extracted twice by the same command, with the first run's JSON summary."""
    d = tmp_path_factory.mktemp("determinism")
    out = {}
    for method in METHODS.names():
        paths = (d / f"{method}-a.safetensors", d / f"{method}-b.safetensors")
        runs = [
            invoke(
                "extract",
                *flags_for(method, QUICK),
                *["--method", method, *METHOD_FLAGS.get(method, []), "--out", str(p), "--json"],
            )
            for p in paths
        ]
        assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
        out[method] = (*paths, json.loads(runs[0].stdout))
    return out


@pytest.fixture(scope="module")
def fresh_process(twice, tmp_path_factory) -> dict[str, dict]:
    """`ticket evaluate --json` of every first ticket in one new process: another cwd, HOME and cache, no
    $TICKET_DATA."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    script = (
        "import contextlib, io, json, sys, ticketcli\n"
        "from ticketcli.cli.app import app\n"
        "res = {'module': ticketcli.__file__}\n"
        "for p in sys.argv[1:]:\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        try:\n"
        "            app(['evaluate', p, '--json', '--device', 'cpu'])\n"
        "        except SystemExit as e:\n"
        "            code = e.code\n"
        "    res[p] = {'code': code, 'result': json.loads(buf.getvalue())}\n"
        "print(json.dumps(res))\n"
    )
    paths = [str(a) for a, _, _ in twice.values()]
    r = subprocess.run(
        [sys.executable, "-c", script, *paths],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=child_env(elsewhere / "home"),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert Path(res.pop("module")).parent == ROOT / "ticketcli"  # this checkout's code, not an installed one
    return res


@pytest.mark.parametrize("method", METHODS.names())
@pytest.mark.slow
def test_same_command_twice_gives_identical_bits(twice, method):
    from safetensors.torch import load_file

    a, b, _ = twice[method]
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys() and all(ta[k].numpy().tobytes() == tb[k].numpy().tobytes() for k in ta)


@pytest.mark.parametrize("method", METHODS.names())
def test_evaluate_reproduces_stored_accuracy_exactly(twice, method):
    a, _, summary = twice[method]
    r = invoke("evaluate", str(a), "--json", "--device", "cpu")
    assert r.exit_code == 0 and r.stderr == ""  # no "did not reproduce" warning
    ev = json.loads(r.stdout)
    assert ev["reproduced"] is True
    for split in ("test", "val"):
        assert ev["metrics"][split]["accuracy"] == summary["metrics"][split]["accuracy"]
        assert ev["metrics"][split]["loss"] == summary["metrics"][split]["loss"]


@pytest.mark.parametrize("method", METHODS.names())
@pytest.mark.slow
def test_fresh_process_elsewhere_evaluates_identically(twice, fresh_process, method):
    a, _, summary = twice[method]
    child = fresh_process[str(a)]
    assert child["code"] == 0 and child["result"]["reproduced"] is True
    here = json.loads(invoke("evaluate", str(a), "--json", "--device", "cpu").stdout)
    for split in ("test", "val"):
        assert child["result"]["metrics"][split] == here["metrics"][split]
        assert child["result"]["metrics"][split]["accuracy"] == summary["metrics"][split]["accuracy"]


@pytest.mark.slow
def test_signal_during_drift(tmp_path):
    plot = tmp_path / "d.png"
    cmd = [
        "drift",
        "--inputs",
        "gaussian",
        "--model",
        "mlp:64-32-10",
        "--steps",
        "10000000",
        "--log-every",
        "1",
        "--probe-size",
        "64",
        "--batch-size",
        "16",
        "--device",
        "cpu",
        "--plot",
        str(plot),
    ]
    rc, last = interrupt_when_training(cmd, tmp_path, signal.SIGINT)
    assert rc == 130, last
    assert re.fullmatch(r"error: interrupted by SIGINT after step \d+; no output was written", last)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["stderr.txt"]


@pytest.mark.slow
def test_signal_during_sweep_keeps_finished_runs_only(tmp_path):
    out_dir, plot = tmp_path / "sweep", tmp_path / "s.png"
    cmd = [
        "sweep-k",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-32-32-10",
        "--epochs",
        "3",
        "--seeds",
        "0,1,2,3",
        "--layerwise",
        "8",
        "--n-extract",
        "200",
        "--n-val",
        "100",
        "--device",
        "cpu",
        "--out-dir",
        str(out_dir),
        "--plot",
        str(plot),
    ]
    rc, last = interrupt_when_training(cmd, tmp_path, signal.SIGTERM, ready=r"test\)")
    assert rc == 143, last
    assert re.fullmatch(
        rf"error: interrupted by SIGTERM after configuration \d+ of \d+; no output was written; "
        rf"finished runs stay in {re.escape(str(out_dir))}; the same command resumes",
        last,
    )
    assert not plot.exists()
    leftovers = [p for p in out_dir.rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []  # no temp files: every kept run was written atomically
