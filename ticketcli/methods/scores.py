"""Score-based methods: edge-popup and double-scoring share one score-training loop and differ only in selection.

edge-popup (Ramanujan et al.): one score tensor S per parameter; mask = top-k of |S| at the layer's density.
augmented (double-scoring, docs/method.md): scores S and auxiliary T per parameter; top-k of |(S, T)| in the
augmented space at the augmented density, restricted to the original coordinates (selection/scored.py); the
training loop is methods/score_training.py.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from ticketcli.data.datasets import Splits
from ticketcli.methods.base import Context, Details, ExtractResult, Method
from ticketcli.methods.registry import option
from ticketcli.methods.score_training import SCORE_INIT, ScoreTrainer, resume, seeded_scores, train_scores
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import Scope, scope_groups
from ticketcli.selection.scored import Selection
from ticketcli.specs.run import MethodSpec


def augmented_density(spec: MethodSpec) -> float:
    """--aug-density if given, else the targetable variant: augmented keep density = 1 - requested sparsity."""
    return option(spec, "aug_density") if option(spec, "aug_density") is not None else spec.density


class ScoreMethod(Method):
    """Score training with frozen weights; subclasses choose the score layout and how the final mask is read."""

    trains = frozenset({"scores"})
    resumable = True  # saves scores, Adam and the generator every N epochs; resumes bit-identically
    data_parallel = True  # runs under torchrun (scores' gradients all-reduced, masks checked identical)
    uses_epochs = True
    seeded = True  # scores are drawn from the generator, and so is the batch order
    default_scope = "layer"  # per layer unless --global-topk
    score_init = SCORE_INIT
    augmented: ClassVar[bool] = False  # auxiliary score tensors?

    def parts(self, spec: MethodSpec) -> int:
        return 1 + option(spec, "aux_width") if self.augmented else 1

    def selection(
        self,
        net: MaskedNet,
        spec: MethodSpec,
        density: float | None = None,
        active: dict[str, torch.Tensor] | None = None,
    ) -> Selection:
        """The selection at `density` (default: the augmented density, or the requested one and --layer-densities)."""
        if density is None and self.augmented:
            density = augmented_density(spec)
        return Selection(
            net,
            self.groups(net, spec, density),
            parts=self.parts(spec),
            signed=spec.signed_scores,
            active=active,
            pattern=self.pattern(spec),
        )

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        selection = self.selection(net, spec)
        trainer = ScoreTrainer(net, selection, spec, *seeded_scores(net, selection.parts, ctx.generator))
        start = 0
        if ctx.checkpoint is not None:
            state = ctx.checkpoint.restore()
            with ctx.checkpoint.resuming():
                start = resume(state, trainer, ctx.generator)
        train_scores(trainer, data, spec, ctx.generator, ctx.progress, checkpoint=ctx.checkpoint, start_epoch=start)
        masks = trainer.masks()
        details = Details()
        if self.augmented:
            details["aux"] = selection.aux_report(trainer.scores)
            details["aug_density"] = augmented_density(spec)
        details["score_params"] = score_params(selection.parts, trainer.aux_trains)
        if option(spec, "project_final"):
            masks = project(net, spec, self.default_scope, trainer.scores)
        return ExtractResult(masks, details)


def score_params(parts: int, aux_trains: bool) -> dict[str, int]:
    """Trainable and total score parameters as multiples of the weight count (the ablation table's column)."""
    return {"trainable": parts if aux_trains else 1, "total": parts}


def project(
    net: MaskedNet, spec: MethodSpec, scope: Scope, scores: dict[str, list[torch.Tensor]]
) -> dict[str, torch.Tensor]:
    """--project-final: top-k of the original scores alone at exactly the requested density (per layer or global)."""
    original = {n: parts[:1] for n, parts in scores.items()}
    groups = scope_groups(net, spec, scope, spec.density)
    return Selection(net, groups, parts=1, signed=spec.signed_scores, pattern=Method.pattern(spec)).select(original)


class EdgePopup(ScoreMethod):
    name = "edge-popup"


class Augmented(ScoreMethod):
    name = "augmented"
    augmented = True
