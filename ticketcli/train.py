"""Evaluation of a masked network (training of weights arrives with train-weak)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ticketcli.models import MaskedNet

EVAL_CHUNK = 2048  # fixed, so that extraction and `ticket evaluate` run bit-identical arithmetic


@torch.no_grad()
def evaluate(net: MaskedNet, masks: dict[str, torch.Tensor] | None, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Mean cross-entropy, correct count and accuracy of W * M on (x, y)."""
    loss_sum, correct = 0.0, 0
    for i in range(0, y.numel(), EVAL_CHUNK):
        logits = net(x[i : i + EVAL_CHUNK], masks)
        yb = y[i : i + EVAL_CHUNK]
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
    n = y.numel()
    return {"accuracy": correct / n, "loss": loss_sum / n, "correct": correct, "n": n}
