"""A long drift run next to the same training without measurements: what the measurements cost in time, and
whether memory stays flat as the steps go on.

    PYTHONPATH=. python benchmarks/drift_long.py [--steps 50000] [--short 1000] [--threads 2] [--run-dir]

The run: FashionMNIST (the system copy in /usr/share/datasets/fashion-mnist), model mlp:784-128-128-128-128-10,
batch 256, a measurement every 1,000 steps on a probe of 1,024. Each variant runs in its own child process, which
reports its own wall time (from loading the data to the last step, as run_drift times it) and its peak RSS
(resource.getrusage(RUSAGE_SELF).ru_maxrss of the child, so the runs do not contaminate each other):

- `train`: the same training loop (drift's forward, loss and Adam, the same batches) with no measurement;
- `drift`: `run_drift` at --steps, and `drift-short` at --short steps with the same --log-every;
- with --run-dir, also `drift+run-dir`: the long run kept in a run dir (measurements.jsonl, a checkpoint every
  --log-every steps).

It prints the wall-time ratio drift/train (target <= 1.3) and the peak-RSS ratio long/short (target <= 1.1). Not run
by the test suite; timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

MODEL, BATCH, EVERY, PROBE = "mlp:784-128-128-128-128-10", 256, 1000, 1024


def spec_for(steps: int):
    from ticketcli.drift.options import build_drift_spec
    from ticketcli.settings.resolve import data_location

    s = {"model": MODEL, "dataset": "fashion-mnist", "batch_size": BATCH, "steps": steps, "log_every": EVERY}
    return build_drift_spec({**s, "probe_size": PROBE, "device": "cpu"}, data_location(None, False))


def child(kind: str, steps: int, threads: int, run_dir: str | None) -> dict:
    """One variant, in this (child) process: its wall time and this process's peak RSS."""
    import torch

    torch.set_num_threads(threads)
    from ticketcli.drift import run as drift_run

    spec = spec_for(steps)
    if kind == "train":
        from ticketcli.drift.activations import ACTIVATIONS, LOSSES
        from ticketcli.drift.inputs import Inputs
        from ticketcli.drift.sites import drift_forward
        from ticketcli.runs import build as runs_build
        from ticketcli.specs.run import ModelPolicy
        from ticketcli.train import WeightTrainer

        budget = runs_build.policy_budget(ModelPolicy())
        net, _ = runs_build.build_net(spec.model, replace(spec.init, seed=0), None, budget)
        t0 = time.perf_counter()
        inputs = Inputs(spec, spec.model, replace(spec.data, split_seed=0), 0, torch.device("cpu"))
        act, loss = ACTIVATIONS.get(spec.activation), LOSSES.get(spec.loss)
        forward = drift_forward(net, lambda h: act.fn(h, spec.clip))
        trainer = WeightTrainer(net, None, spec.optim)
        for _ in range(spec.steps):
            xb, yb = inputs.next()
            trainer.step(xb, yb, loss, forward=forward)
        wall = time.perf_counter() - t0
    else:
        keeper = None
        if run_dir is not None:
            from ticketcli.drift import rundir
            from ticketcli.drift.keep import RunKeeper

            rundir.create(Path(run_dir), {"flags": {}, "settings": {}})
            logged = drift_run.logged_steps(steps, EVERY)
            keeper = RunKeeper(Path(run_dir), EVERY, logged, seeds=len(spec.seeds), resume=False)
        wall = drift_run.run_drift(spec, keeper=keeper).wall_time_s
    return {"wall_s": wall, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_child(kind: str, steps: int, threads: int, run_dir: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--steps", str(steps), "--threads", str(threads)]
    out = subprocess.run(cmd + (["--dir", run_dir] if run_dir else []), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=50_000)
    ap.add_argument("--short", type=int, default=1_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--run-dir", action="store_true")
    ap.add_argument("--child")
    ap.add_argument("--dir")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.steps, a.threads, a.dir)))
        return
    rows = {
        "train": run_child("train", a.steps, a.threads),
        "drift": run_child("drift", a.steps, a.threads),
        "drift-short": run_child("drift", a.short, a.threads),
    }
    if a.run_dir:
        with tempfile.TemporaryDirectory() as tmp:
            rows["drift+run-dir"] = run_child("drift", a.steps, a.threads, str(Path(tmp) / "run"))
    print(f"{MODEL}, batch {BATCH}, a measurement every {EVERY} steps on {PROBE} probe examples, {a.threads} threads")
    for name, r in rows.items():
        steps = a.short if name == "drift-short" else a.steps
        print(f"  {name:14s} {steps:>7d} steps  wall {r['wall_s']:8.1f} s  peak RSS {r['peak_rss_mib']:7.1f} MiB")
    ratio = rows["drift"]["wall_s"] / rows["train"]["wall_s"]
    print(f"wall-time ratio drift/train at {a.steps} steps: {ratio:.3f} (target <= 1.3)")
    if "drift+run-dir" in rows:
        print(f"wall-time ratio drift+run-dir/train: {rows['drift+run-dir']['wall_s'] / rows['train']['wall_s']:.3f}")
    rss = rows["drift"]["peak_rss_mib"] / rows["drift-short"]["peak_rss_mib"]
    print(f"peak RSS ratio {a.steps} steps / {a.short} steps: {rss:.3f} (target <= 1.1)")


if __name__ == "__main__":
    main()
