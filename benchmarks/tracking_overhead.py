"""What `--log-to` costs an extraction: the same `ticket extract` with and without logging to TensorBoard and an
MLflow sqlite store, interleaved (with, without, without, with, ...), in one run of this script.

    python benchmarks/tracking_overhead.py                            # the paper's MLP on digits, 20 epochs, 3 pairs
    python benchmarks/tracking_overhead.py --dataset fashion-mnist --epochs 2 --repeats 2   # paper's data, 2 epochs

Three ratios per pair, with their medians: the run's own `wall_time_s` (the extraction, while the trackers'
thread imports torch.utils.tensorboard and the MLflow writer process imports mlflow, opens the store and writes the
per-epoch scalars), and the whole command's wall time and CPU time (user + system, the writer process's included;
steadier than wall time on a loaded machine), which add the final metrics, copying the ticket into the store's
artifacts and waiting for the last writes. The difference in seconds is mostly a fixed cost, the same for a long
run. The load average before and after is printed: on a shared machine, the wall times depend on it.
Each command is a fresh `python -m ticketcli` child with this checkout on PYTHONPATH and --threads (default 1).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(the command's wall time, its CPU time, the run's own wall_time_s) of one `ticket extract`."""
    t0, c0 = time.perf_counter(), cpu()
    done = subprocess.run([sys.executable, "-m", "ticketcli", *args], env=env, capture_output=True, text=True)
    seconds, cpu_s = time.perf_counter() - t0, cpu() - c0
    if done.returncode != 0 or done.stderr:
        sys.exit(f"exit {done.returncode}: {' '.join(args)}\n{done.stderr[-2000:]}")
    return seconds, cpu_s, float(json.loads(done.stdout)["wall_time_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--method", default="augmented")
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs (with and without --log-to)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--trackers", default="tensorboard,mlflow", help="comma-separated: tensorboard, mlflow")
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    base = ["extract", "--dataset", a.dataset, "--epochs", str(a.epochs), "--method", a.method, "--device", "cpu"]
    base += ["--threads", str(a.threads), "--quiet", "--json", "--force"]
    print(
        f"ticket extract (the paper's MLP sized to {a.dataset}) --method {a.method} --epochs {a.epochs} "
        f"--threads {a.threads}; --log-to {a.trackers}; {a.repeats} interleaved pairs"
    )
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print("pair  run wall s (plain, logged, ratio)  command wall s (plain, logged, ratio)  command CPU s (same)")
    ratios: dict[str, list[float]] = {"run": [], "wall": [], "cpu": []}
    extra: dict[str, list[float]] = {"wall": [], "cpu": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            where = {"tensorboard": f"tensorboard:{tmp}/tb", "mlflow": f"mlflow:sqlite:///{tmp}/m.db"}
            logged = [arg for kind in a.trackers.split(",") for arg in ("--log-to", where[kind])]
            order = [False, True] if i % 2 else [True, False]
            times = {}
            for with_log in order:
                out = ["--out", f"{tmp}/t{i}{'l' if with_log else ''}.safetensors"]
                times[with_log] = run(base + out + (logged if with_log else []), env)
            (p_wall, p_cpu, p_run), (l_wall, l_cpu, l_run) = times[False], times[True]
            ratios["run"].append(l_run / p_run)
            ratios["wall"].append(l_wall / p_wall)
            ratios["cpu"].append(l_cpu / p_cpu)
            extra["wall"].append(l_wall - p_wall)
            extra["cpu"].append(l_cpu - p_cpu)
            print(
                f"{i + 1:>4}  {p_run:7.2f} {l_run:7.2f} {l_run / p_run:6.3f}     {p_wall:7.2f} {l_wall:7.2f} "
                f"{l_wall / p_wall:6.3f}      {p_cpu:7.2f} {l_cpu:7.2f} {l_cpu / p_cpu:6.3f}"
            )
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    med = {k: 100 * (statistics.median(v) - 1) for k, v in ratios.items()}
    print(
        f"median overhead: the run's wall time {med['run']:+.1f}%, the command's wall time {med['wall']:+.1f}% "
        f"(+{statistics.median(extra['wall']):.2f} s), its CPU time {med['cpu']:+.1f}% "
        f"(+{statistics.median(extra['cpu']):.2f} s: importing the trackers, opening the store, the writes)"
    )


if __name__ == "__main__":
    main()
