"""Data-parallel extraction (torchrun, 2 CPU processes, gloo) against the single-process run, paper protocol.

    python benchmarks/ddp_agreement.py                      # augmented and edge-popup, seeds 0,1,2, FashionMNIST
    python benchmarks/ddp_agreement.py --methods augmented --seeds 0 --epochs 20 --resume-check

For each (method, seed): mask agreement between the 1-process and the 2-process ticket, both test accuracies,
and wall times (1 process with --threads threads vs 2 processes with 1 thread each). With --resume-check it also
interrupts a 2-process run (SIGTERM to torchrun) once a checkpoint exists, resumes it, and checks that the
resumed ticket's masks equal an uninterrupted 2-process run's bit for bit.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ticketcli import ticket as ticket_io
from ticketcli.checkpoint import describe

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]


def extract(out: Path, method: str, seed: int, epochs: int, procs: int, threads: int, extra=()) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    head = [*TORCHRUN, str(procs)] if procs > 1 else [sys.executable]
    cmd = [*head, "-m", "ticketcli", "extract", "--method", method, "--seed", str(seed), "--epochs", str(epochs),
           "--sparsity", "0.9", "--device", "cpu", "--out", str(out), "--force", "--quiet", *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return time.perf_counter() - t0


def agreement(a: ticket_io.Ticket, b: ticket_io.Ticket) -> float:
    total = sum(m.numel() for m in a.masks.values())
    return sum(int((a.masks[n] == b.masks[n]).sum()) for n in a.masks) / total


def resume_check(d: Path, method: str, epochs: int) -> None:
    full, cut = d / "full.safetensors", d / "cut.safetensors"
    extract(full, method, 0, epochs, 2, 1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*TORCHRUN, "2", "-m", "ticketcli", "extract", "--method", method, "--seed", "0", "--epochs", str(epochs),
           "--sparsity", "0.9", "--device", "cpu", "--out", str(cut), "--quiet", "--checkpoint-every", "1"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ckpt = cut.with_name(cut.name + ".ckpt")
    while not ckpt.exists() and p.poll() is None:
        time.sleep(0.2)
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    print(f"interrupted: torchrun exit {p.returncode}; rank 0 said: {lines[0] if lines else '(nothing)'}")
    print(f"before resuming: {describe(ckpt)}")
    extract(cut, method, 0, epochs, 2, 1, extra=("--checkpoint-every", "1", "--resume"))
    a, b = ticket_io.load(full), ticket_io.load(cut)
    same = all(bool((a.masks[n] == b.masks[n]).all()) for n in a.masks)
    print(f"resumed 2-process ticket equals the uninterrupted one bit for bit: {same}; "
          f"test {b.metrics['test']['accuracy']:.4f} vs {a.metrics['test']['accuracy']:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="augmented,edge-popup")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="threads of the single-process run")
    ap.add_argument("--resume-check", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print(f"{'method':<11} {'seed':>4} {'agree %':>8} {'1-proc test %':>13} {'2-proc test %':>13} "
              f"{'achieved 1/2 %':>15} {'1-proc s':>8} {'2-proc s':>8}")
        for method in args.methods.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                t1 = extract(d / "one.safetensors", method, seed, args.epochs, 1, args.threads)
                t2 = extract(d / "two.safetensors", method, seed, args.epochs, 2, 1)
                a, b = ticket_io.load(d / "one.safetensors"), ticket_io.load(d / "two.safetensors")
                print(f"{method:<11} {seed:>4} {100 * agreement(a, b):>8.3f} "
                      f"{100 * a.metrics['test']['accuracy']:>13.2f} {100 * b.metrics['test']['accuracy']:>13.2f} "
                      f"{100 * a.sparsity['achieved']:>7.3f}/{100 * b.sparsity['achieved']:<7.3f} "
                      f"{t1:>8.1f} {t2:>8.1f}", flush=True)
        if args.resume_check:
            resume_check(d, args.methods.split(",")[0], args.epochs)


if __name__ == "__main__":
    main()
