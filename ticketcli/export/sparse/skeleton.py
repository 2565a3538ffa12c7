"""The network a sparse form is made into, without its weights: `meta_network` builds a built-in model on the meta
device, its position embeddings (fixed functions of the geometry, which no file holds) whole; `called_directly`
names the layers a character-level GPT reads as a table rather than calls (its token embedding, which every sparse
form keeps dense); `positions` is how many rows a GPT's Linear layers multiply per sequence, and `image_shape` the
example shape a network's layers are timed on; `budgeted_network` is a sparse export's spec checked and built
so."""

from __future__ import annotations

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.export.inputs import Inputs
from ticketcli.models.budget import Budget
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.gpt import GPTNano
from ticketcli.models.registry import parse_model
from ticketcli.specs.run import ModelSpec


def image_shape(inputs: Inputs) -> tuple[int, ...] | None:
    """One example's shape, for timing the layers on examples of it; None for a text model, whose inputs are
    character ids: its layers are timed on sequences of random ids as long as its context (graph.ids_example)."""
    if inputs.dtype == "int64":
        return None
    return inputs.shape


def positions(module: nn.Module) -> int:
    """The rows a Linear layer of `module` multiplies per example: a character-level GPT's context (one row per
    position of a sequence), 1 for any other network's Linear layers."""
    return module.context if isinstance(module, GPTNano) else 1


def meta_network(model: ModelSpec) -> nn.Module:
    """The built-in network of `model` on the meta device (nothing of its parameters and state-dict buffers
    allocated), with its non-persistent buffers, which no file or state dict holds, whole: gpt-nano's and the ViT's
    position embeddings, fixed functions of the geometry that their builders compute on the CPU whatever the
    default device (gpt.sincos_1d, vit.sincos_2d). A network that left one on the meta device could not be made
    again from a file: one UsageError."""
    with torch.device("meta"):
        module = build_model(model)
    for owner_name, owner in module.named_modules():
        for name in owner._non_persistent_buffers_set:
            b = owner._buffers.get(name)
            if b is not None and b.is_meta:
                where = f"{owner_name}.{name}" if owner_name else name
                raise UsageError(f"model {model.to_string()}: its buffer {where} is not made on the CPU")
    return module


def called_directly(module: nn.Module) -> set[str]:
    """The Linear layers a network never calls, reading their weight as a table: gpt-nano's token embedding (its
    forward pass looks up columns of `tok_embed.weight`), which every sparse form keeps dense. Told by the class,
    so that a skeleton need not run (on the meta device, a first forward pass imports torch's meta kernels: 150 MiB
    resident); net.make_sparse finds the same layers by running the network (tests/test_export_sparse_text.py)."""
    return {"tok_embed"} if isinstance(module, GPTNano) else set()


def budgeted_network(spec_text: str, max_params: int) -> nn.Module:
    """A sparse export's model spec as its network on the meta device (meta_network), once parsed and within a
    budget of `max_params`; built-in models only. Every refusal is one UsageError."""
    spec = parse_model(spec_text)
    if spec.arch == "user":
        raise UsageError(
            f"it names the model factory {spec.factory}, and a sparse export is rebuilt from built-in models only"
        )
    planned_shapes(spec, Budget(max_params))
    return meta_network(spec)
