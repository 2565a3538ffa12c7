"""SNIP, GraSP and SynFlow of `ticket` next to the Synaptic-Flow reference code (Tanaka et al. 2020, arXiv
2006.05467) on identical weights and minibatches.

    python benchmarks/peers/synflow_peer.py --repo PATH/TO/Synaptic-Flow [--seeds 7,8,9] [--sparsities 0.9,0.95]

PATH is a checkout of the reference repository (ganguli-lab/Synaptic-Flow). Its `Pruners/pruners.py` scores and
masks, `Utils/generator.py`'s masked_parameters, `Layers/layers.py`'s masked Linear and `prune.py`'s prune_loop
are imported from there and run on the ticket's MLP: its Linear layers are the reference's masked Linear holding
the ticket's initial weights (the same tensors `ticket extract` fingerprints), and the minibatches are the ones
`ticket` draws (the first of its collections for the reference, whose GraSP uses one collection for g and Hg).

For each seed and sparsity it prints kept weights, Jaccard overlap with the reference's mask and test accuracy
on the ticket's network, side by side, and two diagnostics: ticket's selection (floor(d*N)) applied to the
reference's own scores, and how close the scores are (relative error up to a positive scale).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types

import torch
from common import (
    Run,
    accuracy,
    arguments,
    as_masks,
    collections,
    flat,
    import_from,
    jaccard,
    kept,
    method_generator,
    reference_mlp,
    relative_error_up_to_scale,
    row,
    ticket_run,
)
from torch import nn

from ticketcli.methods import METHODS
from ticketcli.methods.registry import option
from ticketcli.methods.saliency import grasp_scores, snip_scores, synflow_scores
from ticketcli.selection.groups import Group, power_schedule, restricted, scope_groups, select

CPU = torch.device("cpu")


def tqdm_stub() -> types.ModuleType:
    """prune.py imports tqdm for a progress bar only; the identity stands in for it."""
    stub = types.ModuleType("tqdm")
    stub.tqdm = lambda it, *a, **k: it  # type: ignore[attr-defined]
    return stub


class Reference:
    def __init__(self, repo):
        self.pruners = import_from(repo, "Pruners.pruners")
        self.generator = import_from(repo, "Utils.generator")
        self.layers = import_from(repo, "Layers.layers")
        self.prune = import_from(repo, "prune", {"tqdm": tqdm_stub()})

    def model(self, run: Run, dtype: torch.dtype = torch.float32) -> nn.Sequential:
        return reference_mlp(self.layers.Linear, run, dtype)

    def pruner(self, cls_name: str, model: nn.Module):
        return getattr(self.pruners, cls_name)(self.generator.masked_parameters(model))

    def masks(self, run: Run, pruner) -> dict[str, torch.Tensor]:
        return as_masks(run, [m for m, _ in pruner.masked_parameters])

    def scores(self, run: Run, pruner) -> dict[str, torch.Tensor]:
        return {n: pruner.scores[id(p)] for n, (_, p) in zip(run.net.names, pruner.masked_parameters)}


def ticket_masks(run: Run, **options) -> dict[str, torch.Tensor]:
    """The masks `ticket extract` computes for this run (with these method options changed)."""
    spec = dataclasses.replace(run.spec.method, **options)
    method = METHODS.get(spec.name).load()()
    return method.extract(run.net, run.splits, spec, device=CPU, generator=method_generator(run), progress=None).masks


def line(label: str, masks, ref, run: Run) -> str:
    return row([label, str(kept(masks)), f"{jaccard(masks, ref):.4f}", f"{100 * accuracy(run, masks):.2f}%"])


def snip(ref: Reference, run: Run, d: float) -> list[str]:
    batches = collections(run, 1)[0]
    model = ref.model(run)
    pruner = ref.pruner("SNIP", model)
    pruner.score(model, nn.CrossEntropyLoss(), batches, CPU)
    r_scores = ref.scores(run, pruner)
    pruner.mask(d, "global")
    r = ref.masks(run, pruner)
    ours = ticket_masks(run)
    err = relative_error_up_to_scale(flat(snip_scores(run.net, batches)), flat(r_scores))
    return [
        line("reference SNIP", r, r, run),
        line("ticket snip", ours, r, run),
        line(
            "ticket's floor(d*N) top-k on the reference's scores",
            select(r_scores, scope_groups(run.net, run.spec.method, "global")),
            r,
            run,
        ),
        f"scores: relative error up to a positive scale {err:.1e}",
    ]


def grasp(ref: Reference, run: Run, d: float) -> list[str]:
    first = collections(run, 1)[0]
    model = ref.model(run)
    pruner = ref.pruner("GraSP", model)
    pruner.score(model, nn.CrossEntropyLoss(), first, CPU)
    r_scores = ref.scores(run, pruner)
    pruner.mask(d, "global")
    r = ref.masks(run, pruner)
    ours_shared = grasp_scores(run.net, first, first, option(run.spec.method, "grasp_temperature"), "original")
    err = relative_error_up_to_scale(flat(ours_shared), flat(r_scores))
    out = [line("reference GraSP (one collection)", r, r, run)]
    for direction in ("paper", "original"):
        for data in ("separate", "shared"):
            masks = ticket_masks(run, grasp_direction=direction, grasp_data=data)
            out.append(line(f"ticket grasp --grasp-direction {direction} --grasp-data {data}", masks, r, run))
    negated = {n: -s for n, s in r_scores.items()}
    groups = scope_groups(run.net, run.spec.method, "global")
    out.append(line("ticket's top-k on the reference's scores", select(r_scores, groups), r, run))
    out.append(line("ticket's top-k on the NEGATED reference's scores", select(negated, groups), r, run))
    out.append(f"scores: θ⊙Hg (shared data) vs the reference's, relative error up to a positive scale {err:.1e}")
    return out


def reference_synflow(ref: Reference, run: Run, d: float, rounds: int, dtype: torch.dtype):
    """prune.prune_loop with the SynFlow pruner, exponential schedule, global scope (the reference's defaults)."""
    model = ref.model(run, dtype)
    pruner = ref.pruner("SynFlow", model)
    batches = [(run.splits.x_extract[:1].to(dtype), run.splits.y_extract[:1])]
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # the reference's all-ones input is made with the default dtype
    try:
        pruner.score(model, nn.CrossEntropyLoss(), batches, CPU)
        first = ref.scores(run, pruner)
        first = {n: s.clone() for n, s in first.items()}
        for m, _ in pruner.masked_parameters:
            m.fill_(1.0)
        ref.prune.prune_loop(model, None, pruner, batches, CPU, d, "exponential", "global", rounds)
    finally:
        torch.set_default_dtype(old)
    return ref.masks(run, pruner), first


def ticket_synflow_reference_count(run: Run, d: float, rounds: int) -> dict[str, torch.Tensor]:
    """ticket's SynFlow loop with the reference's keep count per round, N - int((1 - d_r) * N) (= ceil(d_r * N)
    but for float rounding), instead of floor(d_r * N)."""
    masks = {n: torch.ones_like(run.weights[n], dtype=torch.bool) for n in run.net.names}
    total = sum(m.numel() for m in masks.values())
    groups = [Group(tuple(run.net.names), d)]
    for r in range(1, rounds + 1):
        scores = synflow_scores(run.net, {n: m.double() for n, m in masks.items()}, run.splits.x_extract[:1])
        keep = total - int((1.0 - power_schedule(r, rounds)(d)) * total)
        masks = select(restricted(scores, masks), groups, lambda _d, k=keep: (k + 0.5) / total)
    return masks


def synflow(ref: Reference, run: Run, d: float, rounds: int, dtype: torch.dtype) -> list[str]:
    r, first = reference_synflow(ref, run, d, rounds, dtype)
    ours = ticket_masks(run)
    ones = {n: torch.ones_like(run.weights[n], dtype=torch.float64) for n in run.net.names}
    s = synflow_scores(run.net, ones, run.splits.x_extract[:1])
    a, b = flat(s), flat(first)
    same = (
        "bitwise equal"
        if torch.equal(a, b)
        else f"max relative difference {float(((a - b).abs() / a.abs().clamp_min(1e-300)).max()):.1e}"
    )
    return [
        line(f"reference SynFlow ({str(dtype).removeprefix('torch.')}, {rounds} rounds)", r, r, run),
        line("ticket synflow (float64)", ours, r, run),
        line("ticket synflow with the reference's keep count", ticket_synflow_reference_count(run, d, rounds), r, run),
        f"first-round scores vs the reference's: {same}",
    ]


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--methods", default="snip,grasp,synflow")
    ap.add_argument("--rounds", type=int, default=100, help="SynFlow rounds (both)")
    ap.add_argument(
        "--synflow-dtype",
        choices=("float32", "float64"),
        default="float64",
        help="the reference's SynFlow precision (its code runs float32; ticket always float64)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ref = Reference(args.repo)
    dtype = getattr(torch, args.synflow_dtype)
    for method in args.methods.split(","):
        for seed in map(int, args.seeds.split(",")):
            for s in map(float, args.sparsities.split(",")):
                settings = {"method": method, "sparsity": s, "seed": seed, "dataset": args.dataset}
                if method == "synflow":
                    settings["synflow_rounds"] = args.rounds
                run = ticket_run(settings)
                d = run.spec.method.density
                total = sum(w.numel() for w in run.weights.values())
                print(
                    f"\n{method}, seed {seed}, sparsity {s}: N = {total}, floor(d*N) = {math.floor(d * total + 1e-6)}"
                )
                print(row(["mask", "kept", "Jaccard with the reference", "test accuracy"]))
                print(row(["---"] * 4))
                fn = {"snip": snip, "grasp": grasp}.get(method)
                lines = fn(ref, run, d) if fn else synflow(ref, run, d, args.rounds, dtype)
                print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
