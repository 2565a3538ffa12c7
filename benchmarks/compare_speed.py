"""Speed and peak memory of `ticket compare`'s overlap count against unpacking the masks, in one process.

    python benchmarks/compare_speed.py                  # two tickets of 6000x6000 + 10x6000 weights (36M)
    python benchmarks/compare_speed.py --side 12000     # 144M weights

Two tickets are written with random masks (densities 0.5 and 0.3). Then, each --repeat times:

  compare    runs.compare.compare_tickets: both files validated as inspect validates them, then an AND and a
             popcount over the packed bytes, a chunk at a time
  unpacked   the oracle way: ticket.load both (every mask unpacked to bools) and numpy's logical_and/sum per mask

Both must give the same count of weights kept by both tickets. Reported: the best wall time of each, their ratio,
and each one's peak Python allocation (tracemalloc, in a separate untimed run). Run it with OMP_NUM_THREADS=1 on a
quiet machine; on a loaded one, read the ratio rather than the seconds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ticketcli.runs.compare import compare_tickets
from ticketcli.ticketfile import ticket as ticket_io


def write(path: Path, side: int, density: float, seed: int) -> Path:
    g = torch.Generator().manual_seed(seed)
    shapes = {"layers.0.weight": (side, side), "layers.1.weight": (10, side)}
    masks = {n: torch.rand(s, generator=g) < density for n, s in shapes.items()}
    ticket_io.save(
        ticket_io.Ticket(
            masks=masks,
            model={"spec": f"mlp:{side}-{side}-10", "arch": "mlp", "widths": [side, side, 10], "bias": False},
            init={"scheme": "scaled-kaiming-uniform", "k": 0.5, "gain": "relu", "seed": 0},
            weights_sha256="0" * 64,
            method={"name": "random", "sparsity": 1 - density},
            data={"dataset": "digits", "n_extract": 10, "n_val": 5, "n_test": 5, "split_seed": 0},
            sparsity={"requested": 1 - density, "achieved": 1 - density},
            metrics={},
            created_by={},
        ),
        path,
    )
    return path


def by_compare(a: Path, b: Path) -> int:
    return compare_tickets([a, b]).pairs[0].overlap.both


def by_unpacking(a: Path, b: Path) -> int:
    ma, mb = ticket_io.load(a).masks, ticket_io.load(b).masks
    return sum(int(np.logical_and(ma[n].numpy(), mb[n].numpy()).sum()) for n in ma)


def best(fn: Callable[[Path, Path], int], a: Path, b: Path, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = fn(a, b)
        times.append(time.perf_counter() - t0)
    return min(times), count


def peak(fn: Callable[[Path, Path], int], a: Path, b: Path) -> int:
    tracemalloc.start()
    try:
        fn(a, b)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=6000, help="the first layer is side x side")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        a = write(Path(d) / "a.safetensors", args.side, 0.5, 1)
        b = write(Path(d) / "b.safetensors", args.side, 0.3, 2)
        weights = args.side * args.side + 10 * args.side
        print(f"two tickets of {weights:,} weights ({a.stat().st_size / 2**20:.1f} MiB each)")
        t_cmp, n_cmp = best(by_compare, a, b, args.repeat)
        t_unp, n_unp = best(by_unpacking, a, b, args.repeat)
        assert n_cmp == n_unp, (n_cmp, n_unp)
        print(f"kept by both: {n_cmp:,} (the same both ways)")
        print(f"compare   {t_cmp:8.3f} s   peak {peak(by_compare, a, b) / 2**20:7.1f} MiB")
        print(f"unpacked  {t_unp:8.3f} s   peak {peak(by_unpacking, a, b) / 2**20:7.1f} MiB")
        print(f"unpacked / compare: {t_unp / t_cmp:.1f}x the time")


if __name__ == "__main__":
    main()
