"""Score-based methods: edge-popup and double-scoring share one score-training loop and differ only in selection.

edge-popup (Ramanujan et al.): one score tensor S per parameter; mask = top-k of |S| at the layer's density.
augmented (double-scoring, Algorithm 1): scores S and auxiliary T per parameter; top-k of |(S, T)| in the
augmented space at the augmented density, restricted to the original coordinates. The loss depends on T only
through the hard top-k, so under the straight-through estimator T's gradient is exactly zero (Theorem H.6):
T is kept out of the autograd graph instead of being fed zeros.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ticketcli.data import Splits
from ticketcli.errors import RunFailed, UsageError
from ticketcli.masking import TopKSelector, keep_count, masked_weight
from ticketcli.methods.base import Progress, param_densities
from ticketcli.methods.registry import METHODS
from ticketcli.models import MaskedNet, fan_in, layer_of
from ticketcli.specs import MethodSpec

SCORE_INIT = {"scheme": "kaiming-uniform", "bound": "1/sqrt(fan_in)",
              "note": "as allenai/hidden-networks (kaiming_uniform_, a=sqrt(5)); the paper does not state it"}


def init_scores(net: MaskedNet, parts: int, generator: torch.Generator) -> dict[str, list[torch.Tensor]]:
    """U[-1/sqrt(fan_in), 1/sqrt(fan_in)] per score tensor, drawn on the CPU: for each parameter S, then T."""
    out = {}
    for name in net.names:
        w = net.weights[name]
        owner = net.weights.get(layer_of(name) + ".weight") if w.dim() == 1 else None
        bound = 1.0 / math.sqrt(fan_in(w, owner))
        out[name] = [torch.empty(w.shape, dtype=w.dtype).uniform_(-bound, bound, generator=generator)
                     for _ in range(parts)]
    return out


class Selection:
    """How score magnitudes become a hard mask on the original coordinates."""

    parts = 1  # score tensors per parameter

    def __init__(self, net: MaskedNet, spec: MethodSpec):
        self.keep = self.keep_counts(net, spec)  # param name -> entries kept (in the selection space)
        self.topk = TopKSelector()

    def keep_counts(self, net: MaskedNet, spec: MethodSpec) -> dict[str, int]:
        dens = param_densities(net, spec)
        return {n: keep_count(dens[n], net.weights[n].numel()) for n in net.names}

    def select(self, name: str, magnitudes: list[torch.Tensor], dtype: torch.dtype = torch.bool,
               frozen_aux: bool = False) -> torch.Tensor:
        """Top-k over all magnitude tensors of a parameter taken together, restricted to the original ones."""
        return self.topk(name, magnitudes, self.keep[name], dtype, frozen=frozen_aux)


class AugmentedSelection(Selection):
    """Top-k over the concatenation (|S|, |T|), restricted to S's coordinates."""

    parts = 2

    def keep_counts(self, net: MaskedNet, spec: MethodSpec) -> dict[str, int]:
        if spec.layer_densities is not None:
            raise UsageError("--layer-densities applies to edge-popup and random; augmented uses one "
                             "augmented-space density (--sparsity or --aug-density)")
        d = augmented_density(spec)
        return {n: keep_count(d, 2 * net.weights[n].numel()) for n in net.names}


def augmented_density(spec: MethodSpec) -> float:
    """--aug-density if given, else the targetable variant: augmented keep density = 1 - requested sparsity."""
    return spec.aug_density if spec.aug_density is not None else spec.density


