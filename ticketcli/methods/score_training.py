"""The one score-training loop shared by edge-popup and double-scoring: Adam on scores, straight-through
gradients through the hard top-k, frozen weights; checkpointing and divergence diagnosis.

The loss depends on the auxiliary scores T only through the hard top-k, so under the straight-through estimator
T's gradient is exactly zero (Theorem H.6): T is kept out of the autograd graph instead of being fed zeros.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

import torch
from torch import nn

from ticketcli.data.datasets import Splits
from ticketcli.errors import RunFailed
from ticketcli.files.checkpoint import Checkpointer
from ticketcli.masking import MaskedWeights
from ticketcli.methods.base import Progress
from ticketcli.methods.registry import option
from ticketcli.models.masked import MaskedNet, fan_in, layer_of
from ticketcli.runtime import distributed
from ticketcli.selection.scored import Selection
from ticketcli.specs.run import MethodSpec
from ticketcli.train import precision_context

SCORE_INIT = {
    "scheme": "kaiming-uniform",
    "bound": "1/sqrt(fan_in)",
    "note": "as allenai/hidden-networks (kaiming_uniform_, a=sqrt(5)); the paper does not state it",
}


def init_scores(net: MaskedNet, parts: int, generator: torch.Generator) -> dict[str, list[torch.Tensor]]:
    """U[-1/sqrt(fan_in), 1/sqrt(fan_in)] per score tensor, drawn on the CPU: for each parameter S, then T."""
    return dict(_draw(net, parts, generator))


def _bound(net: MaskedNet, name: str) -> float:
    w = net.weights[name]
    owner = net.weights.get(layer_of(name) + ".weight") if w.dim() == 1 else None
    return 1.0 / math.sqrt(fan_in(w, owner))


def _draw(net: MaskedNet, parts: int, generator: torch.Generator) -> Iterator[tuple[str, list[torch.Tensor]]]:
    for name in net.names:
        w, bound = net.weights[name], _bound(net, name)
        yield (
            name,
            [torch.empty(w.shape, dtype=w.dtype).uniform_(-bound, bound, generator=generator) for _ in range(parts)],
        )


def _draw_aux(net: MaskedNet, parts: int, generator: torch.Generator, only: str) -> list[torch.Tensor]:
    """_draw's auxiliary parts of the parameter `only`, the same bits (the generator advances by the same draws
    whatever tensor receives them), holding one tensor of a parameter's size at a time: the parameters before
    it are drawn into one scratch tensor each, and its S into its first auxiliary tensor, drawn over next."""
    for name in net.names:
        w, bound = net.weights[name], _bound(net, name)
        if name != only:
            scratch = torch.empty(w.shape, dtype=w.dtype)
            for _ in range(parts):
                scratch.uniform_(-bound, bound, generator=generator)
            del scratch
            continue
        aux = [torch.empty(w.shape, dtype=w.dtype) for _ in range(parts - 1)]
        aux[0].uniform_(-bound, bound, generator=generator)  # S's draw
        for t in aux:
            t.uniform_(-bound, bound, generator=generator)
        return aux
    raise KeyError(only)


Redraw = Callable[..., dict[str, list[torch.Tensor]]]  # redraw() for every parameter, redraw(name) for one


def seeded_scores(
    net: MaskedNet, parts: int, generator: torch.Generator
) -> tuple[dict[str, list[torch.Tensor]], Redraw]:
    """init_scores, and a function that draws the auxiliary parts again, bit for bit, from the generator's state
    before this draw (one parameter at a time): what lets a ScoreTrainer let fixed auxiliary scores go and still
    write them into its checkpoints."""
    state = generator.get_state()

    def redraw(only: str | None = None) -> dict[str, list[torch.Tensor]]:
        g = torch.Generator()
        g.set_state(state)
        if only is not None:
            return {only: _draw_aux(net, parts, g, only)}
        return {n: drawn[1:] for n, drawn in _draw(net, parts, g)}

    return init_scores(net, parts, generator), redraw


# A layer of at least this many weights (1 MiB of float32) has its W * H recomputed in the backward pass; a
# smaller one's is kept: its memory is small next to the activations, while recomputing costs Python per saved
# tensor (autograd's saved-tensor hooks) and a product: about 8% of a paper-MLP step if all its layers did it
# (benchmarks/step_phases.py), little next to a large layer's matrix products.
RECOMPUTE_MIN = 2**18


class ScoreState(TypedDict):
    """A score trainer's state: what a resumed run loads (ScoreTrainer.load_state_dict)."""

    scores: dict[str, list[torch.Tensor]]  # every part of each parameter's scores, on the CPU
    optimizer: dict[str, Any]  # Adam's own state_dict


