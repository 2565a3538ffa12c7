"""Deterministic weight initialisation from (spec, seed) on the CPU: the init schemes registry and init_weights."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ticketcli.models.masked import fan_in, layer_of, masked_names
from ticketcli.registry import Registry
from ticketcli.specs.run import MODULE_INIT, InitSpec

RELU_GAIN = math.sqrt(2.0)

# scheme(shape, fan_in, k, generator) -> CPU float32 tensor
InitFn = Callable[[torch.Size, int, float, torch.Generator], torch.Tensor]
INIT_SCHEMES: Registry[InitFn] = Registry("init scheme")


@INIT_SCHEMES.register("scaled-kaiming-uniform")
def scaled_kaiming_uniform(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """The paper's init: U[-gain/sqrt(k*fan_in), +gain/sqrt(k*fan_in)] with ReLU gain (k = 1/2 by default)."""
    bound = RELU_GAIN / math.sqrt(k * fan)
    return torch.empty(shape).uniform_(-bound, bound, generator=g)


@INIT_SCHEMES.register("signed-kaiming-constant")
def signed_kaiming_constant(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """allenai/hidden-networks' signed constant: +-gain/sqrt(k*fan_in) with a random sign."""
    std = RELU_GAIN / math.sqrt(k * fan)
    u = torch.empty(shape).uniform_(-1.0, 1.0, generator=g)
    return torch.where(u >= 0, std, -std)


@INIT_SCHEMES.register("kaiming-normal")
def kaiming_normal(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """N(0, (gain/sqrt(k*fan_in))^2); k = 1 gives torch's kaiming_normal_ (fan_in, relu)."""
    std = RELU_GAIN / math.sqrt(k * fan)
    return torch.empty(shape).normal_(0.0, std, generator=g)


@INIT_SCHEMES.register(MODULE_INIT)
def module_init(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """A user factory's own weights, as it created them under its fixed seed: init_weights keeps them all."""
    raise RuntimeError("init_weights keeps a module-initialised parameter; it never draws one")


def init_weights(module: nn.Module, spec: InitSpec) -> dict[str, torch.Tensor]:
    """Draw every masked parameter, in named_parameters() order, from one CPU generator seeded with spec.seed.

    Built-in models are all masked parameters; a user model's other parameters (norm layers, ...) keep the
    values its factory gave them, and under --init module its masked ones too."""
    scheme = INIT_SCHEMES.get(spec.scheme)
    g = torch.Generator().manual_seed(spec.seed)
    params = dict(module.named_parameters())
    masked = set() if spec.scheme == MODULE_INIT else set(masked_names(module))
    out = {}
    for name, p in params.items():
        if name not in masked:
            out[name] = p.detach().to("cpu", torch.float32, copy=True)
            continue
        owner_weight = params.get(layer_of(name) + ".weight") if p.dim() == 1 else None
        out[name] = scheme(p.shape, fan_in(p, owner_weight), spec.k, g).to(torch.float32)
    return out
