"""Scores -> masks for the pruning baselines: one global top-k over all parameters, or per layer.

Baselines threshold globally (docs/method.md); --layer-densities (and --match-sparsity-per-layer) switch to one
top-k per parameter at its layer's density. Schedules (IMP, SynFlow, movement) pass a density function.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ticketcli.masking import joint_topk_masks, keep_count
from ticketcli.methods.base import param_densities
from ticketcli.models import MaskedNet
from ticketcli.specs import MethodSpec

Group = tuple[list[str], float]  # parameter names thresholded together, their final keep density


def density_groups(net: MaskedNet, spec: MethodSpec) -> list[Group]:
    """One group of every parameter at 1 - sparsity, or one group per parameter with --layer-densities."""
    if spec.layer_densities is None:
        return [(list(net.names), spec.density)]
    dens = param_densities(net, spec)
    return [([n], dens[n]) for n in net.names]


def group_topk(scores: dict[str, torch.Tensor], names: list[str], k: int) -> dict[str, torch.Tensor]:
    """Exactly the k highest scores over these parameters taken together (ties to the lowest index)."""
    return dict(zip(names, joint_topk_masks([scores[n] for n in names], k)))


def select(
    scores: dict[str, torch.Tensor], groups: list[Group], density: Callable[[float], float] = lambda d: d
) -> dict[str, torch.Tensor]:
    """Bool masks keeping floor(density(d) * n) highest scores in each group of n entries with final density d."""
    masks = {}
    for names, d in groups:
        n = sum(scores[p].numel() for p in names)
        masks.update(group_topk(scores, names, keep_count(density(d), n)))
    return masks


def power_schedule(step: int, steps: int) -> Callable[[float], float]:
    """Final density d -> d^(step/steps): the geometric schedule of IMP's and SynFlow's rounds."""
    return lambda d: d ** (step / steps)


def restricted(scores: dict[str, torch.Tensor], allowed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Scores where `allowed` is true, -inf elsewhere: a top-k picks outside `allowed` only when it must."""
    return {n: s.masked_fill(~allowed[n].bool(), -float("inf")) for n, s in scores.items()}
