"""What opening a file costs the readers: microseconds per call of the ticket reader's header read, of a bounded
read of a small file, and of an atomic write, for this checkout and optionally another one, interleaved in one run.

    python benchmarks/open_cost.py                            # this checkout
    python benchmarks/open_cost.py --repo /path/to/other      # and another checkout, alternating with this one

Each checkout runs in a fresh child (`python -c ...` with it on PYTHONPATH); each row is the median of --rounds
rounds of --calls calls. The files are made once, here: a small digits ticket (mlp:64-16-10) and a 4 KiB file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
from pathlib import Path
from ticketcli.files.atomic import write_atomic
from ticketcli.files.bounded import read_regular_file
from ticketcli.ticketfile.layout import checked_layout, open_file

ticket, small, out, calls = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
payload = small.read_bytes()

def header():
    f, size = open_file(ticket)
    with f:
        checked_layout(f, size, ticket)

def bounded():
    read_regular_file(small, 1 << 20, "a file")

def write():
    write_atomic(out, payload, overwrite=True)

result = {}
for name, call in (("ticket header", header), ("bounded read", bounded), ("atomic write", write)):
    call()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    result[name] = (time.perf_counter() - t0) / calls * 1e6
print(json.dumps(result))
"""


def measure(repo: Path, files: list[str], calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *files, str(calls)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, help="another checkout to measure alternately with this one")
    ap.add_argument("--calls", type=int, default=2000, help="calls per round (default 2000)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per checkout; the median is reported (default 5)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ticket, small, out = Path(tmp, "t.safetensors"), Path(tmp, "small.bin"), Path(tmp, "out.bin")
        subprocess.run(
            [sys.executable, "-m", "ticketcli", "extract", "--dataset", "digits", "--model", "mlp:64-16-10",
             "--epochs", "1", "--device", "cpu", "--out", str(ticket)],
            env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, capture_output=True,
        )  # fmt: skip
        small.write_bytes(os.urandom(4096))
        repos = {"this checkout": REPO, **({"other": args.repo.resolve()} if args.repo else {})}
        rows: dict[str, list[dict[str, float]]] = {name: [] for name in repos}
        for _ in range(args.rounds):
            for name, repo in repos.items():
                rows[name].append(measure(repo, [str(ticket), str(small), str(out)], args.calls))
    names = list(rows[next(iter(rows))][0])
    print(f"{'µs per call':<16}" + "".join(f"{n:>16}" for n in names))
    for repo_name, runs in rows.items():
        print(f"{repo_name:<16}" + "".join(f"{statistics.median(r[n] for r in runs):>16.1f}" for n in names))


if __name__ == "__main__":
    main()
