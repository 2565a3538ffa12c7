"""--threads auto (the default) against the two fixed choices it replaces: torch's own count (one thread per core,
the default before auto) and --threads 1, on the paper run (FashionMNIST, the paper MLP, a few epochs) and on
digits, on the machine as it is ("idle") and beside other CPU-bound processes ("busy"). Each run is a fresh
`python -m ticketcli extract --json` (as a user runs it, so auto looks at the machine when the run starts); its
time is the extraction's own `wall_time_s`, the median of --runs runs, interleaved (auto, default, 1, auto, ...) so
that a change in the machine's load hits every choice alike.

    python benchmarks/threads_auto.py                     # both cases, both conditions, 3 runs each
    python benchmarks/threads_auto.py --cases digits --conditions busy --runs 5

The targets: idle, auto within 10% of torch's own count; busy (--hogs CPU-bound processes running, 2 by default),
auto within 10% of --threads 1. "idle" means the machine as it is: the load average is printed beside it, and on
a machine other jobs are using, its verdict says little (rerun on an idle one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = {
    # the README's paper run (augmented, 90%, seed 0, the paper MLP on FashionMNIST), shortened to --epochs
    "paper": ["--dataset", "fashion-mnist", "--method", "augmented", "--sparsity", "0.9", "--seed", "0"],
    # the README's quickstart (the paper MLP sized to digits)
    "digits": ["--dataset", "digits", "--method", "augmented", "--sparsity", "0.9", "--seed", "0"],
}
HOG = "while True: pass"


def torch_default_threads(env: dict[str, str]) -> int:
    """torch's own thread count in a fresh process: the default before --threads auto."""
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)


def one_run(case: list[str], threads: str | None, epochs: int, folder: Path, env: dict[str, str]) -> tuple[float, int]:
    """(the extraction's wall time in s, the threads it ran with) of one fresh `ticket extract`."""
    argv = [sys.executable, "-m", "ticketcli", "extract", *case, "--epochs", str(epochs), "--device", "cpu"]
    argv += ["--quiet", "--json", "--force", "--out", str(folder / "t.safetensors")]
    argv += [] if threads is None else ["--threads", threads]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[2:])}: exit {done.returncode}\n{done.stderr[-2000:]}")
    doc = json.loads(done.stdout)
    return float(doc["wall_time_s"]), int(doc["threads"])


@contextmanager
def hogs(n: int) -> Iterator[None]:
    """`n` CPU-bound processes running for the duration."""
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="paper,digits", help="comma-separated: paper, digits (default both)")
    p.add_argument("--conditions", default="idle,busy", help="comma-separated: idle, busy (default both)")
    p.add_argument("--runs", type=int, default=3, help="runs per choice; the median counts (default 3)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of each run (default 3)")
    p.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside the busy runs (default 2)")
    p.add_argument("--tolerance", type=float, default=0.10, help="how much slower auto may be (default 0.10)")
    a = p.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for key in ("TICKET_DEBUG", "OMP_NUM_THREADS"):
        env.pop(key, None)
    default = str(torch_default_threads(env))
    choices = {"auto": None, f"default ({default})": default, "1": "1"}
    print(
        f"cores {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}, "
        f"torch's own count {default}; {a.runs} runs of {a.epochs} epochs per choice, median wall_time_s"
    )
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for condition in a.conditions.split(","):
            with hogs(a.hogs if condition == "busy" else 0):
                load = os.getloadavg()[0]
                for name in a.cases.split(","):
                    case = CASES[name]
                    one_run(case, "1", 1, Path(tmp), env)  # untimed: the dataset's first read, the page cache
                    times: dict[str, list[float]] = {c: [] for c in choices}
                    used: dict[str, set[int]] = {c: set() for c in choices}
                    for _ in range(a.runs):
                        for label, threads in choices.items():
                            seconds, n = one_run(case, threads, a.epochs, Path(tmp), env)
                            times[label].append(seconds)
                            used[label].add(n)
                    med = {c: statistics.median(t) for c, t in times.items()}
                    target = f"default ({default})" if condition == "idle" else "1"
                    ok = med["auto"] <= (1 + a.tolerance) * med[target]
                    failed += not ok
                    row = "  ".join(f"{c} {med[c]:6.2f} s" for c in choices)
                    auto_used = ",".join(str(n) for n in sorted(used["auto"]))
                    print(
                        f"{condition:<5} load {load:5.2f}  {name:<7} {row}  (auto ran with {auto_used})  "
                        f"auto/{target} {med['auto'] / med[target]:.2f}  {'PASS' if ok else 'FAIL'}"
                    )
    print("all pass" if not failed else f"{failed} over the {a.tolerance:.0%} bound")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
