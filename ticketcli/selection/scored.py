"""Score training's selection: score tensors become hard masks every step, through select_group (groups.py).

What it adds to the groups: the ranking (|S|, or S itself), the augmented parts (double-scoring's auxiliary
scores, ranked once when they never change), the active entries (iterated) and the warm band search's state
(warm.py), which it keeps between steps; the masks are those of the exact top-k, bit for bit."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from ticketcli.models.masked import MaskedNet
from ticketcli.selection.exact import keep_count
from ticketcli.selection.groups import Group, joint_masks, select_group
from ticketcli.selection.shaped import active_units, patterned_masks, units
from ticketcli.selection.structure import Pattern
from ticketcli.selection.warm import TopKSelector


def ranking(scores: torch.Tensor, signed: bool) -> torch.Tensor:
    """What top-k ranks: |S| (edge-popup, double-scoring) or S itself (the "NoAbs" ablation)."""
    return scores if signed else scores.abs()


class Selection:
    """How score tensors become hard masks on the original coordinates.

    Each parameter has `parts` score tensors of its shape: S, then (augmented) `parts - 1` auxiliary ones, i.e.
    an augmented score matrix of width (1 + aux_width) * n. Each group (groups.scope_groups: one per parameter, or
    one of all of them with --global-topk) keeps floor(density * parts * n) entries of its (augmented) space, ranked by
    |scores| (or signed scores), and the mask is the kept entries on S's coordinates. With `active` (the iterated
    variant) only the active entries of every part compete, and n counts them: the others rank below everything.
    Under a `pattern` (--structure, --block; shaped.py) n counts blocks, and the masks are the pattern's, found by
    the full selection (the warm search's shortcuts assume a plain top-k).
    """

    def __init__(
        self,
        net: MaskedNet,
        groups: list[Group],
        *,
        parts: int,
        signed: bool = False,
        active: dict[str, torch.Tensor] | None = None,
        pattern: Pattern | None = None,
    ):
        self.parts, self.signed, self.active, self.pattern = parts, signed, active, pattern
        size = {
            n: active_units(active[n], pattern) if active is not None else units(net.weights[n].shape, pattern)
            for n in net.names
        }
        # (names, k) per group: the entries each group keeps
        self.budgets = [(names, keep_count(d, parts * sum(size[n] for n in names))) for names, d in groups]
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
        masks = {}
        for names, k in self.budgets:  # one group at a time: per layer, one layer's |S| alive at once
            ranked = {n: self.ranked(n, scores[n], aux_fixed) for n in names}
            if self.pattern is not None:
                masks.update(select_group(ranked, names, k, dtype=dtype, pattern=self.pattern))
                continue
            masks.update(select_group(ranked, names, k, warm=self.topk, frozen=aux_fixed, dtype=dtype))
            (n, *more) = names
            if aux_fixed and not more and n not in self.windowed:
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
        if self.active is not None or self.pattern is not None:
            return
        alone = {names[0] for names, _ in self.budgets if len(names) == 1}  # the groups of one parameter
        for n in list(self.frozen):
            if n in alone and self.topk.window(n, functools.partial(self._reranked, redraw, n)):
                self.windowed.add(n)
                del self.frozen[n]

    def _reranked(self, redraw: Callable[[str], list[torch.Tensor]], name: str) -> list[torch.Tensor]:
        """ranking() of `name`'s auxiliary scores drawn again, in place where it can be (the same values)."""
        return [t if self.signed else t.abs_() for t in redraw(name)]

    def aux_report(self, scores: dict[str, list[torch.Tensor]]) -> dict[str, dict[str, int]]:
        """Per parameter: kept entries of the augmented space and how many of them are auxiliary coordinates."""
        ranked = {n: self.ranked(n, parts, False) for n, parts in scores.items()}
        orig: dict[str, int] = {}
        aux: dict[str, int] = {}
        for names, k in self.budgets:
            if len(names) == 1 and self.pattern is None:  # the group keeps k: those not on S are auxiliary
                (n,) = names
                warm = self.topk if n in self.windowed else None  # only the selector holds a windowed ranking
                orig[n] = int(select_group(ranked, names, k, warm=warm)[n].sum())
                aux[n] = k - orig[n]
                continue
            # every part's mask: the kept entries of the augmented space
            masks = (
                joint_masks(ranked, names, k)
                if self.pattern is None
                else patterned_masks(ranked, names, k, self.pattern)
            )
            orig.update({n: int(m.sum()) for n, m in zip(names, masks)})
            aux.update(dict.fromkeys(names, 0))
            for i, m in enumerate(masks[len(names) :]):  # each parameter's parts - 1 auxiliary tensors, in order
                aux[names[i // (self.parts - 1)]] += int(m.sum())
        return {n: {"aug_kept": orig[n] + aux[n], "aux_kept": aux[n]} for n in ranked}
