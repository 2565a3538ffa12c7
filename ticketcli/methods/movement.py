"""Movement pruning (Sanh et al. 2020; docs/method.md): weights and signed movement scores trained jointly.

The forward pass uses W * M with M = top-k of the signed scores S at the scheduled density; the straight-through
estimator gives dL/dS = dL/d(W*M) * W and dL/dW = dL/d(W*M) * M. Masked weights are gated, not zeroed, so a
connection whose score climbs back comes back with its weight. The density follows a cubic schedule from dense
to the target; the final mask is the top-k of the signed scores (no absolute value) at the target density.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ticketcli.data.datasets import Splits
from ticketcli.methods.base import Context, ExtractResult, Masks
from ticketcli.methods.registry import option
from ticketcli.methods.sparse import _SparseTraining, epoch_reporter, weight_optim
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import Group, select
from ticketcli.specs.run import MethodSpec
from ticketcli.train import WeightTrainer, train_on_extract


def cubic_density(step: int, total: int, final: float, warmup: float, cooldown: float) -> float:
    """Keep density after `step` of `total` steps: 1 for the first warmup fraction, then
    final + (1 - final) (1 - progress)^3, reaching `final` when the last cooldown fraction begins."""
    t_w, t_c = warmup * total, cooldown * total
    if step < t_w:
        return 1.0
    if step >= total - t_c:
        return final
    progress = (step - t_w) / (total - t_w - t_c)
    return final + (1.0 - final) * (1.0 - progress) ** 3


class MovementTrainer(WeightTrainer):
    """WeightTrainer (dense weights) plus a score parameter group; effective() gates with the scores' top-k."""

    def __init__(self, net: MaskedNet, spec: MethodSpec, groups: list[Group], scores: dict[str, torch.Tensor]):
        super().__init__(net, None, weight_optim(spec))
        self.groups = groups
        self.scores = {n: s.to(net.device, copy=True).requires_grad_(True) for n, s in scores.items()}
        self.opt.add_param_group({"params": list(self.scores.values()), "lr": spec.lr})
        self.schedule: Callable[[float], float] = lambda d: d  # group final density -> current keep density

    def hard_masks(self) -> Masks:
        return select({n: s.detach() for n, s in self.scores.items()}, self.groups, self.schedule)

    def effective(self) -> dict[str, torch.Tensor]:
        m = self.hard_masks()
        # value W * M; gradient M to W and W to S (straight-through through the top-k)
        return {n: p * (m[n].to(p.dtype) + self.scores[n] - self.scores[n].detach()) for n, p in self.params.items()}


class Movement(_SparseTraining):
    name = "movement"
    # weights at --weight-lr, scores at --lr (one Adam, two parameter groups)
    trains = frozenset({"weights", "scores"})
    score_init = {"scheme": "zeros+gaussian", "note": "0 plus N(0, movement_noise^2) noise for tie-breaking"}

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        std, warmup, cooldown = (option(spec, f"movement_{o}") for o in ("noise", "warmup", "cooldown"))
        noise = {n: std * torch.randn(net.weights[n].shape, generator=ctx.generator) for n in net.names}
        trainer = MovementTrainer(net, spec, self.groups(net, spec), noise)
        total = spec.epochs * math.ceil(len(data.y_extract) / spec.batch_size)

        def schedule_at(step: int) -> Callable[[float], float]:
            return lambda d: cubic_density(step, total, d, warmup, cooldown)

        trainer.schedule = schedule_at(0)
        densities: list[float] = []  # the global keep density used by each step

        def on_step(step: int, x: torch.Tensor, y: torch.Tensor) -> None:
            densities.append(trainer.schedule(spec.density))
            trainer.schedule = schedule_at(step)

        on_epoch = epoch_reporter(ctx.progress, spec.epochs, trainer.hard_masks)
        train_on_extract(trainer, data, spec, ctx.generator, on_step=on_step, on_epoch=on_epoch)
        final_scores = {n: s.detach() for n, s in trainer.scores.items()}
        final = select(final_scores, trainer.groups)
        return ExtractResult(
            final,
            trained_weights={n: w * final[n] for n, w in trainer.weights().items()},
            trace={"densities": densities, "final_scores": final_scores},
        )
