"""Per-step mask computation vs forward+backward+Adam at >= 10^7 masked weights, per top-k selection algorithm.

    python benchmarks/topk_scale.py                          # both models, every algorithm, on CUDA if present
    python benchmarks/topk_scale.py --models mlp --steps 10 --conv-batch 64

Models: `wide-conv6` (conv6 with doubled conv widths 128-128-M-256-256-M-512-512-M and a 1024-1024 head,
3x32x32 inputs, 10 classes: 14.0M masked weights) and `mlp` (3072-2048-2048-1024-10: 12.6M, the worst case for
the ratio: little compute per weight). Methods: edge-popup (1 score part), augmented with frozen auxiliary scores
(the default: weight decay 0 leaves them untouched, so they are ranked and sorted once), augmented with trainable
auxiliary scores (weight decay 5e-4: |T| is recomputed and searched every step). Synthetic data, per-layer top-k
at sparsity 0.9 (augmented density 0.1 of the 2x space).

The mask time is the whole Selection.select call inside ScoreTrainer.step (|S|, the search, the float mask); the
rest of the same step is forward + backward + Adam. After 20 pretraining steps, one trainer per algorithm starts
from the same state and the trainers take steps in turn (so load on a shared machine hits all alike, while the
warm band search sees consecutive steps as in a real run); medians over the timed steps. Every algorithm's masks
are checked equal before timing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ticketcli, not the installed one

import torch  # noqa: E402

from ticketcli.methods.score_training import ScoreTrainer, seeded_scores  # noqa: E402
from ticketcli.methods.scores import Augmented, EdgePopup  # noqa: E402
from ticketcli.models.conv import ConvNet  # noqa: E402
from ticketcli.models.init import init_weights  # noqa: E402
from ticketcli.models.masked import MaskedNet  # noqa: E402
from ticketcli.models.mlp import MLP  # noqa: E402
from ticketcli.seeding import generator  # noqa: E402
from ticketcli.selection.exact import DEFAULT_KTH, KTH_ALGORITHMS  # noqa: E402
from ticketcli.selection.warm import SELECT_ALGORITHMS, TopKSelector  # noqa: E402
from ticketcli.specs.run import InitSpec, MethodSpec  # noqa: E402

WIDE_CONV6 = ("128", "128", "M", "256", "256", "M", "512", "512", "M")
MODELS = {  # name -> (module factory, input shape)
    "wide-conv6": (lambda: ConvNet(WIDE_CONV6, (1024, 1024), (3, 32, 32), 10, bias=False), (3, 32, 32)),
    "mlp": (lambda: MLP((3072, 2048, 2048, 1024, 10), bias=False), (3072,)),
}
METHODS = {  # name -> (method, MethodSpec overrides)
    "edge-popup": (EdgePopup, {}),
    "augmented": (Augmented, {}),
    "augmented+trainable-aux": (Augmented, {"weight_decay": 5e-4}),
}


def build(model: str, device: torch.device) -> MaskedNet:
    """The frozen network with the tool's default init (InitSpec()), on device."""
    module = MODELS[model][0]()
    for p in module.parameters():
        p.requires_grad_(False)
    net = MaskedNet(module)
    net.load_weights(init_weights(module, InitSpec()))
    return net.to(device)


def batch(model: str, size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(size, *MODELS[model][1], generator=g).to(device),
        torch.randint(0, 10, (size,), generator=g).to(device),
    )


MISSES: list[str] = []  # printed after the table


def net_label(net: MaskedNet) -> str:
    return f"{type(net.module).__name__} {masked_count(net) / 1e6:.1f}M"


def masked_count(net: MaskedNet) -> int:
    return sum(net.weights[n].numel() for n in net.names)


def make_trainer(net: MaskedNet, method: str, batch_size: int) -> ScoreTrainer:
    cls, overrides = METHODS[method]
    spec = MethodSpec(batch_size=batch_size, **overrides)
    sel = cls().selection(net, spec)
    return ScoreTrainer(net, sel, spec, *seeded_scores(net, sel.parts, generator(0, "topk-scale")))  # as extract


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench_method(
    net: MaskedNet, method: str, algorithms: list[str], x, y, steps: int, warm: int, pretrain: int, device: torch.device
) -> dict[str, tuple[list[float], list[float], list[float]]]:
    """Per algorithm: the timed steps' mask times, the rest of each step, and the |S| part of the mask time.

    One trainer per algorithm, all started from the same pretrained state, stepped in turn: the steps interleave
    (shared-machine noise hits every algorithm alike) while each trainer, and so the warm band search, sees
    consecutive steps as in a real run. Equal masks keep the trainers on the same trajectory."""
    first = make_trainer(net, method, x.shape[0])
    for _ in range(pretrain):  # past the first steps, where Adam moves every score by ~lr and the threshold jumps
        first.step(x, y)
    state = first.state_dict()
    del first
    trainers, times = {}, {}
    for a in algorithms:
        trainers[a] = make_trainer(net, method, x.shape[0])
        trainers[a].load_state_dict(state)
        trainers[a].selection.topk = TopKSelector(a)
        times[a] = _time_selection(trainers[a].selection, device)
    with torch.no_grad():  # the same bits from every algorithm, on the same scores
        masks = {a: t.selection.select(t.scores, aux_fixed=not t.aux_trains) for a, t in trainers.items()}
    for a in algorithms:
        assert all(torch.equal(masks[a][n], masks[algorithms[0]][n]) for n in masks[a]), f"{a} differs"
    out: dict[str, tuple[list[float], list[float], list[float]]] = {a: ([], [], []) for a in algorithms}
    for i in range(warm + steps):
        for a in algorithms:
            mask_times, rank_times = times[a]
            mask_times.clear()
            rank_times.clear()
            sync(device)
            t0 = time.perf_counter()
            trainers[a].step(x, y)
            sync(device)
            total = time.perf_counter() - t0
            if i >= warm:  # the warm-up steps let the band search learn the threshold's drift
                out[a][0].append(mask_times[0])
                out[a][1].append(total - mask_times[0])
                out[a][2].append(sum(rank_times))
    band = trainers["band"].selection.topk if "band" in trainers else None
    if band is not None and band.searches:
        MISSES.append(
            f"{net_label(net)} {method}: {band.misses} of {band.searches} band searches fell back to a full selection"
        )
    return out


