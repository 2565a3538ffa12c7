"""The network a sparse form is made into, without its weights: `meta_network` builds a built-in model with its
parameters on the meta device and its position embeddings (fixed functions of the geometry, which no file holds)
computed; `called_directly` finds the layers a character-level GPT reads as a table rather than calls (its token
embedding, which every sparse form keeps dense); `positions` is how many rows a GPT's Linear layers multiply per
sequence."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import cast

import torch
from torch import nn
from torch.nn.modules.module import register_module_parameter_registration_hook

from ticketcli.export.sparse.net import ids_example, layer_inputs
from ticketcli.models.build import build_model
from ticketcli.models.gpt import GPTNano
from ticketcli.specs.run import ModelSpec


def positions(module: nn.Module) -> int:
    """The rows a Linear layer of `module` multiplies per example: a character-level GPT's context (one row per
    position of a sequence), 1 for any other network's Linear layers."""
    return module.context if isinstance(module, GPTNano) else 1


def meta_network(model: ModelSpec) -> nn.Module:
    """The built-in network of `model` with its parameters and its state-dict buffers on the meta device (nothing
    of them allocated), and its non-persistent buffers (gpt-nano's and the ViT's position embeddings: fixed
    functions of the geometry, which no file holds) computed on the CPU as the network computes them. Each
    parameter, made on the CPU by its layer and never filled, goes to the meta device as it is registered; the
    layers' own initialisation then runs on the meta device."""

    def to_meta(_: nn.Module, __: str, p: nn.Parameter | None) -> nn.Parameter | None:
        if p is None or p.is_meta:
            return None
        return nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)

    # a process-wide hook, held only while the network is built; torch registers what it returns
    handle = register_module_parameter_registration_hook(cast(Callable[..., None], to_meta))
    try:
        module = build_model(model)
    finally:
        handle.remove()
    for owner in module.modules():
        transient = owner._non_persistent_buffers_set
        for name, b in list(owner.named_buffers(recurse=False)):
            if b is not None and name not in transient and not b.is_meta:
                owner.register_buffer(name, torch.empty_like(b, device="meta"))
    return module


def called_directly(module: nn.Module) -> set[str]:
    """The Linear/Conv2d layers of a character-level GPT that its forward pass never calls, reading their weight
    as a table (its token embedding): found by running it once on one sequence of ids (a skeleton, meta_network:
    a copy of it on the meta device, computing nothing). Empty for other networks."""
    example = ids_example(module, 1, torch.device("meta"))
    if example is None:
        return set()
    probe = module
    if any(p.is_meta for p in module.parameters()):
        probe = copy.deepcopy(module).to("meta")  # its position embedding too
    else:
        example = torch.zeros_like(example, device=next(module.parameters()).device)
    names = [n for n, m in probe.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    return set(names) - set(layer_inputs(probe, names, example))
