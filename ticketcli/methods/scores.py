"""Score-based methods: edge-popup and double-scoring share one score-training loop and differ only in selection.

edge-popup (Ramanujan et al.): one score tensor S per parameter; mask = top-k of |S| at the layer's density.
augmented (double-scoring, Algorithm 1): scores S and auxiliary T per parameter; top-k of |(S, T)| in the
augmented space at the augmented density, restricted to the original coordinates. The loss depends on T only
through the hard top-k, so under the straight-through estimator T's gradient is exactly zero (Theorem H.6):
T is kept out of the autograd graph instead of being fed zeros.
"""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
from torch import nn

from ticketcli import distributed
from ticketcli.checkpoint import Checkpointer
from ticketcli.data import Splits
from ticketcli.errors import RunFailed, UsageError
from ticketcli.masking import joint_topk_masks, keep_count, masked_weight
from ticketcli.methods.base import Progress, param_densities
from ticketcli.methods.registry import METHODS
from ticketcli.models import MaskedNet, fan_in, layer_of
from ticketcli.specs import MethodSpec
from ticketcli.topk_search import TopKSelector
from ticketcli.train import precision_context

SCORE_INIT = {
    "scheme": "kaiming-uniform",
    "bound": "1/sqrt(fan_in)",
    "note": "as allenai/hidden-networks (kaiming_uniform_, a=sqrt(5)); the paper does not state it",
}


def init_scores(net: MaskedNet, parts: int, generator: torch.Generator) -> dict[str, list[torch.Tensor]]:
    """U[-1/sqrt(fan_in), 1/sqrt(fan_in)] per score tensor, drawn on the CPU: for each parameter S, then T."""
    out = {}
    for name in net.names:
        w = net.weights[name]
        owner = net.weights.get(layer_of(name) + ".weight") if w.dim() == 1 else None
        bound = 1.0 / math.sqrt(fan_in(w, owner))
        out[name] = [
            torch.empty(w.shape, dtype=w.dtype).uniform_(-bound, bound, generator=generator) for _ in range(parts)
        ]
    return out


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

    def ranked(self, name: str, parts: list[torch.Tensor], aux_fixed: bool) -> list[torch.Tensor]:
        """The values top-k compares for one parameter; inactive entries (iterated) rank last."""

        def rank(t: torch.Tensor) -> torch.Tensor:
            r = ranking(t.detach(), self.signed)
            return r if self.active is None else torch.where(self.active[name], r, -math.inf)

        if not aux_fixed:
            return [rank(t) for t in parts]
        if name not in self.frozen:
            self.frozen[name] = [rank(t) for t in parts[1:]]
        return [rank(parts[0]), *self.frozen[name]]

    def select(
        self, scores: dict[str, list[torch.Tensor]], dtype: torch.dtype = torch.bool, aux_fixed: bool = False
    ) -> dict[str, torch.Tensor]:
        """Hard masks (as dtype) for every parameter from the current scores; `aux_fixed`: the auxiliary scores
        have not changed since the first call (their ranking is computed once)."""
        ranked = {n: self.ranked(n, parts, aux_fixed) for n, parts in scores.items()}
        if self.global_topk:
            return {n: m.to(dtype) for n, m in zip(ranked, self.joint(ranked))}
        return {n: self.topk(n, r, self.keep[n], dtype, frozen=aux_fixed) for n, r in ranked.items()}

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
            orig = {n: int(joint_topk_masks(r, self.keep[n])[0].sum()) for n, r in ranked.items()}
            aux = {n: self.keep[n] - orig[n] for n in ranked}
        return {n: {"aug_kept": orig[n] + aux[n], "aux_kept": aux[n]} for n in ranked}


