"""DoubleScore-Iterated (Appendix B): rounds of double-scoring on a shrinking cumulative mask."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from ticketcli.data.datasets import Splits
from ticketcli.methods.base import Context, Details, ExtractResult, Masks
from ticketcli.methods.registry import option
from ticketcli.methods.score_training import ScoreTrainer, resume, seeded_scores, train_scores
from ticketcli.methods.scores import ScoreMethod, score_params
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.exact import keep_count
from ticketcli.specs.run import MethodSpec

BISECTIONS = 40  # halvings of the augmented density interval: well below one entry's step for any real layer


class Iterated(ScoreMethod):
    """DoubleScore-Iterated (Appendix B): a cumulative mask C, starting dense. Each round trains fresh augmented
    scores for --epochs with only C's active weights competing, at augmented keep density
    min(target density / current density, 1/2), and multiplies the round's mask into C. It stops when the
    achieved sparsity is within --iter-tolerance of the requested one, after --max-rounds rounds, or when a
    round removes nothing. It never goes past the request by more than the tolerance: a round that would is
    selected again from its trained scores at the smallest augmented density that stops at the request."""

    name = "iterated"
    augmented = True
    ROUND_DENSITY_CAP = 0.5  # a round never keeps more than half of the augmented space

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        total = sum(net.weights[n].numel() for n in net.names)
        cumulative = {
            n: torch.ones(net.weights[n].shape, dtype=torch.bool, device=net.weights[n].device) for n in net.names
        }
        rounds: list[dict[str, Any]] = []
        round_masks: list[Masks] = []  # the cumulative mask after each round
        details = Details()
        state = ctx.checkpoint.restore() if ctx.checkpoint is not None else None
        first = 1
        if ctx.checkpoint is not None and state is not None:  # resume in round state["round"], from the mask before it
            with ctx.checkpoint.resuming():
                first, rounds = int(state["round"]), list(state["rounds"])
                round_masks = [{n: r[n].to(ctx.device, torch.bool) for n in net.names} for r in state["round_masks"]]
                if any(r[n].shape != cumulative[n].shape for r in round_masks for n in net.names):
                    raise ValueError("a saved round mask does not fit the model")
            cumulative = round_masks[-1] if round_masks else cumulative
        for r in range(first, option(spec, "max_rounds") + 1):
            current = sum(int(m.sum()) for m in cumulative.values()) / total
            d = min(spec.density / current, self.ROUND_DENSITY_CAP)
            selection = self.selection(net, spec, d, active=cumulative)
            trainer = ScoreTrainer(net, selection, spec, *seeded_scores(net, selection.parts, ctx.generator))
            with ctx.checkpoint.resuming() if ctx.checkpoint is not None else nullcontext():
                start = resume(state if r == first else None, trainer, ctx.generator)
            context = {
                "round": r,
                "rounds": rounds,
                "round_masks": [{n: m.cpu() for n, m in c.items()} for c in round_masks],
            }
            train_scores(
                trainer,
                data,
                spec,
                ctx.generator,
                ctx.progress,
                extra={"round": r, "rounds": option(spec, "max_rounds")},
                checkpoint=ctx.checkpoint,
                start_epoch=start,
                context=context,
            )
            masks = trainer.masks()
            details["aux"] = selection.aux_report(trainer.scores)
            details["score_params"] = score_params(selection.parts, trainer.aux_trains)
            before, cumulative = cumulative, {n: cumulative[n] & masks[n] for n in net.names}
            achieved = 1.0 - sum(int(m.sum()) for m in cumulative.values()) / total
            entry: dict[str, Any] = {"round": r, "aug_density": d, "achieved_sparsity": achieved}
            past = achieved > spec.sparsity + option(spec, "iter_tolerance")
            if past:  # the round overshot (a short round's scores barely rank): stop at the request instead
                entry["reselected_density"], cumulative = self.at_request(net, spec, trainer, before, d, total)
                entry["achieved_sparsity"] = achieved = 1.0 - sum(int(m.sum()) for m in cumulative.values()) / total
                details["aux"] = self.selection(net, spec, entry["reselected_density"], active=before).aux_report(
                    self.full_scores(trainer, net)
                )
            round_masks.append(cumulative)
            rounds = [*rounds, entry]
            if past or abs(achieved - spec.sparsity) <= option(spec, "iter_tolerance") or achieved <= 1.0 - current:
                break
        details["rounds"] = rounds
        return ExtractResult(cumulative, details, trace={"round_masks": round_masks})

    @staticmethod
    def full_scores(trainer: ScoreTrainer, net: MaskedNet) -> dict[str, list[torch.Tensor]]:
        """The round's trained scores with every auxiliary part (the trainer may have let the fixed ones go)."""
        saved = trainer.state_dict()["scores"]
        return {n: [s.to(net.weights[n].device) for s in saved[n]] for n in net.names}

    def at_request(
        self, net: MaskedNet, spec: MethodSpec, trainer: ScoreTrainer, before: Masks, low: float, total: int
    ) -> tuple[float, Masks]:
        """The round's masks selected again from its trained scores at the smallest augmented density in
        [low, 1] whose cumulative mask keeps at least the requested ⌊density · total⌋ entries, and that mask.
        Top-k sets are nested (ties go to the lowest index), so the kept count only grows with the density;
        at density 1 every active entry is kept, which is C before the round."""
        scores, need = self.full_scores(trainer, net), keep_count(spec.density, total)

        def at(d: float) -> tuple[int, Masks]:
            masks = self.selection(net, spec, d, active=before).select(scores)
            cumulative = {n: before[n] & masks[n] for n in net.names}
            return sum(int(m.sum()) for m in cumulative.values()), cumulative

        lo, hi, best = low, 1.0, at(1.0)[1]
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            kept, cumulative = at(mid)
            if kept >= need:
                hi, best = mid, cumulative
            else:
                lo = mid
        return hi, best