class ScoreTrainer:
    """Adam on scores with straight-through gradients through the hard top-k; weights stay frozen."""

    def __init__(self, net: MaskedNet, selection: Selection, spec: MethodSpec,
                 scores: dict[str, list[torch.Tensor]]):
        self.net, self.selection, self.spec = net, selection, spec
        self.scores = {n: [s.detach().to(net.device, copy=True).requires_grad_(i == 0) for i, s in enumerate(parts)]
                       for n, parts in scores.items()}
        self.aux = [s for parts in self.scores.values() for s in parts[1:]]
        for t in self.aux:  # auxiliary scores only ever see zero gradients; weight decay alone could move them
            t.requires_grad_(spec.weight_decay > 0)
        # |T| of auxiliary scores that never change is computed once
        self.frozen_mags = {n: [t.detach().abs() for t in parts[1:]] for n, parts in self.scores.items()
                            if not any(t.requires_grad for t in parts[1:])}
        trainable = [parts[0] for parts in self.scores.values()] + [t for t in self.aux if t.requires_grad]
        self.opt = torch.optim.Adam(trainable, lr=spec.lr, betas=spec.betas, eps=spec.eps,
                                    weight_decay=spec.weight_decay, fused=net.device.type in ("cpu", "cuda"))

    def masks(self) -> dict[str, torch.Tensor]:
        """Current hard masks (bool), from the current scores."""
        with torch.no_grad():
            return {n: self.selection.select(n, [s.abs() for s in parts]) for n, parts in self.scores.items()}

    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[float, int, dict[str, torch.Tensor]]:
        """One optimiser step; returns (loss, correct predictions, the hard 0/1 masks used)."""
        hard, effective = {}, {}
        for n, parts in self.scores.items():
            with torch.no_grad():
                frozen = n in self.frozen_mags
                aux = self.frozen_mags[n] if frozen else [t.abs() for t in parts[1:]]
                hard[n] = self.selection.select(n, [parts[0].abs(), *aux], parts[0].dtype, frozen)  # 0/1 floats
            effective[n] = masked_weight(parts[0], self.net.weights[n], hard[n])
        logits = self.net.forward_with(x, effective)
        loss = F.cross_entropy(logits, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        for t in self.aux:
            if t.requires_grad and t.grad is None:
                t.grad = torch.zeros_like(t)
        self.opt.step()
        correct = int((logits.argmax(1) == y).sum())
        return float(loss.detach()), correct, hard


def train_scores(trainer: ScoreTrainer, data: Splits, spec: MethodSpec, generator: torch.Generator,
                 progress: Progress | None) -> None:
    """spec.epochs passes over the extraction split in seeded random order (last partial batch included)."""
    n = data.y_extract.numel()
    total_weights = sum(trainer.net.weights[n].numel() for n in trainer.net.names)
    for epoch in range(spec.epochs):
        order = torch.randperm(n, generator=generator).to(data.x_extract.device)
        loss_sum, correct = 0.0, 0
        for i in range(0, n, spec.batch_size):
            idx = order[i : i + spec.batch_size]
            loss, c, hard = trainer.step(data.x_extract[idx], data.y_extract[idx])
            if not math.isfinite(loss):
                raise RunFailed(f"non-finite loss at epoch {epoch + 1}; try a smaller --lr")
            loss_sum += loss * idx.numel()
            correct += c
        if progress is not None:
            kept = sum(int(m.sum()) for m in hard.values())
            progress({"epoch": epoch + 1, "epochs": spec.epochs, "loss": loss_sum / n, "accuracy": correct / n,
                      "sparsity": 1.0 - kept / total_weights})


class ScoreMethod:
    selection_cls: type[Selection] = Selection
    score_init = SCORE_INIT

    def extract(self, net: MaskedNet, data: Splits, spec: MethodSpec, *, device: torch.device,
                generator: torch.Generator, progress: Progress | None) -> dict[str, torch.Tensor]:
        selection = self.selection_cls(net, spec)
        self.check(spec)
        trainer = ScoreTrainer(net, selection, spec, init_scores(net, selection.parts, generator))
        train_scores(trainer, data, spec, generator, progress)
        return trainer.masks()

    def check(self, spec: MethodSpec) -> None:
        pass


@METHODS.register("edge-popup")
class EdgePopup(ScoreMethod):
    name = "edge-popup"

    def check(self, spec: MethodSpec) -> None:
        if spec.aug_density is not None:
            raise UsageError("--aug-density applies to the augmented method only")


@METHODS.register("augmented")
class Augmented(ScoreMethod):
    name = "augmented"
    selection_cls = AugmentedSelection
