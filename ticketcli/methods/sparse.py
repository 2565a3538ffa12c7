"""Sparse-training baselines (docs/method.md): IMP, SET and RigL train weights while they find a topology.

They are rewound-topology baselines: only the mask is kept, and the ticket is evaluated on the original init.
The trained weights come back as ExtractResult.trained_weights so that the run can report the trained sparse
network's accuracy for information. Weights train with Adam at --weight-lr (1e-3), batch --batch-size (512).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from ticketcli.data.datasets import Splits
from ticketcli.errors import UsageError
from ticketcli.methods.base import Context, ExtractResult, Masks, Method, Progress, dense_masks
from ticketcli.methods.random import random_masks
from ticketcli.methods.registry import option
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import Group, power_schedule, restricted, select, select_group
from ticketcli.specs.run import MethodSpec
from ticketcli.train import WeightOptim, WeightTrainer, train_on_extract


def weight_optim(spec: MethodSpec) -> WeightOptim:
    return WeightOptim(name="adam", lr=spec.weight_lr, betas=spec.betas, eps=spec.eps, weight_decay=spec.weight_decay)


def constant(masks: Masks) -> Callable[[], Masks]:
    """A callable that returns these masks (the round's masks while IMP trains under them)."""
    return lambda: masks


def epoch_reporter(
    progress: Progress | None, epochs: int, masks: Callable[[], Masks], offset: int = 0
) -> Callable[[dict[str, Any]], None] | None:
    """train_weights' on_epoch -> the extract progress callback (epoch numbers continue across IMP rounds)."""
    if progress is None:
        return None

    def on_epoch(record: dict[str, Any]) -> None:
        m = masks()
        each = {n: int(t.sum()) for n, t in m.items()}
        kept, total = sum(each.values()), sum(t.numel() for t in m.values())
        densities = {n: k / max(m[n].numel(), 1) for n, k in each.items()}  # per parameter: for --log-to
        progress(
            {
                **record,
                "epoch": offset + record["epoch"],
                "epochs": epochs,
                "sparsity": 1 - kept / total,
                "densities": densities,
            }
        )

    return on_epoch


class _SparseTraining(Method):
    trains = frozenset({"weights"})  # returned as trained_weights, for information
    resumable = False
    data_parallel = False
    uses_epochs = True
    seeded = True  # batch order (and SET/RigL's random start) from the generator
    default_scope = "global"  # one top-k over all parameters (Appendix B), per layer with --layer-densities
    score_init: ClassVar[dict[str, str] | None] = None  # movement, a subclass, has scores


class IMP(_SparseTraining):
    """Round r of R: reset to the init, train epochs / R epochs under the mask, prune globally by magnitude to
    density d^(r/R) (geometric schedule). Pruned weights are exactly zero and never return."""

    name = "imp"

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        rounds = option(spec, "imp_rounds")
        if spec.epochs % rounds:
            raise UsageError(
                f"--epochs {spec.epochs} must be a multiple of --imp-rounds {rounds} "
                "(each round trains epochs / rounds epochs; the paper: 100 = 5 x 20)"
            )
        groups = self.groups(net, spec)
        per_round = spec.epochs // rounds
        masks = dense_masks(net)
        round_masks: list[Masks] = []
        for r in range(1, rounds + 1):
            trainer = WeightTrainer(net, masks, weight_optim(spec))  # built from net.weights: the original init
            on_epoch = epoch_reporter(ctx.progress, spec.epochs, constant(masks), (r - 1) * per_round)
            train_on_extract(trainer, data, spec, ctx.generator, epochs=per_round, on_epoch=on_epoch)
            trained = trainer.weights()
            magnitude = restricted({n: w.abs() for n, w in trained.items()}, masks)
            masks = select(magnitude, groups, power_schedule(r, rounds))
            round_masks.append(masks)
        # the last round's weights (trained at the previous density), pruned
        return ExtractResult(masks, trained_weights=trained, trace={"round_masks": round_masks})


def prune_and_regrow(
    masks: Masks,
    weights: dict[str, torch.Tensor],
    grow_scores: dict[str, torch.Tensor],
    groups: list[Group],
    fraction: float,
) -> tuple[Masks, Masks]:
    """Drop floor(fraction * active) smallest-|w| active entries per group, then grow as many of the highest
    grow_scores among the entries inactive after the drop. Returns (new masks, grown entries)."""
    new, grown = {}, {}
    for names, _ in groups:
        active = sum(int(masks[n].sum()) for n in names)
        k = math.floor(fraction * active)
        magnitude = restricted({n: weights[n].abs() for n in names}, masks)
        kept = select_group({n: [s] for n, s in magnitude.items()}, names, active - k)
        del magnitude
        grow = restricted({n: grow_scores[n] for n in names}, {n: ~kept[n] for n in names})
        grew = select_group({n: [s] for n, s in grow.items()}, names, k)
        del grow
        for n in names:
            new[n], grown[n] = kept[n] | grew[n], grew[n]
    return new, grown


def masks_of(trainer: WeightTrainer) -> Masks:
    """The trainer's current 0/1 float masks (SET and RigL always train under masks)."""
    if trainer.masks is None:
        raise RuntimeError("a dynamic-sparse trainer has no masks")
    return trainer.masks


def random_growth(
    trainer: WeightTrainer, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """SET's regrowth: uniform scores drawn on the CPU from the run's generator."""
    return {n: torch.rand(p.shape, generator=generator).to(p.device) for n, p in trainer.params.items()}


def gradient_growth(
    trainer: WeightTrainer, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """RigL's regrowth: |dL/d(W*M)| on the current minibatch, masked entries included (the dense gradient)."""
    return {n: g.abs() for n, g in trainer.dense_gradient(x, y).items()}


Growth = Callable[[WeightTrainer, torch.Tensor, torch.Tensor, torch.Generator], dict[str, torch.Tensor]]


class _DynamicSparse(_SparseTraining):
    """A random mask at the target density; every --regrow-every steps prune-and-regrow; regrown weights start at 0.

    No update follows the very last step: its regrown weights would never be trained."""

    grow_scores: Growth  # (trainer, x, y, generator) -> the scores regrowth picks the highest of

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        total_steps = spec.epochs * math.ceil(len(data.y_extract) / spec.batch_size)
        every, fraction = option(spec, "regrow_every"), option(spec, "regrow_fraction")
        groups = self.groups(net, spec)
        trainer = WeightTrainer(net, random_masks(net, groups, ctx.generator, ctx.device), weight_optim(spec))
        updates: list[dict[str, Masks]] = []  # masks before and after each update, and what grew

        def on_step(step: int, x: torch.Tensor, y: torch.Tensor) -> None:
            if step % every or step >= total_steps:
                return
            masks = {k: m.bool() for k, m in masks_of(trainer).items()}
            new, grown = prune_and_regrow(
                masks, trainer.weights(), self.grow_scores(trainer, x, y, ctx.generator), groups, fraction
            )
            trainer.set_masks(new)
            with torch.no_grad():
                for k, g in grown.items():
                    trainer.params[k].masked_fill_(g, 0.0)  # a regrown weight starts at zero
            updates.append({"before": masks, "after": new, "grown": grown})

        on_epoch = epoch_reporter(ctx.progress, spec.epochs, lambda: masks_of(trainer))
        train_on_extract(trainer, data, spec, ctx.generator, on_step=on_step, on_epoch=on_epoch)
        final = {k: m.bool() for k, m in masks_of(trainer).items()}
        return ExtractResult(final, trained_weights=trainer.weights(), trace={"updates": updates})


class SET(_DynamicSparse):
    name = "set"
    grow_scores = staticmethod(random_growth)


class RigL(_DynamicSparse):
    name = "rigl"
    grow_scores = staticmethod(gradient_growth)
