"""Data-parallel extraction (torchrun, 2 CPU processes, gloo) against the single-process run, paper protocol.

    python benchmarks/ddp_agreement.py                      # augmented and edge-popup, seeds 0,1,2, FashionMNIST
    python benchmarks/ddp_agreement.py --methods augmented --seeds 0 --epochs 20 --resume-check

For each (method, seed): mask agreement between the 1-process and the 2-process ticket, both test accuracies,
and wall times (1 process with --threads threads vs 2 processes with 1 thread each). With --emulate, a control:
one process computing the two shards' loss sum exactly as the ranks do. With --resume-check it also
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

from ticketcli.files.checkpoint import describe
from ticketcli.ticketfile import ticket as ticket_io

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]


def extract(out: Path, method: str, seed: int, epochs: int, procs: int, threads: int, extra=()) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    head = [*TORCHRUN, str(procs)] if procs > 1 else [sys.executable]
    cmd = [
        *head,
        "-m",
        "ticketcli",
        "extract",
        "--method",
        method,
        "--seed",
        str(seed),
        "--epochs",
        str(epochs),
        "--sparsity",
        "0.9",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--force",
        "--quiet",
        *extra,
    ]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return time.perf_counter() - t0


def emulate(out: Path, method: str, seed: int, epochs: int) -> None:
    """In a fresh process: one process computing the 2-shard loss exactly as the 2 DDP ranks do together (two
    half-batch forward passes, summed, / global batch). Equal bits to the 2-process run mean that any difference
    from the 1-process run is the gradient's summation order, not data parallelism."""
    code = f"""
import torch, torch.nn.functional as F
from ticketcli.runtime import distributed
from ticketcli.runs import extract as runs_extract
from ticketcli.settings.resolve import build_extract_spec, merge_settings

def step(forward, x, y):
    parts = [(forward(xs), ys) for xs, ys in zip(x.tensor_split(2), y.tensor_split(2))]
    loss = sum(F.cross_entropy(l, ys, reduction="sum") for l, ys in parts) / y.numel()
    return loss, float(loss.detach()), sum(int((l.argmax(1) == ys).sum()) for l, ys in parts)

torch.set_num_threads(1)
distributed.cross_entropy_step = step
spec = build_extract_spec(merge_settings(dict(method={method!r}, seed={seed}, epochs={epochs}, sparsity=0.9,
                                              device="cpu"), None))
runs_extract.extract_ticket(spec, out={str(out)!r}, overwrite=True)
"""
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def agreement(a: ticket_io.Ticket, b: ticket_io.Ticket) -> float:
    total = sum(m.numel() for m in a.masks.values())
    return sum(int((a.masks[n] == b.masks[n]).sum()) for n in a.masks) / total


def resume_check(d: Path, method: str, epochs: int) -> None:
    full, cut = d / "full.safetensors", d / "cut.safetensors"
    extract(full, method, 0, epochs, 2, 1)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        *TORCHRUN,
        "2",
        "-m",
        "ticketcli",
        "extract",
        "--method",
        method,
        "--seed",
        "0",
        "--epochs",
        str(epochs),
        "--sparsity",
        "0.9",
        "--device",
        "cpu",
        "--out",
        str(cut),
        "--quiet",
        "--checkpoint-every",
        "1",
    ]
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
    print(
        f"resumed 2-process ticket equals the uninterrupted one bit for bit: {same}; "
        f"test {b.metrics['test']['accuracy']:.4f} vs {a.metrics['test']['accuracy']:.4f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="augmented,edge-popup")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="threads of the single-process run")
    ap.add_argument("--resume-check", action="store_true")
    ap.add_argument(
        "--emulate", action="store_true", help="also run the 2-shard loss in one process and compare it with both runs"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        print(
            f"{'method':<11} {'seed':>4} {'agree %':>8} {'1-proc test %':>13} {'2-proc test %':>13} "
            f"{'achieved 1/2 %':>15} {'1-proc s':>8} {'2-proc s':>8}"
            + (f" {'emulated=2-proc %':>17} {'emulated=1-proc %':>17}" if args.emulate else "")
        )
        for method in args.methods.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                t1 = extract(d / "one.safetensors", method, seed, args.epochs, 1, args.threads)
                t2 = extract(d / "two.safetensors", method, seed, args.epochs, 2, 1)
                a, b = ticket_io.load(d / "one.safetensors"), ticket_io.load(d / "two.safetensors")
                print(
                    f"{method:<11} {seed:>4} {100 * agreement(a, b):>8.3f} "
                    f"{100 * a.metrics['test']['accuracy']:>13.2f} {100 * b.metrics['test']['accuracy']:>13.2f} "
                    f"{100 * a.sparsity['achieved']:>7.3f}/{100 * b.sparsity['achieved']:<7.3f} "
                    f"{t1:>8.1f} {t2:>8.1f}",
                    end="",
                    flush=True,
                )
                if args.emulate:
                    emulate(d / "emu.safetensors", method, seed, args.epochs)
                    e = ticket_io.load(d / "emu.safetensors")
                    print(f" {100 * agreement(e, b):>17.3f} {100 * agreement(e, a):>17.3f}", end="")
                print(flush=True)
        if args.resume_check:
            resume_check(d, args.methods.split(",")[0], args.epochs)


if __name__ == "__main__":
    main()
