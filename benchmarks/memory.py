"""Peak memory per masked weight of extraction (edge-popup, augmented) and dense weight training, against the floor.

    python benchmarks/memory.py                          # paper MLP, wide conv6, ResNet-18; 3 steps per config
    python benchmarks/memory.py --models mlp-paper --configs edge-popup augmented

Each configuration runs in a fresh subprocess: it imports torch and ticketcli, takes one warm-up step of the same
configuration on a tiny MLP (torch's lazy initialisation: the first Adam alone adds ~150 MiB of resident code),
builds the network (weights drawn by the tool's default init) and a synthetic batch, and takes --steps training
steps. The peak resident set of the whole process (VmHWM; on CUDA torch.cuda.max_memory_allocated) is reported
against:

  constant  the peak of the same child that does everything except building the network and the batch: the
            interpreter, torch, ticketcli and their lazy initialisation (measured, per configuration);
  data      the batch (inputs and labels);
  floor     20 bytes per masked weight: float32 weights, scores, the scores' gradients and Adam's two moments (for
            dense training: the frozen network, the trained copy, its gradient and two moments: also 20 bytes).

per weight = (peak - constant - data) / masked weights, and x floor = per weight / 20. Activations of the batch
(and everything transient: the masked-weight products W * H kept for the backward pass, |S|, the top-k search's
byte masks, the allocator's slack) are in the difference; dense weight training shows what the activations alone
cost at the same batch. glibc keeps freed blocks under its (self-raising, up to 32 MiB) mmap threshold in the
heap, so the resident peak also counts memory no tensor holds any more; the second peak column pins the threshold
at 128 KiB (every large tensor its own mapping, returned on free), so that it follows the live tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ticketcli, not the installed one

import torch  # noqa: E402
from topk_scale import MODELS as SCALE_MODELS  # noqa: E402
from topk_scale import make_trainer, masked_count  # noqa: E402

from ticketcli.models.build import build_model  # noqa: E402
from ticketcli.models.init import init_weights  # noqa: E402
from ticketcli.models.masked import MaskedNet  # noqa: E402
from ticketcli.models.mlp import MLP  # noqa: E402
from ticketcli.models.registry import parse_model  # noqa: E402
from ticketcli.specs.run import InitSpec  # noqa: E402
from ticketcli.train import WeightOptim, WeightTrainer  # noqa: E402

CONFIGS = ("dense", "edge-popup", "augmented", "augmented+trainable-aux")
FLOOR = 20  # bytes per masked weight: weights, scores, their gradients, Adam's two moments (float32)
# name -> (module factory, input shape, default batch)
MODELS = {
    "mlp-paper": (lambda: build_model(parse_model("mlp:784-256-256-256-10")), (1, 28, 28), 512),
    "wide-conv6": (SCALE_MODELS["wide-conv6"][0], (3, 32, 32), 32),
    "resnet18": (lambda: build_model(parse_model("resnet18@3x32x32-10")), (3, 32, 32), 32),
    "mlp-12M": (SCALE_MODELS["mlp"][0], (3072,), 512),
}


def peak_rss() -> int:
    """The process's peak resident set so far (VmHWM; ru_maxrss where /proc is unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def build(model: str, device: torch.device) -> MaskedNet:
    module = MODELS[model][0]()
    for p in module.parameters():
        p.requires_grad_(False)
    net = MaskedNet(module)
    net.load_weights(init_weights(module, InitSpec()))
    return net.to(device)


def trainer_for(config: str, net: MaskedNet, batch_size: int):
    return WeightTrainer(net, None, WeightOptim()) if config == "dense" else make_trainer(net, config, batch_size)


def warm_up(config: str, device: torch.device) -> None:
    """One step of the same configuration on a tiny MLP, so that lazy initialisation lands in the constant."""
    module = MLP((8, 4, 2), bias=False)
    for p in module.parameters():
        p.requires_grad_(False)
    net = MaskedNet(module).to(device)
    trainer_for(config, net, 4).step(torch.randn(4, 8, device=device), torch.tensor([0, 1, 0, 1], device=device))


def one(config: str, model: str, batch_size: int, steps: int, device: torch.device, empty: bool) -> dict:
    """Run one configuration (or, `empty`, everything but the network and the batch) and report its peak."""
    warm_up(config, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    n = data = 0
    if not empty:
        net = build(model, device)
        g = torch.Generator().manual_seed(0)
        x = torch.randn(batch_size, *MODELS[model][1], generator=g).to(device)
        y = torch.randint(0, 10, (batch_size,), generator=g).to(device)
        n, data = masked_count(net), x.numel() * x.element_size() + y.numel() * y.element_size()
        trainer = trainer_for(config, net, batch_size)
        for _ in range(steps):
            trainer.step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak, how = torch.cuda.max_memory_allocated(device), "cuda max_memory_allocated"
    else:
        peak, how = peak_rss(), "VmHWM"
    return {"config": config, "model": model, "weights": n, "data_bytes": data, "peak_bytes": peak, "how": how}


def child(args: argparse.Namespace, config: str, model: str, batch: int, empty: bool, env: dict) -> dict:
    cmd = [sys.executable, __file__, "--one", config, "--models", model, "--batch", str(batch)]
    cmd += ["--steps", str(args.steps), "--device", args.device] + (["--empty"] if empty else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **env}).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mlp-paper", "wide-conv6", "resnet18"], choices=list(MODELS))
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS[:3]), choices=CONFIGS)
    ap.add_argument("--batch", type=int, default=None, help="default: 512 for the MLPs, 32 for the conv nets")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--allocators", nargs="+", default=["default", "mmap"], choices=["default", "mmap"])
    ap.add_argument("--one", choices=CONFIGS, help=argparse.SUPPRESS)  # the child process's configuration
    ap.add_argument("--empty", action="store_true", help=argparse.SUPPRESS)  # the child that measures the constant
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.one:
        model = args.models[0]
        batch = args.batch or MODELS[model][2]
        print(json.dumps(one(args.one, model, batch, args.steps, device, args.empty)))
        return
    mb = 2**20
    allocators = {"default": {}, "mmap": {"MALLOC_MMAP_THRESHOLD_": "131072"}}
    envs = {a: allocators[a] for a in args.allocators} if device.type == "cpu" else {"": {}}
    print(
        f"torch {torch.__version__}, device {device}, {args.steps} steps, one fresh process per configuration; "
        f"floor {FLOOR} B/weight; per weight = (peak - constant - data) / weights"
    )
    print(
        f"{'model':<11} {'config':<24} {'weights':>8} {'batch':>5} {'data MiB':>8} "
        + " ".join(f"{'const MiB ' + e:>17} {'peak MiB':>8} {'B/weight':>8} {'x floor':>7}" for e in envs)
    )
    for model in args.models:
        batch = args.batch or MODELS[model][2]
        for config in args.configs:
            cells = []
            for extra in envs.values():
                const = child(args, config, model, batch, True, extra)["peak_bytes"]
                r = child(args, config, model, batch, False, extra)
                per = (r["peak_bytes"] - const - r["data_bytes"]) / r["weights"]
                cells.append(f"{const / mb:17.0f} {r['peak_bytes'] / mb:8.0f} {per:8.1f} {per / FLOOR:7.2f}")
            print(
                f"{model:<11} {config:<24} {r['weights'] / 1e6:7.2f}M {batch:>5} {r['data_bytes'] / mb:8.1f} "
                + " ".join(cells),
                flush=True,
            )


if __name__ == "__main__":
    main()
