"""Peak memory of double-scoring (augmented) vs edge-popup vs dense weight training at >= 10^7 weights.

    python benchmarks/memory.py                        # the 12.6M-weight MLP, batch 512, 3 steps per config
    python benchmarks/memory.py --model wide-conv6 --batch 32

Each configuration runs in a fresh subprocess. CPU: the peak resident set (VmHWM, reset through
/proc/self/clear_refs after the model and the batch are built; ru_maxrss where that is unavailable) minus the
resident set at that point (after one warm-up step on a tiny model, so that torch's lazy initialisation is not
counted). CUDA: torch.cuda.max_memory_allocated minus the allocation after building. The
expected column adds up the float32 tensors each configuration must hold at its peak (n = masked weights):

  dense:            trained weight copy, its gradient, Adam's two moments                  = 16n bytes
  edge-popup:       S, S.grad, Adam's two moments, the 0/1 float mask, W*M (kept for the
                    backward pass), dL/d(W*M) and dL/dS of the largest layer in the backward = 24n + 8 max_layer
  augmented:        edge-popup + T, the cached |T| (Selection.frozen) and the sorted copy of
                    |T| the band search bisects (TopKSelector.sorted)                        = 36n + 8 max_layer
  +trainable aux:   edge-popup + T, T.grad (zeros), T's Adam moments, |T| each step          = 44n + 8 max_layer

Activations (batch-dependent), |S| and the band search's byte masks are transient and not in the sum; the
difference shows them and the allocator's slack.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ticketcli, not the installed one

import torch  # noqa: E402
from topk_scale import MODELS, batch, build, make_trainer, masked_count  # noqa: E402

from ticketcli.models import MLP, MaskedNet  # noqa: E402
from ticketcli.train import WeightOptim, WeightTrainer  # noqa: E402

CONFIGS = ("dense", "edge-popup", "augmented", "augmented+trainable-aux")
FLOAT = 4


def expected_bytes(config: str, n: int, largest: int) -> int:
    backward = 2 * largest * FLOAT  # dL/d(W*M) and dL/dS of one layer at a time
    base = 6 * n * FLOAT + backward  # S, S.grad, m, v, float mask, W*M
    return {
        "dense": 4 * n * FLOAT,
        "edge-popup": base,
        "augmented": base + 3 * n * FLOAT,
        "augmented+trainable-aux": base + 5 * n * FLOAT,
    }[config]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (Linux >= 4.0)
        return True
    except OSError:
        return False


def peak_rss(reset: bool) -> int:
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def trainer_for(config: str, net: MaskedNet, batch_size: int):
    return WeightTrainer(net, None, WeightOptim()) if config == "dense" else make_trainer(net, config, batch_size)


def warm_up(config: str, device: torch.device) -> None:
    """One step of the same configuration on a tiny MLP: torch's lazy imports and library initialisation
    (constructing the first Adam alone adds ~150 MiB of resident code and data) land before the baseline."""
    module = MLP((8, 4, 2), bias=False)
    for p in module.parameters():
        p.requires_grad_(False)
    net = MaskedNet(module).to(device)
    trainer_for(config, net, 4).step(torch.randn(4, 8, device=device), torch.tensor([0, 1, 0, 1], device=device))


def one(config: str, model: str, batch_size: int, steps: int, device: torch.device) -> dict:
    warm_up(config, device)
    net = build(model, device)
    x, y = batch(model, batch_size, device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    else:
        base, reset = rss(), reset_peak()
    trainer = trainer_for(config, net, batch_size)
    for _ in range(steps):
        trainer.step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        how = "cuda max_memory_allocated"
    else:
        peak = peak_rss(reset) - base
        how = "VmHWM after clear_refs" if reset else "ru_maxrss"
    n = masked_count(net)
    largest = max(net.weights[k].numel() for k in net.names)
    return {
        "config": config,
        "model": model,
        "weights": n,
        "batch": batch_size,
        "steps": steps,
        "peak_bytes": peak,
        "expected_bytes": expected_bytes(config, n, largest),
        "how": how,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp", choices=list(MODELS))
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)  # the child process's configuration
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.one:
        print(json.dumps(one(args.one, args.model, args.batch, args.steps, device)))
        return
    mb = 2**20
    print(
        f"torch {torch.__version__}, device {device}, model {args.model}, batch {args.batch}, {args.steps} steps, "
        f"one fresh process per configuration"
    )
    # glibc keeps freed blocks under its (self-raising, up to 32 MiB) mmap threshold in the heap, so the resident
    # peak also counts memory no tensor holds any more; with the threshold pinned at 128 KiB every large tensor
    # is its own mapping, returned on free, and the resident peak follows the live tensors.
    envs = {"default": {}, "mmap": {"MALLOC_MMAP_THRESHOLD_": "131072"}} if device.type == "cpu" else {"": {}}
    print(
        f"{'config':<24} {'weights':>8} "
        + " ".join(f"{'peak MiB' + (' ' + e if e else ''):>15}" for e in envs)
        + f" {'expected MiB':>12} {'last/expected':>13}  measured by"
    )
    for config in CONFIGS:
        peaks = []
        for extra in envs.values():
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    config,
                    "--model",
                    args.model,
                    "--batch",
                    str(args.batch),
                    "--steps",
                    str(args.steps),
                    "--device",
                    args.device,
                ],
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, **extra},
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            peaks.append(r["peak_bytes"])
        print(
            f"{config:<24} {r['weights'] / 1e6:7.1f}M "
            + " ".join(f"{p / mb:15.0f}" for p in peaks)
            + f" {r['expected_bytes'] / mb:12.0f} {peaks[-1] / r['expected_bytes']:13.2f}  {r['how']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
