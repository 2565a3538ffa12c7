"""Evaluation of a masked network, and training of weights under a (fixed or changing) mask.

WeightTrainer is the one weight-training primitive: train-weak, the sparse-training baselines (IMP, SET,
RigL, movement) and a study's training build on it. It trains *copies* of the frozen weights; the network itself is
never modified, so rewinding is free. Masked entries are exactly zero throughout: the forward pass uses
W * M (so masked entries get zero gradient) and every step re-applies the mask (so optimiser state left
over from before a mask change cannot move them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.contract.schema import JsonObject
from ticketcli.data.datasets import Splits
from ticketcli.errors import RunFailed, UsageError
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.models.masked import MaskedNet
from ticketcli.runtime import distributed
from ticketcli.specs.run import MethodSpec
from ticketcli.specs.run import WeightOptim as WeightOptim  # re-exported: WeightTrainer's optimiser spec
from ticketcli.specs.weak import WeakSpec

EVAL_CHUNK = 2048  # fixed, so that extraction and `ticket evaluate` run bit-identical arithmetic

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, labels) -> scalar
Forward = Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor]  # (x, params) -> logits


@torch.no_grad()
def evaluate(
    net: MaskedNet,
    masks: dict[str, torch.Tensor] | None,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    chunks: ChunkProgress | None = None,
    phase: str = "evaluation",
) -> JsonObject:
    """Mean cross-entropy, correct count and accuracy of W * M on (x, y) (BatchNorm on statistics recomputed for
    these masks and weights: MaskedNet.calibrate). `chunks` is told the recalibration's chunks, then this
    evaluation's as `phase` (the counts the loop has anyway: no extra synchronisation)."""
    net.calibrate(masks, chunks)
    loss_sum, correct = 0.0, 0
    n, rows = y.numel(), len(y)  # targets, examples (text: characters, blocks)
    total = math.ceil(rows / EVAL_CHUNK)
    if chunks is not None:
        chunks(phase, 0, total)
    for i in range(0, rows, EVAL_CHUNK):
        logits = net(x[i : i + EVAL_CHUNK], masks)
        yb = y[i : i + EVAL_CHUNK]
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
        if chunks is not None:
            chunks(phase, i // EVAL_CHUNK + 1, total)
    measured: JsonObject = {"accuracy": correct / n, "loss": loss_sum / n, "correct": correct, "n": n}
    if y.dim() == 2:  # next-character prediction: the loss per character in bits, and its perplexity
        measured.update(language_metrics(loss_sum / n))
    return measured


def language_metrics(loss: float) -> JsonObject:
    """A language model's numbers beside its mean loss in nats per character: bits per character and perplexity."""
    return {"bits_per_char": loss / math.log(2), "perplexity": math.exp(loss) if loss < 700 else math.inf}


def precision_context(device: torch.device, precision: str) -> Callable[[], AbstractContextManager[Any]]:
    """What the forward pass runs under: nothing (fp32), or bf16 autocast on the device. Evaluation never
    autocasts, so a ticket's stored accuracies are fp32 ones whatever precision extracted it."""
    if precision == "fp32":
        return nullcontext
    if precision == "bf16":
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}")


