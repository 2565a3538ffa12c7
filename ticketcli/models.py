"""Architecture registry and MaskedNet: a plain nn.Module whose frozen parameters are multiplied by masks."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ticketcli.errors import UsageError
from ticketcli.registry import Registry
from ticketcli.specs import ModelSpec

MODELS: Registry[Callable[[ModelSpec], nn.Module]] = Registry("model")


class MLP(nn.Module):
    """Flatten, then Linear layers with ReLU between them (no activation after the last)."""

    def __init__(self, widths: tuple[int, ...], bias: bool):
        super().__init__()
        if len(widths) < 2:
            raise UsageError("an mlp needs at least an input and an output width")
        self.in_features = widths[0]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_with(x, dict(self.named_parameters()))

    def forward_with(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward pass with these tensors as parameters (cheaper than torch.func.functional_call)."""
        x = x.flatten(1)  # (B, in_features)
        last = len(self.layers) - 1
        for i in range(last + 1):
            x = F.linear(x, params[f"layers.{i}.weight"], params.get(f"layers.{i}.bias"))
            if i < last:
                x = torch.relu(x)
        return x


@MODELS.register("mlp")
def build_mlp(spec: ModelSpec) -> nn.Module:
    return MLP(spec.widths, spec.bias)


def build_model(spec: ModelSpec) -> nn.Module:
    """An nn.Module for the spec, parameters frozen (values come from init.py or a checkpoint)."""
    net = MODELS.get(spec.arch)(spec)
    for p in net.parameters():
        p.requires_grad_(False)
    return net


def layer_of(param_name: str) -> str:
    """The module that owns a parameter: 'layers.0.weight' -> 'layers.0'."""
    return param_name.rpartition(".")[0]


def fan_in(param: torch.Tensor, weight_for_bias: torch.Tensor | None = None) -> int:
    """Fan-in of a weight (in_features * receptive field); a bias uses its layer's weight."""
    w = weight_for_bias if weight_for_bias is not None else param
    return int(w[0].numel()) if w.dim() > 1 else int(w.numel())


class MaskedNet:
    """A frozen network plus its masked parameter names; forward(x, masks) uses W * M for every masked W."""

    def __init__(self, module: nn.Module, spec: ModelSpec | None = None):
        self.module = module
        self.spec = spec
        self.weights: dict[str, torch.Tensor] = {n: p.detach() for n, p in module.named_parameters()}
        self.names: list[str] = list(self.weights)  # every parameter is masked (named_parameters order)

    def to(self, device: torch.device) -> MaskedNet:
        self.module.to(device)
        self.weights = {n: p.detach() for n, p in self.module.named_parameters()}
        return self

    @property
    def device(self) -> torch.device:
        return next(iter(self.weights.values())).device

    def shapes(self) -> dict[str, list[int]]:
        return {n: list(w.shape) for n, w in self.weights.items()}

    def layers(self) -> dict[str, list[str]]:
        """Layer name -> its masked parameter names, in order."""
        out: dict[str, list[str]] = {}
        for n in self.names:
            out.setdefault(layer_of(n), []).append(n)
        return out

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.module.named_parameters():
                p.copy_(weights[n])

    def forward(self, x: torch.Tensor, masks: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        if masks is None:
            return self.module(x)
        return self.forward_with(x, {n: self.weights[n] * masks[n].to(self.weights[n].dtype) for n in self.names})

    def forward_with(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The module's forward with these tensors in place of its parameters."""
        fast = getattr(self.module, "forward_with", None)  # our own models skip functional_call's overhead
        return fast(x, params) if fast is not None else functional_call(self.module, params, (x,))

    __call__ = forward
