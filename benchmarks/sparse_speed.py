"""The sparse form's speed targets, measured with `ticket bench` on this CPU: one torch thread (and one
onnxruntime thread), the forms of each ticket timed interleaved in one run.

    python benchmarks/sparse_speed.py                      # FashionMNIST tickets, edge-popup, 1 epoch on 6000 examples
    python benchmarks/sparse_speed.py --method random      # random masks at the same per-layer densities (faster)
    python benchmarks/sparse_speed.py --workdir DIR        # keep the tickets (reused when the script runs again)

    python benchmarks/sparse_speed.py --clock wall         # wall-clock latency instead of the thread's CPU time

Targets, at batch 64: an edge-popup ticket of mlp:784-1024-1024-1024-10 runs at least 3x faster than dense in its
sparse form at 95% sparsity and at least 6x at 98%; the paper MLP (mlp:784-256-256-256-10) at least 1.5x at 95%;
the form bench recommends is never slower than dense (its median at most dense's); every form that runs agrees
with the ticket's network (largest logit difference at most 1e-5 of the largest |logit|, the same test accuracy).
Tables: both MLPs at 80, 90, 95 and 98% sparsity, every form at batch 1, 64 and 512.

The speed of a sparse kernel depends on each layer's density and shape, not on which weights a method keeps, so the
tickets are extracted quickly (edge-popup, per-layer top-k: every layer at the ticket's density; `--method random`
gives the same densities); their accuracy is not what is measured. Prints the machine's load average before and
after. By default each sample is the timing thread's CPU time, which counts all the work of one torch thread (and
of one onnxruntime thread, run in the calling thread) and which other processes' load on a busy machine does not
inflate; `--clock wall` times the wall clock (read the spread columns on a busy machine).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ticketcli.bench.result import DENSE, TicketBench
from ticketcli.bench.run import bench_paths
from ticketcli.runtime.threads import using
from ticketcli.settings.reader import build_reader_spec
from ticketcli.specs.bench import BenchSpec

WIDE = "mlp:784-1024-1024-1024-10"
PAPER = "mlp:784-256-256-256-10"
SPARSITIES = (0.8, 0.9, 0.95, 0.98)
TARGETS = {(WIDE, 0.95): 3.0, (WIDE, 0.98): 6.0, (PAPER, 0.95): 1.5}  # sparse over dense at batch 64
TARGET_BATCH = 64


def extract(model: str, sparsity: float, method: str, out: Path) -> Path:
    """One ticket (reused when it exists): FashionMNIST, seed 0, one epoch on a 6000-example extraction split."""
    if out.exists():
        return out
    args = [sys.executable, "-m", "ticketcli", "extract", "--dataset", "fashion-mnist", "--model", model]
    args += ["--method", method, "--sparsity", str(sparsity), "--threads", "1", "--quiet", "--out", str(out)]
    if method != "random":
        args += ["--epochs", "1", "--n-extract", "6000"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    return out


def ms(s: float) -> str:
    return f"{1e3 * s:8.3f}"


def table(rows: list[TicketBench], batches: tuple[int, ...]) -> None:
    """One line per ticket and form: latency (ms, median), spread and speed-up over dense at each batch size."""
    head = "".join(f" | b{b:<4} ms  (iqr)  x dense" for b in batches)
    print(f"{'model':27} {'sparsity':>8} {'form':7}{head}")
    for t in rows:
        for f in t.forms:
            if not f.timings:
                why = f.reason or "-"
                print(f"{t.model:27} {100 * (t.sparsity or 0):7.1f}% {f.name:7} | not available: {why[:100]}")
                continue
            cells = ""
            for b in batches:
                x = f.timing(b)
                cells += " |" + (
                    "" if x is None else f"{ms(x.median_s)} ({ms(x.q3_s - x.q1_s).strip()}) {x.speedup or 0:5.2f}x"
                )
            print(f"{t.model:27} {100 * (t.sparsity or 0):7.1f}% {f.name:7}{cells}")
        print(f"{'':27} {'':8} {t.verdict_line()}")


def checks(rows: list[TicketBench]) -> list[str]:
    """The targets, one line each, PASS or FAIL."""
    lines = []
    for t in rows:
        sparse = t.form("sparse")
        key = (t.model, round(t.sparsity or 0, 2))
        target = TARGETS.get(key)
        if target is not None:
            x = None if sparse is None else sparse.timing(TARGET_BATCH)
            got = 0.0 if x is None or x.speedup is None else x.speedup
            verdict = "PASS" if got >= target else "FAIL"
            lines.append(
                f"{verdict} {t.model} at {100 * key[1]:.0f}%: sparse {got:.2f}x dense at batch 64 (>= {target}x)"
            )
        for f in t.forms:
            if f.agreement is not None and not f.agreement.agrees:
                lines.append(
                    f"FAIL {t.model} at {100 * key[1]:.0f}%: {f.name} disagrees ({f.agreement.max_abs_diff:.2e})"
                )
        dense = t.form(DENSE)
        for p in t.verdict:
            best = t.form(p.recommended)
            if dense is None or best is None:
                continue
            d, r = dense.timing(p.batch), best.timing(p.batch)
            if d is not None and r is not None and r.median_s > d.median_s:
                lines.append(f"FAIL {t.model} at {100 * key[1]:.0f}%: recommended {p.recommended} slower than dense")
    agree = all(f.agreement is None or f.agreement.agrees for t in rows for f in t.forms)
    lines.append(f"{'PASS' if agree else 'FAIL'} every form that ran agrees with its ticket's network (1e-5, accuracy)")
    slower = any(line.startswith("FAIL") and "recommended" in line for line in lines)
    lines.append(f"{'FAIL' if slower else 'PASS'} the recommended form is never slower than dense (median)")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", default="edge-popup", help="extraction method of the timed tickets")
    ap.add_argument("--workdir", type=Path, help="where the tickets are kept (default: a temporary folder)")
    ap.add_argument("--repeats", type=int, default=15, help="interleaved rounds per batch size")
    ap.add_argument("--batches", default="1,64,512", help="batch sizes of the tables")
    ap.add_argument(
        "--clock",
        default="thread",
        choices=("thread", "wall"),
        help="thread: the timing thread's CPU time (one torch thread: all the work; other processes' load does not "
        "inflate it); wall: wall-clock latency",
    )
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="sparse-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())} ({os.cpu_count()} CPUs)")
    t0 = time.perf_counter()
    tickets = {}
    for model in (PAPER, WIDE):
        for s in SPARSITIES:
            name = f"{model.replace(':', '-')}-{args.method}-{round(100 * s)}.safetensors"
            tickets[(model, s)] = extract(model, s, args.method, work / name)
    print(f"tickets ({args.method}) in {work}: {time.perf_counter() - t0:.0f} s")
    batches = tuple(int(b) for b in args.batches.split(","))
    spec = BenchSpec(batches=batches, repeats=args.repeats, clock=args.clock)
    rows = []
    reader = build_reader_spec(device="cpu", threads=1)  # the data's search path, as the command line finds it
    with using(1):
        for path in tickets.values():
            t1 = time.perf_counter()
            rows += bench_paths([path], reader, spec).tickets
            print(f"benched {path.name} in {time.perf_counter() - t1:.0f} s", file=sys.stderr)
    clock = "the timing thread's CPU time" if args.clock == "thread" else "wall-clock time"
    print(f"one torch thread, {args.repeats} interleaved repeats of {clock}; ms (median), iqr = interquartile range\n")
    for model in (PAPER, WIDE):
        table([t for t in rows if t.model == model], batches)
        print()
    print("\n".join(checks(rows)))
    print(
        f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; total {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