def build_optimizer(optim: WeightOptim, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """The torch optimiser `optim` describes, over `params`."""
    if optim.name == "adam":
        fused = params[0].device.type in ("cpu", "cuda")
        return torch.optim.Adam(
            params, lr=optim.lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay, fused=fused
        )
    if optim.name == "sgd":
        return torch.optim.SGD(params, lr=optim.lr, momentum=optim.momentum, weight_decay=optim.weight_decay)
    raise ValueError(f"unknown optimiser {optim.name!r}")


class WeightTrainer:
    """Trains copies of net's weights with W * M in the forward pass; masks=None trains densely.

    `params` holds the trained weights (masked entries exactly zero); `masks` are float 0/1 tensors and may be
    replaced between steps with `set_masks` (SET, RigL, IMP)."""

    def __init__(
        self,
        net: MaskedNet,
        masks: dict[str, torch.Tensor] | None,
        optim: WeightOptim,
        weights: dict[str, torch.Tensor] | None = None,
        precision: str = "fp32",
    ):
        self.net, self.optim = net, optim
        source = weights if weights is not None else net.weights
        self.params = {n: nn.Parameter(source[n].detach().to(net.device, torch.float32, copy=True)) for n in net.names}
        self.masks: dict[str, torch.Tensor] | None = None
        if masks is not None:
            self.set_masks(masks)
        self.opt = build_optimizer(optim, list(self.params.values()))
        self.autocast = precision_context(net.device, precision)
        # under torchrun, DDP all-reduces the weights' gradients (train-weak); the identity otherwise
        self.replica = distributed.replicate(list(self.params.values()), self._forward)

    @torch.no_grad()
    def set_masks(self, masks: dict[str, torch.Tensor]) -> None:
        """Use these masks from now on; entries they drop become exactly zero."""
        self.masks = {n: masks[n].to(self.params[n].device, torch.float32) for n in self.params}
        for n, p in self.params.items():
            p.mul_(self.masks[n])

    def effective(self) -> dict[str, torch.Tensor]:
        """The weights the forward pass uses: W * M (or W when dense)."""
        if self.masks is None:
            return dict(self.params)
        return {n: p * self.masks[n] for n, p in self.params.items()}

    def step(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: Loss = F.cross_entropy, forward: Forward | None = None
    ) -> tuple[float, int]:
        """One optimiser step; returns (loss, correct predictions). `forward(x, params) -> logits` replaces the
        network's own forward pass (e.g. the same MLP with other activations). RigL's dense gradient
        comes from dense_gradient()."""
        if distributed.world().active:
            if forward is not None or loss_fn is not F.cross_entropy:
                raise UsageError("only the default forward pass and cross-entropy loss run data-parallel")
            loss, lv, correct = distributed.cross_entropy_step(self.replica, x, y)
        else:
            with self.autocast():
                logits = (forward or self.net.forward_with)(x, self.effective())
            loss = loss_fn(logits, y)
            lv, correct = float(loss.detach()), int((logits.argmax(1) == y).sum())
        if not math.isfinite(lv):
            raise RunFailed("non-finite loss while training weights; try a smaller --lr")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        self.opt.step()
        if self.masks is not None:
            with torch.no_grad():
                for n, p in self.params.items():
                    p.mul_(self.masks[n])
        return lv, correct

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.net.forward_with(x, self.effective())

    def dense_gradient(
        self, x: torch.Tensor, y: torch.Tensor, loss_fn: Loss = F.cross_entropy
    ) -> dict[str, torch.Tensor]:
        """dL/d(W*M) for every entry, masked ones included, on (x, y) without taking a step (RigL's regrowth)."""
        eff = {n: t.detach().requires_grad_(True) for n, t in self.effective().items()}
        loss = loss_fn(self.net.forward_with(x, eff), y)
        return dict(zip(eff, torch.autograd.grad(loss, list(eff.values()))))

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained weights (detached; masked entries zero)."""
        return {n: p.detach() for n, p in self.params.items()}


StepHook = Callable[[int, torch.Tensor, torch.Tensor], None]  # (global step, x batch, y batch) after each step


def train_weights(
    trainer: WeightTrainer,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    on_step: StepHook | None = None,
    loss_fn: Loss = F.cross_entropy,
) -> list[dict[str, Any]]:
    """`epochs` passes over (x, y) in seeded random order (last partial batch included).

    Returns one record per epoch: {"epoch", "loss", "accuracy"} (training loss/accuracy over the epoch);
    on_epoch gets each record as it is made (add validation there)."""
    n = len(y)  # examples (text: blocks)
    history, step = [], 0
    for epoch in range(epochs):
        order = torch.randperm(n, generator=generator).to(x.device)
        loss_sum, correct = 0.0, 0
        for i in range(0, n, batch_size):
            idx = order[i : i + batch_size]
            xb, yb = x[idx], y[idx]
            loss, c = trainer.step(xb, yb, loss_fn)
            step += 1
            if on_step is not None:
                on_step(step, xb, yb)
            loss_sum += loss * idx.numel()
            correct += c
        record = {"epoch": epoch + 1, "loss": loss_sum / n, "accuracy": correct / y.numel()}  # per target
        history.append(record)
        if on_epoch is not None:
            on_epoch(record)
    return history


def train_on_extract(
    trainer: WeightTrainer,
    data: Splits,
    spec: MethodSpec | WeakSpec,
    generator: torch.Generator,
    *,
    epochs: int | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    on_step: StepHook | None = None,
) -> list[dict[str, Any]]:
    """train_weights on the extraction split, spec.batch_size examples a step, for `epochs` (default spec.epochs):
    the loop of every weight-training method and of train-weak."""
    return train_weights(
        trainer,
        data.x_extract,
        data.y_extract,
        epochs=spec.epochs if epochs is None else epochs,
        batch_size=spec.batch_size,
        generator=generator,
        on_epoch=on_epoch,
        on_step=on_step,
    )
