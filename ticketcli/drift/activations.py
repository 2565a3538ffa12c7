"""drift's registries: the activations it puts at every activation site and the losses it trains with."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ticketcli.registry import Registry
from ticketcli.specs.drift import EXACT_ZEROS
from ticketcli.train import Loss


@dataclass(frozen=True)
class Activation:
    fn: Callable[[torch.Tensor, float], torch.Tensor]  # (pre-activation h, clip c) -> activation a
    exact_zeros: bool  # True (spec.EXACT_ZEROS): sparsity counts a == 0; False (smooth): |a| < the zero threshold


ACTIVATIONS: Registry[Activation] = Registry("activation")
for _name, _fn in (
    ("relu", lambda h, c: torch.relu(h)),
    ("gelu", lambda h, c: F.gelu(h)),
    ("silu", lambda h, c: F.silu(h)),
    ("relu2", lambda h, c: torch.relu(h).square()),
    ("relu2-clip", lambda h, c: torch.relu(h).square().clamp(max=c)),  # min(relu², c)
    ("gelu2", lambda h, c: F.gelu(h).square()),
):
    ACTIVATIONS.register(_name)(Activation(_fn, _name in EXACT_ZEROS))


def _mse(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error against one-hot targets, averaged over examples and classes."""
    return F.mse_loss(logits, F.one_hot(y, logits.shape[1]).to(logits.dtype))


LOSSES: Registry[Loss] = Registry("loss")
LOSSES.register("cross-entropy")(F.cross_entropy)
LOSSES.register("mse")(_mse)