class ScoreTrainer:
    """Adam on scores with straight-through gradients through the hard top-k; weights stay frozen.

    Auxiliary scores get exactly zero gradient (the loss sees them only through the hard top-k): they are kept
    out of the autograd graph, and only weight decay could move them (never with --frozen-aux)."""

    def __init__(self, net: MaskedNet, selection: Selection, spec: MethodSpec, scores: dict[str, list[torch.Tensor]]):
        self.net, self.selection, self.spec = net, selection, spec
        self.scores = {
            n: [
                nn.Parameter(s.detach().to(net.device, copy=True)) if i == 0 else s.detach().to(net.device, copy=True)
                for i, s in enumerate(parts)
            ]
            for n, parts in scores.items()
        }
        # under torchrun, DDP all-reduces the trained scores' gradients; the identity otherwise
        self.forward = distributed.replicate([parts[0] for parts in self.scores.values()], self._forward)
        self.autocast = precision_context(net.device, spec.precision)
        self.aux = [s for parts in self.scores.values() for s in parts[1:]]
        self.aux_trains = spec.weight_decay > 0 and not spec.frozen_aux and bool(self.aux)
        for t in self.aux:
            t.requires_grad_(self.aux_trains)
        trainable = [parts[0] for parts in self.scores.values()] + (self.aux if self.aux_trains else [])
        self.opt = torch.optim.Adam(
            trainable,
            lr=spec.lr,
            betas=spec.betas,
            eps=spec.eps,
            weight_decay=spec.weight_decay,
            fused=net.device.type in ("cpu", "cuda"),
        )

    def masks(self) -> dict[str, torch.Tensor]:
        """Current hard masks (bool), from the current scores."""
        with torch.no_grad():
            return self.selection.select(self.scores, aux_fixed=not self.aux_trains)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int, dict[str, torch.Tensor]]:
        """One optimiser step; returns (loss, correct predictions, the hard 0/1 masks used)."""
        dtype = next(iter(self.net.weights.values())).dtype
        with torch.no_grad():
            hard = self.selection.select(self.scores, dtype, aux_fixed=not self.aux_trains)  # 0/1 floats
        # under torchrun: this rank's shard of the global batch; loss and correct count are the global ones
        loss, value, correct = distributed.cross_entropy_step(lambda xb: self.forward(xb, hard), x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.aux_trains:
            for t in self.aux:
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
        if math.isfinite(value):  # a non-finite loss leaves the scores as they were, for the caller to diagnose
            self.opt.step()
        return value, correct, hard

    def _forward(self, x: torch.Tensor, hard: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits with the effective weights W * H, differentiable in the scores (straight-through)."""
        effective = {
            n: masked_weight(parts[0], self.net.weights[n], hard[n], self.spec.signed_scores)
            for n, parts in self.scores.items()
        }
        with self.autocast():
            return self.net.forward_with(x, effective)

    def state_dict(self) -> dict:
        """Scores (every part, on the CPU) and Adam's state: with the generator, all a resumed run needs."""
        return {
            "scores": {n: [s.detach().cpu().clone() for s in parts] for n, parts in self.scores.items()},
            "optimizer": self.opt.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        with torch.no_grad():
            for n, parts in self.scores.items():
                for s, saved in zip(parts, state["scores"][n], strict=True):
                    if not isinstance(saved, torch.Tensor) or saved.shape != s.shape:  # copy_ would broadcast
                        raise ValueError(f"saved scores of {n} do not have the shape {tuple(s.shape)}")
                    s.copy_(saved)
        self.opt.load_state_dict(state["optimizer"])

    def first_nonfinite(self) -> str | None:
        """The first parameter (named_parameters order) with non-finite frozen weights, scores or score
        gradients, in that order of blame (a NaN weight makes every earlier layer's gradient NaN too)."""
        for what, tensors in (
            ("weights", lambda n, parts: [self.net.weights[n]]),
            ("scores", lambda n, parts: parts),
            ("score gradient", lambda n, parts: [s.grad for s in parts if s.grad is not None]),
        ):
            for n, parts in self.scores.items():
                if any(not bool(torch.isfinite(t).all()) for t in tensors(n, parts)):
                    return f"{what} of {n}"
        return None

    def finite(self) -> bool:
        """All scores finite (one device sync)."""
        return bool(torch.stack([torch.isfinite(s).all() for parts in self.scores.values() for s in parts]).all())


def train_scores(
    trainer: ScoreTrainer,
    data: Splits,
    spec: MethodSpec,
    generator: torch.Generator,
    progress: Progress | None,
    extra: dict | None = None,
    *,
    checkpoint: Checkpointer | None = None,
    start_epoch: int = 0,
    context: dict | None = None,
) -> None:
    """spec.epochs passes over the extraction split in seeded random order (last partial batch included).

    `extra` is merged into every progress record (the iterated variant adds its round). With a `checkpoint`,
    the trainer, the generator and `context` (a method's own state, e.g. iterated's round) are saved after every
    `checkpoint.every` epochs; a resumed run passes the saved epoch as `start_epoch`. A non-finite loss or score
    stops the run naming the epoch and the first offending parameter."""
    n = data.y_extract.numel()
    total_weights = sum(trainer.net.weights[n].numel() for n in trainer.net.names)
    for epoch in range(start_epoch, spec.epochs):
        order = torch.randperm(n, generator=generator).to(data.x_extract.device)
        loss_sum, correct = 0.0, 0
        for i in range(0, n, spec.batch_size):
            idx = order[i : i + spec.batch_size]
            loss, c, hard = trainer.step(data.x_extract[idx], data.y_extract[idx])
            if not math.isfinite(loss):
                _diverged(trainer, "loss", epoch)
            loss_sum += loss * idx.numel()
            correct += c
        if not trainer.finite():  # once per epoch: a per-step check costs ~10% of a step for a rare failure
            _diverged(trainer, "scores", epoch)
        distributed.check_identical(hard, f"the masks after epoch {epoch + 1}")  # under torchrun only
        if checkpoint is not None and checkpoint.due(epoch + 1):
            checkpoint.save(
                {
                    **(context or {}),
                    "epoch": epoch + 1,
                    "trainer": trainer.state_dict(),
                    "generator": generator.get_state(),
                }
            )
        if progress is not None:
            kept = sum(int(m.sum()) for m in hard.values())
            progress(
                {
                    "epoch": epoch + 1,
                    "epochs": spec.epochs,
                    "loss": loss_sum / n,
                    "accuracy": correct / n,
                    "sparsity": 1.0 - kept / total_weights,
                    **(extra or {}),
                }
            )


def _diverged(trainer: ScoreTrainer, what: str, epoch: int) -> None:
    where = trainer.first_nonfinite()
    raise RunFailed(
        f"non-finite {what} at epoch {epoch + 1}"
        + (
            f" (first non-finite: {where})"
            if where
            else " (scores, weights and gradients are finite: the forward pass overflowed)"
        ),
        hint="try a smaller --lr",
    )


def resume(state: dict | None, trainer: ScoreTrainer, generator: torch.Generator) -> int:
    """Put a checkpointed trainer and generator back; returns the epochs already done (0 without a state)."""
    if state is None:
        return 0
    epoch = state["epoch"]
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"epoch {str(epoch)[:20]!r} is not a count of epochs")
    trainer.load_state_dict(state["trainer"])
    generator.set_state(state["generator"])
    return epoch


def augmented_density(spec: MethodSpec) -> float:
    """--aug-density if given, else the targetable variant: augmented keep density = 1 - requested sparsity."""
    return spec.aug_density if spec.aug_density is not None else spec.density


class ScoreMethod:
    """Score training with frozen weights; subclasses choose the score layout and how the final mask is read."""

    score_init = SCORE_INIT
    options = frozenset({"signed_scores", "global_topk", "precision"})
    data_parallel = True  # runs under torchrun (scores' gradients all-reduced, masks checked identical)
    augmented = False  # auxiliary score tensors?
    resumable = True  # takes extract(checkpoint=...) and resumes bit-identically

    def __init__(self):
        self.details: dict = {}  # what the run found beyond the masks (auxiliary shares, rounds), for reports

    def parts(self, spec: MethodSpec) -> int:
        return 1 + spec.aux_width if self.augmented else 1

    def densities(self, net: MaskedNet, spec: MethodSpec) -> dict[str, float]:
        if self.augmented:
            return dict.fromkeys(net.names, augmented_density(spec))
        if spec.global_topk and spec.layer_densities is not None:
            raise UsageError("--global and --layer-densities exclude each other")
        return param_densities(net, spec)

    def selection(self, net: MaskedNet, spec: MethodSpec) -> Selection:
        return Selection(net, spec, parts=self.parts(spec), densities=self.densities(net, spec))

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
    ) -> dict[str, torch.Tensor]:
        selection = self.selection(net, spec)
        trainer = ScoreTrainer(net, selection, spec, init_scores(net, selection.parts, generator))
        start = 0
        if checkpoint is not None:
            state = checkpoint.restore()
            with checkpoint.resuming():
                start = resume(state, trainer, generator)
        train_scores(trainer, data, spec, generator, progress, checkpoint=checkpoint, start_epoch=start)
        masks = trainer.masks()
        if self.augmented:
            self.details["aux"] = selection.aux_report(trainer.scores)
            self.details["aug_density"] = augmented_density(spec)
        self.details["score_params"] = score_params(selection.parts, trainer.aux_trains)
        if spec.project_final:
            masks = project(net, spec, trainer.scores)
        return masks


def score_params(parts: int, aux_trains: bool) -> dict[str, int]:
    """Trainable and total score parameters as multiples of the weight count (the ablation table's column)."""
    return {"trainable": parts if aux_trains else 1, "total": parts}


def project(net: MaskedNet, spec: MethodSpec, scores: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """--project-final: top-k of the original scores alone at exactly the requested density (per layer or global)."""
    original = {n: parts[:1] for n, parts in scores.items()}
    return Selection(net, spec, parts=1, densities=dict.fromkeys(net.names, spec.density)).select(original)


@METHODS.register("edge-popup")
class EdgePopup(ScoreMethod):
    name = "edge-popup"
    options = ScoreMethod.options | {"layer_densities"}


@METHODS.register("augmented")
class Augmented(ScoreMethod):
    name = "augmented"
    augmented = True
    options = ScoreMethod.options | {"aug_density", "aux_width", "frozen_aux", "project_final"}


@METHODS.register("iterated")
class Iterated(ScoreMethod):
    """DoubleScore-Iterated (Appendix B): a cumulative mask C, starting dense. Each round trains fresh augmented
    scores for --epochs with only C's active weights competing, at augmented keep density
    min(target density / current density, 1/2), and multiplies the round's mask into C. It stops when the
    achieved sparsity is within --iter-tolerance of the requested one, after --max-rounds rounds, or when a
    round removes nothing."""

    name = "iterated"
    augmented = True
    options = ScoreMethod.options | {"aux_width", "frozen_aux", "iter_tolerance", "max_rounds"}
    ROUND_DENSITY_CAP = 0.5

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
    ) -> dict[str, torch.Tensor]:
        total = sum(net.weights[n].numel() for n in net.names)
        cumulative = {
            n: torch.ones(net.weights[n].shape, dtype=torch.bool, device=net.weights[n].device) for n in net.names
        }
        rounds: list[dict] = []
        self.round_masks: list[dict[str, torch.Tensor]] = []  # the cumulative mask after each round
        state = checkpoint.restore() if checkpoint is not None else None
        first = 1
        if state is not None:  # resume inside round state["round"], from the cumulative mask before it
            with checkpoint.resuming():
                first, rounds = int(state["round"]), list(state["rounds"])
                self.round_masks = [{n: r[n].to(device, torch.bool) for n in net.names} for r in state["round_masks"]]
                if any(r[n].shape != cumulative[n].shape for r in self.round_masks for n in net.names):
                    raise ValueError("a saved round mask does not fit the model")
            cumulative = self.round_masks[-1] if self.round_masks else cumulative
        for r in range(first, spec.max_rounds + 1):
            current = sum(int(m.sum()) for m in cumulative.values()) / total
            d = min(spec.density / current, self.ROUND_DENSITY_CAP)
            selection = Selection(
                net, spec, parts=self.parts(spec), densities=dict.fromkeys(net.names, d), active=cumulative
            )
            trainer = ScoreTrainer(net, selection, spec, init_scores(net, selection.parts, generator))
            with checkpoint.resuming() if checkpoint is not None else nullcontext():
                start = resume(state if r == first else None, trainer, generator)
            context = {
                "round": r,
                "rounds": rounds,
                "round_masks": [{n: m.cpu() for n, m in c.items()} for c in self.round_masks],
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
            self.details["aux"] = selection.aux_report(trainer.scores)
            self.details["score_params"] = score_params(selection.parts, trainer.aux_trains)
            cumulative = {n: cumulative[n] & masks[n] for n in net.names}
            self.round_masks.append(cumulative)
            achieved = 1.0 - sum(int(m.sum()) for m in cumulative.values()) / total
            rounds = [*rounds, {"round": r, "aug_density": d, "achieved_sparsity": achieved}]
            if abs(achieved - spec.sparsity) <= spec.iter_tolerance or achieved <= 1.0 - current:
                break
        self.details["rounds"] = rounds
        return cumulative
