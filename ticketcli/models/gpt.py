"""GPT-nano: a character-level decoder-only transformer, "gpt-nano:l2-d64-h4-c64-v96" (2 blocks, width 64, 4 heads,
context 64 characters, vocabulary 96; "-m2" sets the MLP ratio, 4 by default). The vocabulary is the text's own
character set: training on a text (--text) fills in v<vocab> when the spec leaves it out.

Layout (nanoGPT's, without dropout, biases only with "+bias"): token embedding plus a fixed 1-D sin-cos position
embedding, pre-LayerNorm blocks x + attn(LN(x)), x + MLP(LN(x)) with causal self-attention (the ViT's blocks,
vit.py, with a causal mask), a final LayerNorm and a Linear head to next-character logits. Every parameter
is a Linear layer's, so every parameter is masked and drawn from the seed: the token embedding is a
Linear(vocab, width) used as a lookup table (its column t is token t's embedding, i.e. the Linear applied to a
one-hot vector), and LayerNorm is non-affine as in the ViT. Each block's MLP activation is an activation site
(sites.py), GELU unless the caller chooses another.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models.gpt_family import gpt_numbers as gpt_numbers  # re-exported beside the network
from ticketcli.models.sites import Trace, traced_linear
from ticketcli.models.vit import Block
from ticketcli.specs.run import ModelSpec


def sincos_1d(n: int, dim: int) -> torch.Tensor:
    """(n, dim) position embedding: sin and cos of position / 10000^(i / (dim / 2)), half the features each.
    Computed on the CPU whatever the default device: a network built on the meta device (models.build's
    planned_shapes, the sparse form's skeleton) gets it whole, and never runs torch's meta kernels, whose first use
    imports some 150 MiB."""
    half = dim // 2
    omega = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float32, device="cpu") / half)  # (dim/2,)
    pos = torch.arange(n, dtype=torch.float32, device="cpu").reshape(-1, 1) * omega  # (n, dim/2)
    return torch.cat([pos.sin(), pos.cos()], dim=1)


class GPTNano(nn.Module):
    """Token ids (B, T) with T <= context -> next-token logits (B, T, vocab)."""

    pos_embed: torch.Tensor
    blocks: nn.ModuleList

    def __init__(self, vocab: int, context: int, dim: int, depth: int, heads: int, mlp_ratio: int, bias: bool):
        super().__init__()
        self.vocab, self.context = vocab, context
        self.tok_embed = nn.Linear(vocab, dim, bias=False)  # (dim, vocab): a lookup table, see the module docstring
        # a fixed function of the geometry, not state: left out of state dicts (exports, checkpoints)
        self.register_buffer("pos_embed", sincos_1d(context, dim), persistent=False)  # (C, D)
        self.blocks = nn.ModuleList(
            Block(dim, heads, mlp_ratio, bias, f"blocks.{i}", causal=True) for i in range(depth)
        )
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.head = nn.Linear(dim, vocab, bias=bias)

    def _check(self, idx: torch.Tensor) -> None:
        if idx.dtype not in (torch.int64, torch.int32) or idx.dim() != 2 or idx.shape[1] > self.context:
            raise UsageError(
                f"gpt-nano takes (batch, <= {self.context}) character ids, not a {idx.dtype} tensor of shape "
                f"{tuple(idx.shape)}",
                hint="train it with `ticket drift --text FILE` (a character-level language model)",
            )

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self._check(idx)
        x = F.embedding(idx, self.tok_embed.weight.T) + self.pos_embed[: idx.shape[1]]  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        return cast(torch.Tensor, self.head(self.norm(x)))  # a Module call is typed Any

    def forward_with(self, idx: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        """The forward pass with these tensors as parameters; with a trace, what a study measures (sites.py)."""
        self._check(idx)
        x = F.embedding(idx, p["tok_embed.weight"].T) + self.pos_embed[: idx.shape[1]]  # (B, T, D)
        for i, block in enumerate(self.blocks):
            x = cast(Block, block).forward_with(x, p, f"blocks.{i}", trace)
        return traced_linear("head", self.norm(x), p, trace)  # (B, T, vocab)


def build_gpt_nano(spec: ModelSpec) -> nn.Module:
    """gpt-nano:lL-dD-hH-cC[-mR]-vV: a character-level GPT (see the module docstring)."""
    n = gpt_numbers(spec)
    if spec.input is not None:
        raise UsageError(
            f"model {spec.to_string()} is a character-level language model and takes no image data",
            hint="train it with `ticket drift --text FILE` (default: the fortunes files)",
        )
    if "v" not in n:
        raise UsageError(
            f"model {spec.to_string()} needs its vocabulary size",
            hint="append -v<characters>, or let `ticket drift --text` fill it in from the text",
        )
    if min(n.values()) <= 0 or n["d"] % n["h"] or n["d"] % 2:
        raise UsageError(
            f"invalid model spec {spec.to_string()!r}: gpt-nano's numbers must be positive and its width "
            f"d{n['d']} a multiple of its {n['h']} heads and of 2 (the sin-cos position embedding)"
        )
    return GPTNano(n["v"], n["c"], n["d"], n["l"], n["h"], n["m"], spec.bias)


def with_vocab(spec: ModelSpec, vocab: int) -> ModelSpec:
    """The gpt-nano spec with v<vocab> filled in; a spec that names a smaller vocabulary is refused."""
    n = gpt_numbers(spec)
    if "v" in n and n["v"] < vocab:
        raise UsageError(f"model {spec.to_string()} has a vocabulary of {n['v']} but the text has {vocab} characters")
    return spec if "v" in n else replace(spec, layers=(*spec.layers, f"v{vocab}"))


def perplexity(loss: float) -> float:
    """exp(mean cross-entropy in nats); inf beyond float range."""
    return math.exp(loss) if loss < 700 else math.inf
