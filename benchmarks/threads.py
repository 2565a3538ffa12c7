"""Wall time of one extraction at each torch thread count, in one process, runs interleaved (1, N, 1, N, ...) so
that a change in the machine's load hits every count alike; prints the median per count and its ratio to 1 thread,
and checks that every count gives the same masks. Fewer threads win on a loaded machine (README: Threads).

    python benchmarks/threads.py                       # digits, the paper MLP sized to it, 5 epochs
    python benchmarks/threads.py --dataset fashion-mnist --epochs 100 --repeats 1   # the paper run
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ticketcli as tc
from ticketcli.runtime.threads import cores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="digits")
    p.add_argument("--method", default="augmented")
    p.add_argument(
        "--model", default=None, help="default: the paper MLP (three hidden layers of 256) sized to the data"
    )
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", default=f"1,{cores()}", help="comma-separated thread counts (default 1 and the cores)")
    a = p.parse_args()
    counts = [int(t) for t in a.threads.split(",")]
    model = a.model or f"mlp:{64 if a.dataset == 'digits' else 784 if a.dataset != 'cifar10' else 3072}-256-256-256-10"
    times: dict[int, list[float]] = {n: [] for n in counts}
    masks: dict[int, set[str]] = {n: set() for n in counts}
    # one untimed run first: imports, the dataset's first load and torch's kernels warm up once, not in a count
    tc.extract(model, a.dataset, method=a.method, sparsity=0.9, epochs=1, seed=0, device="cpu", progress=False)
    for _ in range(a.repeats):
        for n in counts:
            t0 = time.perf_counter()
            ticket = tc.extract(
                model,
                a.dataset,
                method=a.method,
                sparsity=0.9,
                epochs=a.epochs,
                seed=0,
                threads=n,
                device="cpu",
                progress=False,
            )
            times[n].append(time.perf_counter() - t0)
            masks[n].add(ticket.metadata["masks_sha256"])
    base = statistics.median(times[counts[0]])
    print(f"{a.method} on {a.dataset}, {a.epochs} epochs, {a.repeats} repeats; cores here: {cores()}, ", end="")
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("threads  median s  ratio to first  runs")
    for n in counts:
        m = statistics.median(times[n])
        print(f"{n:7d}  {m:8.2f}  {m / base:14.2f}  {', '.join(f'{t:.2f}' for t in times[n])}")
    same = len(set().union(*masks.values())) == 1
    print(f"masks identical across thread counts: {same}")


if __name__ == "__main__":
    main()
