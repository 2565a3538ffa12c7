"""A long drift run killed at a random measurement and resumed, against the same run uninterrupted: its
measurements must be equal bit for bit (measurements.jsonl byte for byte) and its --json document equal but for
the wall time.

    python benchmarks/drift_resume_check.py [--steps 50000] [--checkpoint-every 5000] [--threads 2] [--seed 0]

The run is drift_long.py's: FashionMNIST (the system copy in /usr/share/datasets/fashion-mnist, or --data-dir),
mlp:784-128-128-128-128-10, batch 256, a measurement every 1,000 steps on a probe of 1,024, kept in a run dir
with a checkpoint every --checkpoint-every steps. The interrupted run gets SIGTERM once measurements.jsonl holds a
number of records drawn from --seed (after its first checkpoint, before the last measurement, at a step between
two checkpoints, so that the resumed run redoes steps whose measurements are already written), then
`ticket drift --resume DIR --json` finishes it. Each run is a fresh `python -m ticketcli drift` child of this
checkout. Prints the wall times, where the kill landed, and whether the two runs agree; exits 1 where they do not.
Not run by the test suite (tests/test_drift_rundir.py checks the same at 300 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from drift_long import BATCH, EVERY, MODEL, PROBE  # the very run drift_long.py times

ROOT = Path(__file__).resolve().parents[1]
RUN_SPECIFIC = ("wall_time_s",)  # fields of the --json document that differ between any two runs


def drift(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "ticketcli", "drift", *args], env=env, **kw)


def document(text: bytes) -> dict:
    doc = json.loads(text)
    for k in RUN_SPECIFIC:
        doc.pop(k, None)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--checkpoint-every", type=int, default=5_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="draws the measurement at which the run is killed")
    ap.add_argument("--data-dir", default=None)
    a = ap.parse_args()
    settings = ["--model", MODEL, "--dataset", "fashion-mnist", "--batch-size", str(BATCH), "--steps", str(a.steps)]
    settings += ["--log-every", str(EVERY), "--probe-size", str(PROBE), "--device", "cpu", "--threads", str(a.threads)]
    settings += ["--quiet", "--json", "--checkpoint-every", str(a.checkpoint_every)]
    if a.data_dir:
        settings += ["--data-dir", a.data_dir]
    records = a.steps // EVERY + 1  # step 0 and every EVERY steps (the last step is one of them here)
    first = a.checkpoint_every // EVERY + 1  # records written once the first checkpoint is
    # a record whose step is not a checkpoint's: the resume then redoes steps whose measurements are already written
    between = [k for k in range(first + 1, records) if (k - 1) * EVERY % a.checkpoint_every]
    at = random.Random(a.seed).choice(between or list(range(first + 1, records)))
    with tempfile.TemporaryDirectory() as tmp:
        whole, cut = Path(tmp) / "whole", Path(tmp) / "cut"
        t0 = time.monotonic()
        p = drift(*settings, "--run-dir", str(whole), stdout=subprocess.PIPE)
        out_whole, _ = p.communicate()
        wall_whole = time.monotonic() - t0
        if p.returncode != 0:
            print(f"the uninterrupted run failed: exit {p.returncode}")
            return 1

        t0 = time.monotonic()
        p = drift(*settings, "--run-dir", str(cut), stderr=subprocess.PIPE)
        jsonl = cut / "measurements.jsonl"
        while p.poll() is None:
            if (cut / "state.safetensors").exists() and jsonl.exists() and jsonl.read_bytes().count(b"\n") >= at:
                p.send_signal(signal.SIGTERM)
                break
            time.sleep(0.01)
        _, err = p.communicate()
        wall_cut = time.monotonic() - t0
        measured = jsonl.read_bytes().count(b"\n")
        line = err.decode().strip().splitlines()
        print(f"killed: exit {p.returncode} with {measured} of {records} measurements written; stderr: {line}")
        if p.returncode != 143:
            print("the run was not stopped by the signal")
            return 1
        t0 = time.monotonic()
        r = drift("--resume", str(cut), "--json", "--quiet", stdout=subprocess.PIPE)
        out_resumed, _ = r.communicate()
        wall_resume = time.monotonic() - t0
        same_records = jsonl.read_bytes() == (whole / "measurements.jsonl").read_bytes()
        same_doc = r.returncode == 0 and document(out_resumed) == document(out_whole)
        n_whole = (whole / "measurements.jsonl").read_bytes().count(b"\n")
    print(f"steps {a.steps}, checkpoint every {a.checkpoint_every}, threads {a.threads}, kill after {at} records")
    print(f"wall: uninterrupted {wall_whole:.1f} s; killed run {wall_cut:.1f} s + resumed {wall_resume:.1f} s")
    print(f"measurements.jsonl ({n_whole} records) byte-identical: {same_records}")
    print(f"--json document equal but for {', '.join(RUN_SPECIFIC)}: {same_doc}")
    return 0 if same_records and same_doc else 1


if __name__ == "__main__":
    sys.exit(main())
