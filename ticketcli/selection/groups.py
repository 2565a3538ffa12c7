"""What competes for a mask, and the one function that turns the competitors' values into masks.

A Group is a set of parameters thresholded together at one final keep density. scope_groups decides per layer
or global, in this one place, from the method's default scope, --global-topk and --layer-densities. select_group
keeps exactly k entries of a group: its parameters' parts taken together (every parameter's first part, then
every parameter's further parts in order), ties to the lowest index of that concatenation; through the warm band
search (warm.py) for a group of one parameter when the caller holds one, else the full exact selection
(exact.py). The one-shot baselines call select (one part per parameter, optionally a density schedule), the
score methods Selection (scored.py: ranking, augmented parts, active entries, the warm state).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple

import torch

from ticketcli.errors import UsageError
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.exact import joint_topk_masks, keep_count
from ticketcli.selection.shaped import patterned_masks, units
from ticketcli.selection.structure import Pattern
from ticketcli.selection.warm import TopKSelector
from ticketcli.specs.run import MethodSpec

# How a method thresholds when neither --global-topk nor --layer-densities says otherwise: one top-k over all
# parameters ("global", the baselines, Appendix B) or one per parameter ("layer").
Scope = Literal["global", "layer"]


class Group(NamedTuple):
    """Parameters thresholded together, and their final keep density."""

    names: tuple[str, ...]
    density: float


def param_densities(net: MaskedNet, spec: MethodSpec) -> dict[str, float]:
    """Keep density per masked parameter: --layer-densities (one per layer) or 1 - sparsity everywhere."""
    if spec.layer_densities is None:
        return {n: spec.density for n in net.names}
    layers = net.layers()
    if len(spec.layer_densities) != len(layers):
        raise UsageError(
            f"--layer-densities has {len(spec.layer_densities)} values but the model has "
            f"{len(layers)} layers ({', '.join(layers)})"
        )
    return {n: d for d, names in zip(spec.layer_densities, layers.values()) for n in names}


def scope_groups(net: MaskedNet, spec: MethodSpec, scope: Scope, density: float | None = None) -> list[Group]:
    """The groups a method thresholds: the one place where per layer or global is decided.

    With --layer-densities (which excludes --global-topk): one group per parameter at its layer's density. Otherwise
    every parameter at `density` (default 1 - sparsity): all in one group with --global-topk or when the method's
    default `scope` is global, one group each otherwise. A method that passes its own `density` (double-scoring's
    augmented density, a round's density) does not read --layer-densities."""
    if density is None and spec.layer_densities is not None:
        if spec.global_topk:
            raise UsageError("--global-topk and --layer-densities exclude each other")
        dens = param_densities(net, spec)
        return [Group((n,), dens[n]) for n in net.names]
    d = spec.density if density is None else density
    if spec.global_topk or scope == "global":
        return [Group(tuple(net.names), d)]
    return [Group((n,), d) for n in net.names]


def joint_masks(parts: Mapping[str, Sequence[torch.Tensor]], names: Sequence[str], k: int) -> list[torch.Tensor]:
    """The exact top-k over every part of these parameters: the masks of the first parts (in `names` order), then
    those of each parameter's further parts in turn."""
    flat = [parts[n][0] for n in names] + [a for n in names for a in parts[n][1:]]
    return joint_topk_masks(flat, k)


def select_group(
    parts: Mapping[str, Sequence[torch.Tensor]],
    names: Sequence[str],
    k: int,
    *,
    warm: TopKSelector | None = None,
    frozen: bool = False,
    dtype: torch.dtype = torch.bool,
    pattern: Pattern | None = None,
) -> dict[str, torch.Tensor]:
    """Masks (as `dtype`) of the first part of each parameter in `names`, keeping exactly the k largest values
    of all their parts together (ties to the lowest index of joint_masks' concatenation). A group of one parameter
    goes through `warm` when given (`frozen`: its further parts have the same values on every call for this name);
    the bits are the same either way. Under a `pattern` (--structure, --block) the masks are shaped.py's, `k`
    counting blocks."""
    if pattern is not None:
        return {n: m.to(dtype) for n, m in zip(names, patterned_masks(parts, names, k, pattern))}
    if warm is not None and len(names) == 1:
        (n,) = names
        return {n: warm(n, parts[n], k, dtype, frozen=frozen)}
    return {n: m.to(dtype) for n, m in zip(names, joint_masks(parts, names, k))}


def select(
    scores: dict[str, torch.Tensor],
    groups: list[Group],
    density: Callable[[float], float] = lambda d: d,
    pattern: Pattern | None = None,
) -> dict[str, torch.Tensor]:
    """Bool masks keeping floor(density(d) * n) highest scores in each group of n entries (of n blocks under a
    --block `pattern`; N:M keeps its N of every M whatever the density) with final density d."""
    masks = {}
    for names, d in groups:
        n = sum(units(scores[p].shape, pattern) for p in names)
        masks.update(select_group({p: [scores[p]] for p in names}, names, keep_count(density(d), n), pattern=pattern))
    return masks


def power_schedule(step: int, steps: int) -> Callable[[float], float]:
    """Final density d -> d^(step/steps): the geometric schedule of IMP's and SynFlow's rounds."""
    return lambda d: d ** (step / steps)


def restricted(scores: dict[str, torch.Tensor], allowed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Scores where `allowed` is true, -inf elsewhere: a top-k picks outside `allowed` only when it must."""
    return {n: s.masked_fill(~allowed[n].bool(), -float("inf")) for n, s in scores.items()}
