"""How score tensors become hard masks: top-k of |scores| (or signed scores), per parameter or global, over the
original or the augmented score space (double-scoring), optionally restricted to active entries (iterated)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from ticketcli.masking import joint_topk_masks, keep_count
from ticketcli.models import MaskedNet
from ticketcli.specs import MethodSpec
from ticketcli.topk_search import TopKSelector


def ranking(scores: torch.Tensor, signed: bool) -> torch.Tensor:
    """What top-k ranks: |S| (edge-popup, double-scoring) or S itself (the "NoAbs" ablation)."""
    return scores if signed else scores.abs()


class Selection:
    """How score tensors become hard masks on the original coordinates.

    Each parameter has `parts` score tensors of its shape: S, then (augmented) `parts - 1` auxiliary ones, i.e.
    an augmented score matrix of width (1 + aux_width) * n. Top-k runs per parameter (default) or once over all
    parameters (--global) on |scores| (or signed scores), keeping `keep` entries of the (augmented) space, and
    the mask is the kept entries on S's coordinates. With `active` (the iterated variant) only the active
    entries of every part compete: the others rank below everything.
    """

    def __init__(
        self,
        net: MaskedNet,
        spec: MethodSpec,
        *,
        parts: int,
        densities: dict[str, float],
        active: dict[str, torch.Tensor] | None = None,
    ):
        self.parts, self.signed, self.global_topk = parts, spec.signed_scores, spec.global_topk
        self.active = active
        size = {n: int(active[n].sum()) if active is not None else net.weights[n].numel() for n in net.names}
        if self.global_topk:
            (d,) = set(densities.values())
            self.k_global = keep_count(d, parts * sum(size.values()))
        self.keep = {n: keep_count(densities[n], parts * size[n]) for n in net.names}  # per-layer budgets
        self.topk = TopKSelector()
        self.frozen: dict[str, list[torch.Tensor]] = {}  # ranked auxiliary values that never change
        self.windowed: set[str] = set()  # parameters whose fixed auxiliary ranking only the selector holds

    def ranked(self, name: str, parts: list[torch.Tensor], aux_fixed: bool) -> list[torch.Tensor]:
        """The values top-k compares for one parameter; inactive entries (iterated) rank last."""

        def rank(t: torch.Tensor) -> torch.Tensor:
            r = ranking(t.detach(), self.signed)
            return r if self.active is None else torch.where(self.active[name], r, -math.inf)

        if name in self.windowed:  # the selector holds the rest (window_aux)
            return [rank(parts[0])]
        if not aux_fixed and len(parts) == self.parts:  # fewer parts: a trainer released the fixed ones (held here)
            return [rank(t) for t in parts]
        if name not in self.frozen:
            self.frozen[name] = [rank(t) for t in parts[1:]]
        return [rank(parts[0]), *self.frozen[name]]

    def select(
        self, scores: dict[str, list[torch.Tensor]], dtype: torch.dtype = torch.bool, aux_fixed: bool = False
    ) -> dict[str, torch.Tensor]:
        """Hard masks (as dtype) for every parameter from the current scores; `aux_fixed`: the auxiliary scores
        have not changed since the first call (their ranking is computed once)."""
        if self.global_topk:
            ranked = {n: self.ranked(n, parts, aux_fixed) for n, parts in scores.items()}
            return {n: m.to(dtype) for n, m in zip(ranked, self.joint(ranked))}
        masks = {}
        for n, parts in scores.items():  # one parameter at a time: one layer's |S| alive at once, not all of them
            masks[n] = self.topk(n, self.ranked(n, parts, aux_fixed), self.keep[n], dtype, frozen=aux_fixed)
            if aux_fixed and n not in self.windowed:
                # The selector keeps a sorted copy of the fixed auxiliary values: hold that one instead of a
                # second, unsorted copy. Any order of them gives the same masks (only their multiset decides the
                # first part's mask, whose ties go first in concatenated order), so later calls pass the sorted
                # values.
                self.frozen[n] = self.topk.frozen_values(n) or self.frozen[n]
        return masks

    def window_aux(self, redraw: Callable[[str], list[torch.Tensor]]) -> None:
        """Let the selector hold the fixed auxiliary ranking of each parameter only as a window around its
        threshold (TopKSelector.window) instead of all of it sorted: `redraw(name)` draws that parameter's
        auxiliary scores again, bit for bit, as fresh tensors, for the rare step whose threshold leaves the
        window. Per-parameter top-k on the CPU without active entries only; the masks do not change."""
        if self.global_topk or self.active is not None:
            return
        for n in list(self.frozen):
            if self.topk.window(n, functools.partial(self._reranked, redraw, n)):
                self.windowed.add(n)
                del self.frozen[n]

    def _reranked(self, redraw: Callable[[str], list[torch.Tensor]], name: str) -> list[torch.Tensor]:
        """ranking() of `name`'s auxiliary scores drawn again, in place where it can be (the same values)."""
        return [t if self.signed else t.abs_() for t in redraw(name)]

    def joint(self, ranked: dict[str, list[torch.Tensor]]) -> list[torch.Tensor]:
        """Global top-k over every part of every parameter; returns all masks, originals first."""
        flat = [r[0] for r in ranked.values()] + [a for r in ranked.values() for a in r[1:]]
        return joint_topk_masks(flat, self.k_global)

    def aux_report(self, scores: dict[str, list[torch.Tensor]]) -> dict[str, dict[str, int]]:
        """Per parameter: kept entries of the augmented space and how many of them are auxiliary coordinates."""
        ranked = {n: self.ranked(n, parts, False) for n, parts in scores.items()}
        if self.global_topk:
            masks, names = self.joint(ranked), list(ranked)
            orig = {n: int(m.sum()) for n, m in zip(names, masks)}
            aux = dict.fromkeys(names, 0)
            for i, m in enumerate(masks[len(names) :]):  # each parameter's parts - 1 auxiliary tensors, in order
                aux[names[i // (self.parts - 1)]] += int(m.sum())
        else:
            orig = {
                n: int(
                    (
                        self.topk(n, r, self.keep[n]) if n in self.windowed else joint_topk_masks(r, self.keep[n])[0]
                    ).sum()
                )
                for n, r in ranked.items()
            }
            aux = {n: self.keep[n] - orig[n] for n in ranked}
        return {n: {"aug_kept": orig[n] + aux[n], "aux_kept": aux[n]} for n in ranked}
