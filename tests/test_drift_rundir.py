"""ticket drift --run-dir/--resume: a run killed at a random step and resumed gives the measurements and the --json
document of an uninterrupted run (wall time aside); a conflicting flag, a folder that is not a run dir, and a
damaged state or settings file are refused with one line and exit 2."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN = ["--dataset", "digits", "--model", "mlp:64-32-32-10", "--steps", "240", "--log-every", "10"]
RUN += ["--probe-size", "128", "--seeds", "0", "--quiet", "--json"]
RUN_SPECIFIC = {"wall_time_s"}  # the only field of the result document that differs between two identical runs


def ticket(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m ticketcli ARGS` in cwd, this checkout's code."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "ticketcli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def one_line_refusal(r: subprocess.CompletedProcess[str]) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("drift-full")
    r = ticket("drift", *RUN, "--run-dir", "full", "--checkpoint-every", "30", cwd=base)
    assert r.returncode == 0, r.stderr
    return base / "full", json.loads(r.stdout)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_killed_at_a_random_step_resumes_bit_identically(uninterrupted, tmp_path: Path):
    full_dir, full_doc = uninterrupted
    records = len((full_dir / "measurements.jsonl").read_text().splitlines())
    rng = random.Random()
    kill_after = rng.randrange(4, records - 1)  # past the first checkpoint (step 30 = record 4), before the end
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "ticketcli", "drift", *RUN, "--run-dir", "cut", "--checkpoint-every", "30"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jsonl = tmp_path / "cut" / "measurements.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if jsonl.exists() and len(jsonl.read_text().splitlines()) >= kill_after:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.02)
    _, err = proc.communicate(timeout=300)
    if proc.returncode == 0:
        pytest.fail(f"the run finished before it was killed after record {kill_after}")
    assert proc.returncode == 143, err
    assert "--resume" in err  # the one line says how to continue
    resumed = ticket("drift", "--resume", "cut", "--quiet", "--json", cwd=tmp_path)
    assert resumed.returncode == 0, (kill_after, resumed.stderr)
    assert jsonl.read_bytes() == (full_dir / "measurements.jsonl").read_bytes(), f"killed after record {kill_after}"
    doc = json.loads(resumed.stdout)
    assert {k: v for k, v in doc.items() if k not in RUN_SPECIFIC} == {
        k: v for k, v in full_doc.items() if k not in RUN_SPECIFIC
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_flag_that_conflicts_with_the_recorded_run_is_refused(uninterrupted):
    full_dir, _ = uninterrupted
    r = ticket("drift", "--resume", full_dir.name, "--steps", "999", "--quiet", cwd=full_dir.parent)
    one_line_refusal(r)
    assert "--steps" in r.stderr


def test_a_folder_that_is_not_a_run_dir_is_refused(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for target in ("empty", "file", "missing"):
        one_line_refusal(ticket("drift", "--resume", target, "--quiet", cwd=tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_damaged_state_and_settings_files_are_refused(uninterrupted, tmp_path: Path):
    full_dir, _ = uninterrupted
    state = (full_dir / "state.safetensors").read_bytes()
    flipped = bytearray(state)
    flipped[20] ^= 0xFF  # inside the header: no longer UTF-8 JSON
    damaged = [
        ("state.safetensors", state[:100]),  # truncated: the header's declared length exceeds the file
        ("state.safetensors", bytes(flipped)),
        ("state.safetensors", (2**62).to_bytes(8, "little") + state[8:]),  # a header length no file holds
        ("run.json", b'{"x":'),  # settings cut short
    ]
    for i, (name, data) in enumerate(damaged):
        run = tmp_path / f"r{i}"
        run.mkdir()
        for f in full_dir.iterdir():
            (run / f.name).write_bytes(f.read_bytes())
        (run / name).write_bytes(data)
        one_line_refusal(ticket("drift", "--resume", run.name, "--quiet", cwd=tmp_path))