class ScoreTrainer:
    """Adam on scores with straight-through gradients through the hard top-k; weights stay frozen.

    Auxiliary scores get exactly zero gradient (the loss sees them only through the hard top-k): they are kept
    out of the autograd graph, and only weight decay could move them (never with --frozen-aux)."""

    def __init__(
        self,
        net: MaskedNet,
        selection: Selection,
        spec: MethodSpec,
        scores: dict[str, list[torch.Tensor]],
        redraw: Redraw | None = None,
    ):
        self.net, self.selection, self.spec = net, selection, spec
        # per parameter: S (an nn.Parameter, trained), then the auxiliary tensors (trained only with weight decay)
        copies = {n: [s.detach().to(net.device, copy=True) for s in parts] for n, parts in scores.items()}
        trained = {n: nn.Parameter(c[0]) for n, c in copies.items()}
        self.scores: dict[str, list[torch.Tensor]] = {n: [trained[n], *copies[n][1:]] for n in copies}
        # under torchrun, DDP all-reduces the trained scores' gradients; the identity otherwise
        self.forward = distributed.replicate(list(trained.values()), self._forward)
        self.autocast = precision_context(net.device, spec.precision)
        # a built-in model's layers use each effective weight once, in a linear layer, a convolution or an
        # embedding: the gradient that reaches it is theirs to overwrite (a user's model may do anything)
        # which layers' W * H the backward pass makes again instead of keeping it from the forward pass
        self.recompute_min = RECOMPUTE_MIN
        self.builtin = type(net.module).__module__.startswith("ticketcli.") and hasattr(net.module, "forward_with")
        self.aux = [s for parts in self.scores.values() for s in parts[1:]]
        self.aux_trains = spec.weight_decay > 0 and not option(spec, "frozen_aux") and bool(self.aux)
        for t in self.aux:
            t.requires_grad_(self.aux_trains)
        # Fixed auxiliary scores are read once, by the selection's first call, which keeps what it ranks (sorted
        # |T|); given `redraw` (seeded_scores: how to draw them again for a checkpoint), the trainer then lets
        # them go (4 bytes a weight per auxiliary part). Trained ones (weight decay) stay.
        self.redraw = None if self.aux_trains or not self.aux else redraw
        self.released = False
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
        """One optimiser step; returns (loss, correct predictions, the hard masks used, bool)."""
        # the last step's gradients are not needed any more: freed before the forward pass instead of after it,
        # so that they and the forward pass's tensors are never held together
        self.opt.zero_grad(set_to_none=True)
        with torch.no_grad():  # bool: a quarter of a float mask's memory, and no bool -> float pass
            hard = self.selection.select(self.scores, aux_fixed=not self.aux_trains)
        if self.redraw is not None and not self.released:
            self._release_aux()
        # under torchrun: this rank's shard of the global batch; loss and correct count are the global ones
        loss, value, correct = distributed.cross_entropy_step(lambda xb: self.forward(xb, hard), x, y)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        if self.aux_trains:
            for t in self.aux:
                if t.grad is None:
                    t.grad = torch.zeros_like(t)
        if math.isfinite(value):  # a non-finite loss leaves the scores as they were, for the caller to diagnose
            self.opt.step()
        return value, correct, hard

    def _forward(self, x: torch.Tensor, hard: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits with the effective weights W * H, differentiable in the scores (straight-through); each W * H is
        made when its layer runs, and a large layer's is multiplied again in the backward pass instead of being
        kept (masking.MaskedWeights)."""
        effective = MaskedWeights(
            {n: parts[0] for n, parts in self.scores.items()},
            self.net.weights,
            hard,
            signed=self.spec.signed_scores,
            owned=self.builtin,
            recompute=[n for n, w in self.net.weights.items() if n in hard and w.numel() >= self.recompute_min],
        )
        with self.autocast(), effective.recomputing():
            return self.net.forward_with(x, effective)

    def _release_aux(self) -> None:
        """Let the fixed auxiliary scores go once the selection holds their ranking; non-finite ones stay, for
        the divergence check to name."""
        if self.redraw is None or not all(bool(torch.isfinite(t).all()) for t in self.aux):
            self.redraw = None
            return
        self.scores = {n: parts[:1] for n, parts in self.scores.items()}
        self.aux, self.released = [], True
        redraw = self.redraw
        # and the selection keeps only a window of their sorted ranking around each threshold (4 bytes a weight
        # less), drawing them again when a threshold leaves its window
        self.selection.window_aux(lambda name: redraw(name)[name])

    def state_dict(self) -> ScoreState:
        """Scores (every part, on the CPU; released auxiliary parts drawn again, the same bits) and Adam's state:
        with the generator, all a resumed run needs."""
        aux = self.redraw() if self.released and self.redraw is not None else {}
        return {
            "scores": {
                n: [s.detach().cpu().clone() for s in parts] + aux.get(n, []) for n, parts in self.scores.items()
            },
            "optimizer": self.opt.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.released:
            raise RuntimeError("a trainer that released its auxiliary scores cannot load a state")
        with torch.no_grad():
            for n, parts in self.scores.items():
                for s, saved in zip(parts, state["scores"][n], strict=True):
                    if not isinstance(saved, torch.Tensor) or saved.shape != s.shape:  # copy_ would broadcast
                        raise ValueError(f"saved scores of {n} do not have the shape {tuple(s.shape)}")
                    s.copy_(saved)
        self.opt.load_state_dict(state["optimizer"])
        if self.redraw is not None:  # saved auxiliary scores that are not the seed's draw are kept, never redrawn
            drawn = self.redraw()
            if not all(torch.equal(a.cpu(), b) for n in drawn for a, b in zip(self.scores[n][1:], drawn[n])):
                self.redraw = None

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
    extra: dict[str, int] | None = None,
    *,
    checkpoint: Checkpointer | None = None,
    start_epoch: int = 0,
    context: dict[str, Any] | None = None,
) -> None:
    """spec.epochs passes over the extraction split in seeded random order (last partial batch included).

    `extra` is merged into every progress record (the iterated variant adds its round). With a `checkpoint`,
    the trainer, the generator and `context` (a method's own state, e.g. iterated's round) are saved after every
    `checkpoint.every` epochs; a resumed run passes the saved epoch as `start_epoch`. A non-finite loss or score
    stops the run naming the epoch and the first offending parameter."""
    n = len(data.y_extract)  # examples (text: blocks, each of many targets)
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
            each = {name: int(m.sum()) for name, m in hard.items()}
            kept = sum(each.values())
            progress(
                {
                    "epoch": epoch + 1,
                    "epochs": spec.epochs,
                    "loss": loss_sum / n,
                    "accuracy": correct / data.y_extract.numel(),  # per target (text: per character)
                    "sparsity": 1.0 - kept / total_weights,
                    "densities": {name: k / max(hard[name].numel(), 1) for name, k in each.items()},  # for --log-to
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


def resume(state: dict[str, Any] | None, trainer: ScoreTrainer, generator: torch.Generator) -> int:
    """Put a checkpointed trainer and generator back; returns the epochs already done (0 without a state)."""
    if state is None:
        return 0
    epoch = state["epoch"]
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"epoch {str(epoch)[:20]!r} is not a count of epochs")
    trainer.load_state_dict(state["trainer"])
    generator.set_state(state["generator"])
    return epoch