def _time_selection(sel, device: torch.device) -> tuple[list[float], list[float]]:
    """Wrap sel.select and sel.ranked (|S|, and |T| when it trains, inside select) to record their times."""
    select, rank, mask_times, rank_times = sel.select, sel.ranked, [], []

    def timed_select(*args, **kwargs):
        sync(device)
        t0 = time.perf_counter()
        out = select(*args, **kwargs)
        sync(device)
        mask_times.append(time.perf_counter() - t0)
        return out

    def timed_ranked(*args, **kwargs):
        t0 = time.perf_counter()
        out = rank(*args, **kwargs)
        sync(device)
        rank_times.append(time.perf_counter() - t0)
        return out

    sel.select, sel.ranked = timed_select, timed_ranked
    return mask_times, rank_times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument(
        "--algorithms",
        nargs="+",
        default=None,
        choices=SELECT_ALGORITHMS,
        help="default: all (numpy and band only on the CPU)",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--mlp-batch", type=int, default=512, help="the paper's batch")
    ap.add_argument("--conv-batch", type=int, default=32, help="512 takes ~30 s a step on 2 CPU cores")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per algorithm (interleaved)")
    ap.add_argument("--warm", type=int, default=2, help="untimed steps per algorithm before the timed ones")
    ap.add_argument("--pretrain", type=int, default=20, help="untimed training steps before anything is timed")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    algorithms = args.algorithms or [a for a in SELECT_ALGORITHMS if device.type == "cpu" or a not in ("numpy", "band")]
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"{args.pretrain} pretraining steps, then per algorithm {args.warm} untimed + {args.steps} timed steps, "
        "interleaved; medians; synthetic data, sparsity 0.9",
        flush=True,
    )
    rows = []
    header = (
        f"{'model':<11} {'weights':>8} {'batch':>5} {'method':<24} {'algorithm':<9} {'mask ms':>8} "
        f"{'of it |S|':>9} {'fwd+bwd+opt ms':>14} {'mask %':>7}"
    )
    print(header, flush=True)
    for model in args.models:
        net = build(model, device)
        bs = args.mlp_batch if model == "mlp" else args.conv_batch
        x, y = batch(model, bs, device)
        for method in args.methods:
            times = bench_method(net, method, algorithms, x, y, args.steps, args.warm, args.pretrain, device)
            for a in algorithms:
                mask, rest, absolute = (statistics.median(t) * 1e3 for t in times[a])
                rows.append((model, method, a, mask, rest))
                print(
                    f"{model:<11} {masked_count(net) / 1e6:7.1f}M {bs:>5} {method:<24} {a:<9} {mask:8.1f} "
                    f"{absolute:9.1f} {rest:14.1f} {100 * mask / (mask + rest):6.1f}%",
                    flush=True,
                )
    chosen = (
        "band (numpy with trainable auxiliary scores)" if device.type == "cpu" else DEFAULT_KTH.get(device.type, "sort")
    )
    full = [a for a in algorithms if a in KTH_ALGORITHMS]
    if full:
        fastest = {r[:2]: min(s[3] for s in rows if s[:2] == r[:2] and s[2] in full) for r in rows}
        wins = {a: sum(1 for r in rows if r[2] == a and r[3] == fastest[r[:2]]) for a in full}
        best = max(wins, key=wins.get)
        print(
            f"fastest full selection on {device.type}: {best} (fastest in {wins[best]} of "
            f"{len(rows) // len(algorithms)} cases); DEFAULT_KTH[{device.type!r}] = "
            f"{DEFAULT_KTH.get(device.type, 'sort')!r}"
            + ("" if best == DEFAULT_KTH.get(device.type) else f": recommend changing it to {best!r}")
        )
    print(f"per-layer selection used by training on {device.type}: {chosen}")
    print("\n".join(MISSES))


if __name__ == "__main__":
    main()
