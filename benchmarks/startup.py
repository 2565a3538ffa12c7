"""Start-up time of `ticket`: each command's wall time as a ratio to `python -c "import torch"`, in one run.

    python benchmarks/startup.py              # best of 5 runs per command
    python benchmarks/startup.py --runs 10 --limit 0.3 --repo /path/to/other/checkout

Every command is a fresh `python -m ticketcli ...` child with the checkout on PYTHONPATH (so it measures this
checkout's code, not whatever `ticket` is installed); its time is the best of --runs (the least disturbed by
other load). A command that should not compute anything (version, help, inspect, a bad file refused, an extraction
refused for its options, its destination or its missing dataset) passes when
its best time is at most --limit times that of importing torch. `extract --help` is listed for information.
The ticket inspected is extracted once, here, on digits with mlp:64-16-10.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def best_time(argv: list[str], env: dict[str, str], runs: int, expect: int) -> float:
    """The shortest wall time of `runs` runs of argv, each checked to end with exit code `expect`."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        if done.returncode != expect:
            sys.exit(f"{' '.join(argv[2:])}: exit {done.returncode}, expected {expect}\n{done.stderr[-2000:]}")
        best = min(best, seconds)
    return best


def make_ticket(folder: Path, env: dict[str, str]) -> Path:
    """A small real ticket (and a garbage file beside it) to inspect and evaluate."""
    ticket = folder / "t.safetensors"
    extract = [sys.executable, "-m", "ticketcli", "extract", "--dataset", "digits", "--model", "mlp:64-16-10"]
    extract += ["--epochs", "1", "--quiet", "--out", str(ticket)]
    subprocess.run(extract, env=env, check=True, capture_output=True)
    (folder / "garbage.safetensors").write_bytes(b"\x07" * 64)
    (folder / "empty").mkdir()  # no dataset in it (nor in the user cache, $XDG_CACHE_HOME, set there)
    return ticket


def cases(ticket: Path) -> list[tuple[str, list[str], int, bool]]:
    """(label, ticket arguments, expected exit code, judged against the limit)."""
    garbage = str(ticket.parent / "garbage.safetensors")
    fresh, empty = str(ticket.parent / "new" / "x.safetensors"), str(ticket.parent / "empty")
    return [
        ("ticket --version", ["--version"], 0, True),
        ("ticket --help", ["--help"], 0, True),
        ("ticket extract --help", ["extract", "--help"], 0, False),
        ("ticket inspect TICKET", ["inspect", str(ticket)], 0, True),
        ("ticket inspect GARBAGE", ["inspect", garbage], 2, True),
        ("ticket evaluate GARBAGE", ["evaluate", garbage], 2, True),
        # a command that would compute, refused before it imports torch
        ("extract snip --epochs 5", ["extract", "--method", "snip", "--epochs", "5", "--out", fresh], 2, True),
        ("extract --sparsity 1.5", ["extract", "--sparsity", "1.5", "--out", fresh], 2, True),
        ("extract --out EXISTING", ["extract", "--dataset", "digits", "--out", str(ticket)], 2, True),
        ("extract MISSING DATASET", ["extract", "--dataset", "mnist", "--data-dir", empty, "--out", fresh], 2, True),
    ]


def main() -> None:
    """Time every case and print one line each: seconds, ratio to import torch, PASS/FAIL (or info)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per command; the best counts (default 5)")
    parser.add_argument("--limit", type=float, default=0.3, help="largest passing ratio (default 0.3)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.repo.resolve()), "COLUMNS": "100"}
    env.pop("TICKET_DEBUG", None)
    env.pop("TICKET_DATA", None)
    with tempfile.TemporaryDirectory() as tmp:
        env["XDG_CACHE_HOME"] = str(Path(tmp) / "empty")
        ticket = make_ticket(Path(tmp), env)
        torch_s = best_time([sys.executable, "-c", "import torch"], env, args.runs, 0)
        print(f"{'command':<28}{'best s':>9}{'ratio':>8}  (best of {args.runs}; limit {args.limit} x import torch)")
        print(f"{'python -c import torch':<28}{torch_s:>9.3f}{1:>8.2f}")
        failed = 0
        for label, argv, expect, judged in cases(ticket):
            seconds = best_time([sys.executable, "-m", "ticketcli", *argv], env, args.runs, expect)
            ratio = seconds / torch_s
            verdict = ("PASS" if ratio <= args.limit else "FAIL") if judged else "info"
            failed += verdict == "FAIL"
            print(f"{label:<28}{seconds:>9.3f}{ratio:>8.2f}  {verdict}")
    print(f"{'all pass' if not failed else f'{failed} over the limit'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
