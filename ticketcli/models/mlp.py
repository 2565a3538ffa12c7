"""The MLP family: `mlp:784-512-10` (optionally residual, with parameter-free norms) and LeNet-300-100, and the
MLP's forward pass from given parameters (`mlp_forward`), whose activation a caller varies and traces."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.specs.run import ModelSpec

# mlp "+norm=...": normalisation without learned parameters (edge-popup's non-affine convention, batchnorm.py)
NORMS: dict[str, Callable[[int], nn.Module]] = {
    "batch": lambda w: nn.BatchNorm1d(w, affine=False),
    "layer": lambda w: nn.LayerNorm(w, elementwise_affine=False),
    "rms": lambda w: nn.RMSNorm(w, eps=1e-5, elementwise_affine=False),
}

# mlp_forward's trace: per layer (input a, linear output z, activation input h, activation output)
MlpTrace = list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]


class MLP(nn.Module):
    """Flatten, then Linear layers with ReLU between them (no activation after the last).

    norm: a parameter-free norm layer `norms.i` between hidden Linear i and its activation. residual: a hidden
    Linear i (neither the first nor the last) whose input and output widths agree adds its input to its output,
    a_{i+1} = a_i + relu(norm(W_i a_i)): identity skips between equal-width hidden layers only."""

    def __init__(self, widths: tuple[int, ...], bias: bool, residual: bool = False, norm: str | None = None):
        super().__init__()
        if len(widths) < 2:
            raise UsageError("an mlp needs at least an input and an output width")
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = None if norm is None else nn.ModuleList(NORMS[norm](w) for w in widths[1:-1])
        self.skips = frozenset(i for i in range(1, len(widths) - 2) if residual and widths[i] == widths[i + 1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The plain PyTorch forward pass (the oracle for forward_with)."""
        a = x.flatten(1)
        for i, layer in enumerate(self.layers[:-1]):
            z = layer(a)
            out = torch.relu(z if self.norms is None else self.norms[i](z))
            a = a + out if i in self.skips else out
        return cast(torch.Tensor, self.layers[-1](a))  # a Module call is typed Any

    def forward_with(
        self,
        x: torch.Tensor,
        params: dict[str, torch.Tensor],
        act: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
        trace: MlpTrace | None = None,
    ) -> torch.Tensor:
        """The forward pass with these tensors as parameters (cheaper than torch.func.functional_call); see
        mlp_forward for `act` and `trace`."""
        return mlp_forward(x, params, len(self.layers), act, trace, self.norms, self.skips)


def mlp_forward(
    x: torch.Tensor,
    params: dict[str, torch.Tensor],
    n_layers: int,
    act: Callable[[torch.Tensor], torch.Tensor] | Sequence[Callable[[torch.Tensor], torch.Tensor]] = torch.relu,
    trace: MlpTrace | None = None,
    norms: nn.ModuleList | None = None,
    skips: frozenset[int] = frozenset(),
) -> torch.Tensor:
    """An MLP's forward pass from its parameters, with `act` between layers (a caller's choice; a sequence: one
    function per hidden layer), norms[i] before
    hidden activation i and identity skips around the hidden layers in `skips`. With a trace list, appends per
    layer (input a, linear output z, activation input h = norm(z), activation output act(h)); the last layer's
    is (a, z, z, z)."""
    a = x.flatten(1)  # (B, in_features)
    for i in range(n_layers):
        z = F.linear(a, params[f"layers.{i}.weight"], params.get(f"layers.{i}.bias"))  # (B, out_i)
        if i == n_layers - 1:
            if trace is not None:
                trace.append((a, z, z, z))
            return z
        h = z if norms is None else norms[i](z)
        out = act[i](h) if isinstance(act, Sequence) else act(h)
        if trace is not None:
            trace.append((a, z, h, out))
        a = a + out if i in skips else out
    raise ValueError("an MLP has at least one layer")


def build_mlp(spec: ModelSpec) -> nn.Module:
    return MLP(spec.widths, spec.bias, spec.residual, spec.norm)


def build_lenet300(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """LeNet-300-100: an MLP in_features-300-100-classes."""
    c, h, w = shape
    return MLP((c * h * w, 300, 100, classes), spec.bias)
