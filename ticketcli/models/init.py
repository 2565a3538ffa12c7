"""Deterministic weight initialisation from (spec, seed) on the CPU: the init schemes registry, each scheme declared
once (its description and its draw), and init_weights. Torch-free to import: --help and `ticket list inits` read
the registry, and each function imports torch only when it runs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ticketcli.registry import Registry
from ticketcli.specs.run import MODULE_INIT, InitSpec

if TYPE_CHECKING:
    import torch
    from torch import nn

RELU_GAIN = math.sqrt(2.0)


@dataclass(frozen=True)
class InitScheme:
    """One init scheme: its one line in `ticket list inits`, and its draw(shape, fan_in, k, generator) -> a CPU
    float32 tensor (called as the scheme itself)."""

    description: str
    draw: Callable[[torch.Size, int, float, torch.Generator], torch.Tensor]

    def __call__(self, shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
        return self.draw(shape, fan, k, g)


def scaled_kaiming_uniform(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """The paper's init: U[-gain/sqrt(k*fan_in), +gain/sqrt(k*fan_in)] with ReLU gain (k = 1/2 by default)."""
    import torch

    bound = RELU_GAIN / math.sqrt(k * fan)
    return torch.empty(shape).uniform_(-bound, bound, generator=g)


def signed_kaiming_constant(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """allenai/hidden-networks' signed constant: +-gain/sqrt(k*fan_in) with a random sign."""
    import torch

    std = RELU_GAIN / math.sqrt(k * fan)
    u = torch.empty(shape).uniform_(-1.0, 1.0, generator=g)
    return torch.where(u >= 0, std, -std)


def kaiming_normal(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """N(0, (gain/sqrt(k*fan_in))^2); k = 1 gives torch's kaiming_normal_ (fan_in, relu)."""
    import torch

    std = RELU_GAIN / math.sqrt(k * fan)
    return torch.empty(shape).normal_(0.0, std, generator=g)


def module_init(shape: torch.Size, fan: int, k: float, g: torch.Generator) -> torch.Tensor:
    """A user factory's own weights, as it created them under its fixed seed: init_weights keeps them all."""
    raise RuntimeError("init_weights keeps a module-initialised parameter; it never draws one")


INIT_SCHEMES: Registry[InitScheme] = Registry("init scheme")
INIT_SCHEMES.register("scaled-kaiming-uniform")(
    InitScheme("The paper's init: U[-b, b] with b = gain/sqrt(k*fan_in) (ReLU gain, k = 1/2).", scaled_kaiming_uniform)
)
INIT_SCHEMES.register("signed-kaiming-constant")(
    InitScheme(
        "+-gain/sqrt(k*fan_in) with a random sign (the hidden-networks signed constant).", signed_kaiming_constant
    )
)
INIT_SCHEMES.register("kaiming-normal")(
    InitScheme("N(0, (gain/sqrt(k*fan_in))^2); k = 1 is torch's kaiming_normal_ (fan_in, relu).", kaiming_normal)
)
INIT_SCHEMES.register(MODULE_INIT)(
    InitScheme(
        "Keep a model factory's own weights as it created them (under a fixed seed); factories only.", module_init
    )
)


def init_weights(module: nn.Module, spec: InitSpec) -> dict[str, torch.Tensor]:
    """Draw every masked parameter, in named_parameters() order, from one CPU generator seeded with spec.seed.

    Built-in models are all masked parameters; a user model's other parameters (norm layers, ...) keep the
    values its factory gave them, and under --init module its masked ones too."""
    import torch

    from ticketcli.models.masked import fan_in, layer_of, masked_names

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
