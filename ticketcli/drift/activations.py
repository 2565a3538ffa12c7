"""drift's registries, torch-free: ACTIVATIONS (what `ticket drift --activation` puts at every activation site) and
LOSSES (what it trains with). Each is declared once here, so that --help and the resolution of drift's flags read
the names without torch; each function imports torch only when it is called."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ticketcli.drift.spec import EXACT_ZEROS
from ticketcli.registry import Registry

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Activation:
    fn: Callable[[torch.Tensor, float], torch.Tensor]  # (pre-activation h, clip c) -> activation a
    exact_zeros: bool  # True (spec.EXACT_ZEROS): sparsity counts a == 0; False (smooth): |a| < the zero threshold


def _relu(h: torch.Tensor, c: float) -> torch.Tensor:
    import torch

    return torch.relu(h)


def _gelu(h: torch.Tensor, c: float) -> torch.Tensor:
    import torch.nn.functional as F

    return F.gelu(h)


def _silu(h: torch.Tensor, c: float) -> torch.Tensor:
    import torch.nn.functional as F

    return F.silu(h)


def _relu2(h: torch.Tensor, c: float) -> torch.Tensor:
    return _relu(h, c).square()


def _relu2_clip(h: torch.Tensor, c: float) -> torch.Tensor:
    return _relu(h, c).square().clamp(max=c)  # min(relu², c)


def _gelu2(h: torch.Tensor, c: float) -> torch.Tensor:
    return _gelu(h, c).square()


ACTIVATIONS: Registry[Activation] = Registry("activation")
for _name, _fn in (
    ("relu", _relu),
    ("gelu", _gelu),
    ("silu", _silu),
    ("relu2", _relu2),
    ("relu2-clip", _relu2_clip),
    ("gelu2", _gelu2),
):
    ACTIVATIONS.register(_name)(Activation(_fn, _name in EXACT_ZEROS))


def _cross_entropy(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(logits, y)


def _mse(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error against one-hot targets, averaged over examples and classes."""
    import torch.nn.functional as F

    return F.mse_loss(logits, F.one_hot(y, logits.shape[1]).to(logits.dtype))


LOSSES: Registry[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = Registry("loss")
LOSSES.register("cross-entropy")(_cross_entropy)
LOSSES.register("mse")(_mse)
