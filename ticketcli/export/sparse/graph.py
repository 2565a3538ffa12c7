"""The module tree of a network being made sparse: which layers have masks, what kind each is, what input each
receives (a GPT: sequences of random character ids; its token embedding is read as a table, never called), and
putting a layer's replacement in its place."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ticketcli.models.gpt import GPTNano


def layer_kind(layer: nn.Module) -> str:
    return "conv2d" if isinstance(layer, nn.Conv2d) else "linear"


def replace_module(root: nn.Module, name: str, new: nn.Module) -> None:
    parent, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, attr, new)


def masked_layers(module: nn.Module, masks: Mapping[str, torch.Tensor]) -> list[tuple[str, nn.Module]]:
    """The Linear/Conv2d layers whose weight has a mask, in module order."""
    return [
        (name, m)
        for name, m in module.named_modules()
        if isinstance(m, (nn.Linear, nn.Conv2d)) and f"{name}.weight" in masks
    ]


def layer_inputs(module: nn.Module, names: list[str], example: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each named layer's input for `example`, caught by forward pre-hooks."""
    seen: dict[str, torch.Tensor] = {}
    handles = []
    for name in names:

        def hook(_: nn.Module, args: tuple[torch.Tensor, ...], name: str = name) -> None:
            seen.setdefault(name, args[0].detach())

        handles.append(module.get_submodule(name).register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            module(example)
    finally:
        for h in handles:
            h.remove()
    return seen


def ids_example(module: nn.Module, batch: int, dev: torch.device) -> torch.Tensor | None:
    """`batch` sequences of random character ids as long as a character-level GPT's context (its layers are timed
    on batch x context positions); None for any other network."""
    if not isinstance(module, GPTNano):
        return None
    return torch.randint(0, module.vocab, (batch, module.context), device=dev)


DIRECT = "dense: the forward pass reads its weight directly (an embedding table), never calls the layer"
