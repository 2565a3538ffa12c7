"""Time per epoch of dense weight training, edge-popup and augmented on the paper's MLP or ResNet-20, in one process.

    python benchmarks/speed.py                 # synthetic FashionMNIST-shaped data, 20 epochs each
    python benchmarks/speed.py --real --full   # real FashionMNIST, plus a full 100-epoch extraction
    python benchmarks/speed.py --real --model resnet20 --steps 2 --epochs 1   # ResNet-20, 2 batches an "epoch"

Ratios are measured within one run (interleaved repeats, median) because shared machines are noisy. Wall time
and the process's CPU time (all threads) are both reported: on a loaded machine the CPU time is the steadier one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.data.datasets import Splits, load_splits
from ticketcli.methods.score_training import ScoreTrainer, init_scores, train_scores
from ticketcli.methods.scores import Augmented, EdgePopup
from ticketcli.runs.build import build_net
from ticketcli.seeding import generator
from ticketcli.selection.groups import scope_groups
from ticketcli.selection.scored import Selection
from ticketcli.settings.resolve import build_extract_spec, data_location, merge_settings
from ticketcli.specs.run import DataSpec, MethodSpec


def synthetic_splits(n: int = 5000) -> Splits:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    return Splits(x, y, x[:100], y[:100], x[:100], y[:100], info={"dataset": "synthetic"})


class SortSelection(Selection):
    """Edge-popup's selection as research code usually writes it: a full sort of the scores at every step."""

    def select(self, scores, dtype=torch.bool, aux_fixed=False):
        out, keep = {}, {names[0]: k for names, k in self.budgets}  # one group per parameter
        for name, parts in scores.items():
            flat = parts[0].detach().abs().flatten()
            order = flat.sort().indices  # ascending
            mask = torch.zeros_like(flat, dtype=dtype)
            mask[order[flat.numel() - keep[name] :]] = 1
            out[name] = mask.view_as(parts[0])
        return out


def dense_epoch(net, params, opt, data: Splits, spec: MethodSpec, g: torch.Generator) -> None:
    """One epoch of Adam on all weights, with the forward pass score training uses (BatchNorm on batch statistics)."""
    n = data.y_extract.numel()
    order = torch.randperm(n, generator=g)
    for i in range(0, n, spec.batch_size):
        idx = order[i : i + spec.batch_size]
        loss = F.cross_entropy(net.forward_with(data.x_extract[idx], params), data.y_extract[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


MODELS = {"mlp": None, "resnet20": "resnet20@1x28x28-10"}  # None: the paper's MLP (the default model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20, help="timed epochs per method and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the median is reported")
    ap.add_argument("--real", action="store_true", help="use real FashionMNIST (must be installed)")
    ap.add_argument("--full", action="store_true", help="also time `ticket extract` with the paper's 100 epochs")
    ap.add_argument("--model", default="mlp", choices=list(MODELS), help="the paper's MLP, or ResNet-20 (28x28)")
    ap.add_argument("--steps", type=int, default=None, help="only this many batches an epoch (slow models)")
    ap.add_argument("--kinds", nargs="+", default=None, help="default: all five (ResNet-20: the first four)")
    args = ap.parse_args()

    model = {} if MODELS[args.model] is None else {"model": MODELS[args.model]}
    spec = build_extract_spec(merge_settings(model, None))
    data = load_splits(DataSpec(**data_location(None, False))) if args.real else synthetic_splits()
    if args.steps is not None:
        m = args.steps * MethodSpec().batch_size
        data = Splits(data.x_extract[:m], data.y_extract[:m], data.x_val, data.y_val, data.x_test, data.y_test, {})
    mspec = MethodSpec(epochs=args.epochs)

    def make_runner(kind: str):
        net, _ = build_net(spec.model, spec.init, None)
        g = generator(0, "bench")
        if kind.startswith("dense"):
            params = {n: nn.Parameter(w.clone()) for n, w in net.weights.items()}
            opt = torch.optim.Adam(params.values(), lr=1e-3, fused=kind == "dense")
            return lambda: [dense_epoch(net, params, opt, data, mspec, g) for _ in range(args.epochs)]
        if kind == "edge-popup-sort":
            sel = SortSelection(net, scope_groups(net, mspec, "layer"), parts=1)
        else:
            sel = {"augmented": Augmented, "edge-popup": EdgePopup}[kind]().selection(net, mspec)
        trainer = ScoreTrainer(net, sel, mspec, init_scores(net, sel.parts, g))
        return lambda: train_scores(trainer, data, mspec, g, None)

    # "dense": Adam(fused=True), the same optimiser implementation the score trainer uses;
    # "dense-unfused": torch's default (for-loop) Adam, what most training scripts run.
    # "edge-popup-sort": the same training with a full torch.sort per layer and step (research-code style).
    kinds = (
        args.kinds
        or ["dense", "dense-unfused", "edge-popup", "augmented", "edge-popup-sort"][: 5 if args.model == "mlp" else 4]
    )
    runners = {k: make_runner(k) for k in kinds}
    for k in kinds:  # warm-up
        runners[k]()
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.repeats):
        for k in kinds:
            t0, c0 = time.perf_counter(), time.process_time()
            runners[k]()
            wall[k].append((time.perf_counter() - t0) / args.epochs)
            cpu[k].append((time.process_time() - c0) / args.epochs)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, model {spec.model.to_string()}, "
        f"data {'FashionMNIST' if args.real else 'synthetic'}, {data.y_extract.numel()} examples/epoch, "
        f"batch {mspec.batch_size}, {args.epochs} epochs x {args.repeats} repeats"
    )
    dense, dense_cpu = statistics.median(wall[kinds[0]]), statistics.median(cpu[kinds[0]])
    print(f"{'method':<16} {'ms/epoch':>9} {'x ' + kinds[0]:>8} {'CPU ms/epoch':>13} {'x ' + kinds[0]:>8}")
    for k in kinds:
        m, c = statistics.median(wall[k]), statistics.median(cpu[k])
        print(f"{k:<16} {m * 1e3:9.1f} {m / dense:8.2f} {c * 1e3:13.1f} {c / dense_cpu:8.2f}")

    if args.full:
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "t.safetensors"
            t0 = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ticketcli",
                    "extract",
                    "--method",
                    "augmented",
                    "--sparsity",
                    "0.9",
                    "--seed",
                    "0",
                    "--out",
                    str(out),
                    "--quiet",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            print(
                f"full paper-protocol extraction (augmented, 100 epochs, incl. start-up and data load): "
                f"{time.perf_counter() - t0:.1f} s"
            )


if __name__ == "__main__":
    main()
