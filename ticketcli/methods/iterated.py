"""DoubleScore-Iterated (Appendix B): rounds of double-scoring on a shrinking cumulative mask."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

from ticketcli.data.datasets import Splits
from ticketcli.files.checkpoint import Checkpointer
from ticketcli.methods.base import Details, ExtractResult, Masks, Progress
from ticketcli.methods.score_training import ScoreTrainer, resume, seeded_scores, train_scores
from ticketcli.methods.scores import ScoreMethod, score_params
from ticketcli.models.masked import MaskedNet
from ticketcli.specs.run import MethodSpec


class Iterated(ScoreMethod):
    """DoubleScore-Iterated (Appendix B): a cumulative mask C, starting dense. Each round trains fresh augmented
    scores for --epochs with only C's active weights competing, at augmented keep density
    min(target density / current density, 1/2), and multiplies the round's mask into C. It stops when the
    achieved sparsity is within --iter-tolerance of the requested one, after --max-rounds rounds, or when a
    round removes nothing."""

    name = "iterated"
    augmented = True
    ROUND_DENSITY_CAP = 0.5  # a round never keeps more than half of the augmented space

    def extract(
        self,
        net: MaskedNet,
        data: Splits,
        spec: MethodSpec,
        *,
        device: torch.device,
        generator: torch.Generator,
        progress: Progress | None,
        checkpoint: Checkpointer | None = None,
    ) -> ExtractResult:
        total = sum(net.weights[n].numel() for n in net.names)
        cumulative = {
            n: torch.ones(net.weights[n].shape, dtype=torch.bool, device=net.weights[n].device) for n in net.names
        }
        rounds: list[dict[str, Any]] = []
        round_masks: list[Masks] = []  # the cumulative mask after each round
        details = Details()
        state = checkpoint.restore() if checkpoint is not None else None
        first = 1
        if checkpoint is not None and state is not None:  # resume inside round state["round"], from the mask before it
            with checkpoint.resuming():
                first, rounds = int(state["round"]), list(state["rounds"])
                round_masks = [{n: r[n].to(device, torch.bool) for n in net.names} for r in state["round_masks"]]
                if any(r[n].shape != cumulative[n].shape for r in round_masks for n in net.names):
                    raise ValueError("a saved round mask does not fit the model")
            cumulative = round_masks[-1] if round_masks else cumulative
        for r in range(first, spec.max_rounds + 1):
            current = sum(int(m.sum()) for m in cumulative.values()) / total
            d = min(spec.density / current, self.ROUND_DENSITY_CAP)
            selection = self.selection(net, spec, d, active=cumulative)
            trainer = ScoreTrainer(net, selection, spec, *seeded_scores(net, selection.parts, generator))
            with checkpoint.resuming() if checkpoint is not None else nullcontext():
                start = resume(state if r == first else None, trainer, generator)
            context = {
                "round": r,
                "rounds": rounds,
                "round_masks": [{n: m.cpu() for n, m in c.items()} for c in round_masks],
            }
            train_scores(
                trainer,
                data,
                spec,
                generator,
                progress,
                extra={"round": r, "rounds": spec.max_rounds},
                checkpoint=checkpoint,
                start_epoch=start,
                context=context,
            )
            masks = trainer.masks()
            details["aux"] = selection.aux_report(trainer.scores)
            details["score_params"] = score_params(selection.parts, trainer.aux_trains)
            cumulative = {n: cumulative[n] & masks[n] for n in net.names}
            round_masks.append(cumulative)
            achieved = 1.0 - sum(int(m.sum()) for m in cumulative.values()) / total
            rounds = [*rounds, {"round": r, "aug_density": d, "achieved_sparsity": achieved}]
            if abs(achieved - spec.sparsity) <= spec.iter_tolerance or achieved <= 1.0 - current:
                break
        details["rounds"] = rounds
        return ExtractResult(cumulative, details, trace={"round_masks": round_masks})
