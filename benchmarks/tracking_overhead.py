"""What `--log-to` costs an extraction: the same `ticket extract` with and without logging to TensorBoard and an
MLflow sqlite store, interleaved (with, without, without, with, ...), in one run of this script.

    python benchmarks/tracking_overhead.py                            # the paper's MLP on digits, 20 epochs, 3 pairs
    python benchmarks/tracking_overhead.py --dataset fashion-mnist --epochs 2 --repeats 2   # the paper's setting

Two ratios per pair, with their medians: the run's own `wall_time_s` (the extraction, where the per-epoch scalars
are logged) and the whole command's wall time (which adds importing torch.utils.tensorboard and mlflow, opening
the store, the final metrics and copying the ticket into the store's artifacts: a fixed cost, printed in seconds).
Each command is a fresh `python -m ticketcli` child with this checkout on PYTHONPATH and --threads (default 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(the command's wall time, the run's own wall_time_s) of one `ticket extract`."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ticketcli", *args], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or done.stderr:
        sys.exit(f"exit {done.returncode}: {' '.join(args)}\n{done.stderr[-2000:]}")
    return seconds, float(json.loads(done.stdout)["wall_time_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--method", default="augmented")
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs (with and without --log-to)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    base = ["extract", "--dataset", a.dataset, "--epochs", str(a.epochs), "--method", a.method, "--device", "cpu"]
    base += ["--threads", str(a.threads), "--quiet", "--json", "--force"]
    print(
        f"ticket extract (the paper's MLP sized to {a.dataset}) --method {a.method} --epochs {a.epochs} "
        f"--threads {a.threads}; {a.repeats} interleaved pairs"
    )
    print("pair  run s (plain, logged, ratio)   command s (plain, logged, ratio)")
    run_ratios, command_ratios, fixed = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            logged = ["--log-to", f"tensorboard:{tmp}/tb", "--log-to", f"mlflow:sqlite:///{tmp}/m.db"]
            order = [False, True] if i % 2 else [True, False]
            times = {}
            for with_log in order:
                out = ["--out", f"{tmp}/t{i}{'l' if with_log else ''}.safetensors"]
                times[with_log] = run(base + out + (logged if with_log else []), env)
            (plain_cmd, plain_run), (log_cmd, log_run) = times[False], times[True]
            run_ratios.append(log_run / plain_run)
            command_ratios.append(log_cmd / plain_cmd)
            fixed.append(log_cmd - plain_cmd)
            print(
                f"{i + 1:>4}  {plain_run:7.2f} {log_run:7.2f} {log_run / plain_run:6.3f}"
                f"        {plain_cmd:7.2f} {log_cmd:7.2f} {log_cmd / plain_cmd:6.3f}"
            )
    print(
        f"median overhead: the run {100 * (statistics.median(run_ratios) - 1):+.1f}%, "
        f"the command {100 * (statistics.median(command_ratios) - 1):+.1f}% "
        f"(+{statistics.median(fixed):.2f} s, mostly fixed: imports, store, artifact)"
    )


if __name__ == "__main__":
    main()
