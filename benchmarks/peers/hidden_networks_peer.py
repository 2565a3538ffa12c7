"""edge-popup's selection in `ticket` next to GetSubnet of the hidden-networks reference code (Ramanujan et al.
2020, arXiv 1911.13299) on identical scores.

    python benchmarks/peers/hidden_networks_peer.py --repo PATH/TO/hidden-networks [--seeds 7,8,9] [--epochs 10]

PATH is a checkout of the reference repository (allenai/hidden-networks). Its `utils/conv_type.py` GetSubnet (the
per-layer top-k of |S| its Subnet layers apply in every forward pass) is imported from there. The scores are
`ticket`'s own edge-popup scores for the run (the same initialisation, Adam steps and minibatch order as `ticket
extract --method edge-popup`), read at initialisation and after --epochs epochs; both selections are applied to
those same scores. Prints kept weights, Jaccard overlap and test accuracy on the ticket's network side by side.
"""

from __future__ import annotations

import argparse
import math
import sys
import types

import torch
from common import Run, accuracy, arguments, import_from, jaccard, kept, method_generator, row, ticket_run

from ticketcli.methods.score_training import ScoreTrainer, init_scores, train_scores
from ticketcli.methods.scores import EdgePopup


def args_stub() -> types.ModuleType:
    """utils/conv_type.py reads `from args import args`, which parses the command line of the reference's main.py
    at import; GetSubnet itself reads nothing from it, so an empty namespace stands in."""
    stub = types.ModuleType("args")
    stub.args = argparse.Namespace()  # type: ignore[attr-defined]
    return stub


def reference_masks(get_subnet, scores: dict[str, torch.Tensor], density: float) -> dict[str, torch.Tensor]:
    """GetSubnet.apply(|S|, k) per layer, k the kept fraction, as the reference's SubnetConv/SubnetLinear forward."""
    with torch.no_grad():
        return {n: get_subnet.apply(s.abs(), density).bool() for n, s in scores.items()}


def compare(label: str, run: Run, trainer: ScoreTrainer, get_subnet, density: float) -> list[str]:
    scores = {n: parts[0].detach() for n, parts in trainer.scores.items()}
    ours = trainer.masks()
    ref = reference_masks(get_subnet, scores, density)
    per_layer = ", ".join(f"{int(ref[n].sum())}/{int(ours[n].sum())}" for n in ours)
    return [
        row([f"{label}: reference GetSubnet", str(kept(ref)), "1.0000", f"{100 * accuracy(run, ref):.2f}%"]),
        row(
            [
                f"{label}: ticket edge-popup",
                str(kept(ours)),
                f"{jaccard(ours, ref):.4f}",
                f"{100 * accuracy(run, ours):.2f}%",
            ]
        ),
        f"kept per layer, reference/ticket: {per_layer}; ticket's mask inside the reference's: "
        + ("yes" if all(bool((ours[n] <= ref[n]).all()) for n in ours) else "no"),
    ]


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--epochs", type=int, default=10, help="edge-popup epochs before the second comparison")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    conv_type = import_from(args.repo, "utils.conv_type", {"args": args_stub()})
    for seed in map(int, args.seeds.split(",")):
        for s in map(float, args.sparsities.split(",")):
            run = ticket_run(
                {"method": "edge-popup", "sparsity": s, "seed": seed, "dataset": args.dataset, "epochs": args.epochs}
            )
            spec, d = run.spec.method, run.spec.method.density
            method = EdgePopup()
            gen = method_generator(run)  # what ticket extract does: scores first, then the batch order
            trainer = ScoreTrainer(run.net, method.selection(run.net, spec), spec, init_scores(run.net, 1, gen))
            sizes = ", ".join(f"{math.floor(d * w.numel() + 1e-6)}" for w in run.weights.values())
            print(f"\nedge-popup, seed {seed}, sparsity {s}: floor(d*n) per layer {sizes}")
            print(row(["mask", "kept", "Jaccard with the reference", "test accuracy"]))
            print(row(["---"] * 4))
            print("\n".join(compare("initial scores", run, trainer, conv_type.GetSubnet, d)))
            train_scores(trainer, run.splits, spec, gen, None)
            print("\n".join(compare(f"after {spec.epochs} epochs", run, trainer, conv_type.GetSubnet, d)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
