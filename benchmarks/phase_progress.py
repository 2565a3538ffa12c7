"""What the per-chunk progress callback costs: BatchNorm recalibration plus evaluation (train.evaluate) of a masked
BatchNorm network, with no callback and with the console's own plain-line callback (PlainProgress.chunk, lines on,
writing to a discarded stream), interleaved in one process (none, with, none, with, ...) so that the machine's load
hits both alike; prints the median of each and their ratio, and checks that both give the same metrics.

    OMP_NUM_THREADS=1 python benchmarks/phase_progress.py      # the paper MLP with BatchNorm: the cheapest chunks,
                                                               # where a callback weighs most
    OMP_NUM_THREADS=1 python benchmarks/phase_progress.py --model resnet20@3x32x32-10 --calibration 1000 --test 2048
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time

import torch

from ticketcli import train
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.report import plain as report_plain
from ticketcli.specs.run import InitSpec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mlp:784-256-256-256-10+norm=batch", help="a built-in model with BatchNorm")
    p.add_argument("--calibration", type=int, default=5000, help="rows of the calibration split (chunks of 500)")
    p.add_argument("--test", type=int, default=10000, help="rows evaluated (chunks of train.EVAL_CHUNK)")
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    spec = parse_model(a.model)
    module = build_model(spec)
    net = MaskedNet(module, spec)
    net.load_weights(init_weights(module, InitSpec(seed=0)))
    if not net.batchnorms:
        sys.exit(f"{a.model} has no BatchNorm: nothing is recalibrated")
    g = torch.Generator().manual_seed(0)
    shape = spec.input if spec.input is not None else (spec.widths[0],)
    net.calibration = torch.randn(a.calibration, *shape, generator=g)
    x, y = torch.randn(a.test, *shape, generator=g), torch.randint(0, 10, (a.test,), generator=g)
    masks = {n: torch.rand(net.weights[n].shape, generator=g) < 0.3 for n in net.names}
    plain = report_plain.PlainProgress("evaluate", None, unit="chunk")
    stderr = sys.stderr
    times: dict[str, list[float]] = {"none": [], "callback": []}
    results: dict[str, dict] = {}
    for i in range(a.repeats + 1):  # the first round warms up, untimed
        for kind in times:
            for m in masks.values():
                m.bitwise_or_(False)  # a new in-place version: calibrate recomputes the statistics every run
            sys.stderr = io.StringIO()  # the callback's lines are written, then discarded
            try:
                t0 = time.perf_counter()
                results[kind] = train.evaluate(net, masks, x, y, chunks=plain.chunk if kind == "callback" else None)
                elapsed = time.perf_counter() - t0
            finally:
                sys.stderr = stderr
            if i:
                times[kind].append(elapsed)
    assert results["none"] == results["callback"], results
    none, told = statistics.median(times["none"]), statistics.median(times["callback"])
    print(
        f"model {a.model}, {a.calibration} calibration rows, {a.test} test rows,"
        f" torch threads {torch.get_num_threads()}"
    )
    print(f"median of {a.repeats}: no callback {none:.3f} s, callback {told:.3f} s, ratio {told / none:.3f}")
    print("metrics identical:", results["none"] == results["callback"])


if __name__ == "__main__":
    main()
