"""Activation sites: the nonlinearities of a model as small modules whose function can be chosen and whose input
can be observed (a study of activations varies the one and measures the other).

A site names the Linear/Conv2d layer that feeds it (`source`): the pre-activation it sees is that layer's output,
after any normalisation and, where a residual sum is activated (a ResNet block's last ReLU), after the sum. A model
with sites takes an optional `Trace` in its `forward_with`; the trace then holds, per layer the forward pass ran
through, its input and output, and per site its pre-activation and activation. Without a trace nothing is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

ActFn = Callable[[torch.Tensor], torch.Tensor]


class ActSite(nn.Module):
    """act(h) for the pre-activation h of the layer `source`; `fn` is the model's own activation until changed."""

    def __init__(self, source: str, fn: ActFn = torch.relu):
        super().__init__()
        self.source = source  # e.g. "layers.0", "layer1.0.conv1", "blocks.0.mlp.fc1"
        self.fn = fn

    def forward(self, h: torch.Tensor, trace: Trace | None = None) -> torch.Tensor:
        out = self.fn(h)
        if trace is not None:
            trace.site(self.source, h, out)
        return out


@dataclass
class LayerRecord:
    """One layer's pass: input a and output z (in the autograd graph), and the activation it feeds, if any."""

    a: torch.Tensor  # (B, in) | (B, C, H, W) | (B, N, D)
    z: torch.Tensor  # (B, out) | (B, C', H', W') | (B, N, D')
    conv: nn.Conv2d | None = None  # the geometry (kernel, stride, padding) of a convolution
    h: torch.Tensor | None = None  # what the site's activation saw (z's shape)
    out: torch.Tensor | None = None  # the site's activation


class Trace:
    """What one traced forward pass recorded, by layer name (the parameter prefix), in forward order."""

    def __init__(self) -> None:
        self.layers: dict[str, LayerRecord] = {}

    def layer(self, name: str, a: torch.Tensor, z: torch.Tensor, conv: nn.Conv2d | None = None) -> None:
        self.layers[name] = LayerRecord(a, z, conv)

    def site(self, source: str, h: torch.Tensor, out: torch.Tensor) -> None:
        record = self.layers[source]  # a site is always reached after the layer feeding it
        record.h, record.out = h, out

    def measured(self) -> list[str]:
        """Every layer the pass ran through, in order (an MLP's: all of them)."""
        return list(self.layers)


def find_sites(module: nn.Module) -> list[ActSite]:
    """Every activation site of a model, in module order."""
    return [m for m in module.modules() if isinstance(m, ActSite)]


def traced_linear(name: str, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
    """F.linear with p[name.weight] (and p[name.bias]), recorded in the trace."""
    z = torch.nn.functional.linear(x, p[f"{name}.weight"], p.get(f"{name}.bias"))
    if trace is not None:
        trace.layer(name, x, z)
    return z


def traced_conv(
    m: nn.Conv2d, name: str, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None
) -> torch.Tensor:
    """m's convolution with p[name.weight] (and p[name.bias]) as its parameters, recorded in the trace."""
    z = torch.nn.functional.conv2d(x, p[f"{name}.weight"], p.get(f"{name}.bias"), m.stride, m.padding)
    if trace is not None:
        trace.layer(name, x, z, m)
    return z
