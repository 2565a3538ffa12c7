"""drift's registries: the activations it puts at every activation site and the losses it trains with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ticketcli.registry import Registry
from ticketcli.train import Loss


@dataclass(frozen=True)
class Activation:
    fn: Callable[[torch.Tensor, float], torch.Tensor]  # (pre-activation h, clip c) -> activation a
    exact_zeros: bool  # True: sparsity counts a == 0; False (smooth): |a| < the zero threshold


ACTIVATIONS: Registry[Activation] = Registry("activation")
ACTIVATIONS.register("relu")(Activation(lambda h, c: torch.relu(h), True))
ACTIVATIONS.register("gelu")(Activation(lambda h, c: F.gelu(h), False))
ACTIVATIONS.register("silu")(Activation(lambda h, c: F.silu(h), False))
ACTIVATIONS.register("relu2")(Activation(lambda h, c: torch.relu(h).square(), True))
ACTIVATIONS.register("relu2-clip")(Activation(lambda h, c: torch.relu(h).square().clamp(max=c), True))  # min(relu², c)
ACTIVATIONS.register("gelu2")(Activation(lambda h, c: F.gelu(h).square(), False))


def _mse(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error against one-hot targets, averaged over examples and classes."""
    return F.mse_loss(logits, F.one_hot(y, logits.shape[1]).to(logits.dtype))


LOSSES: Registry[Loss] = Registry("loss")
LOSSES.register("cross-entropy")(F.cross_entropy)
LOSSES.register("mse")(_mse)
