"""A small Vision Transformer for strong tickets: "vit:p4-d64-l4-h4" (patch 4, width 64, 4 blocks, 4 heads).

The layout is the "simple ViT" of Beyer, Zhai & Kolesnikov (2022, "Better plain ViT baselines for ImageNet-1k"):
a patch embedding (a p x p convolution at stride p), fixed 2-D sin-cos position embeddings, pre-norm blocks
(x + attn(LN(x)), x + MLP(LN(x)), GELU, MLP ratio 4 unless "-m"), a final LayerNorm, global average pooling
over the tokens (no class token) and one Linear head. Names follow timm's VisionTransformer (`patch_embed.proj`,
`blocks.0.attn.qkv`, `blocks.0.attn.proj`, `blocks.0.mlp.fc1`, `head`).

What is masked: every parameter, i.e. the patch embedding, the joint q/k/v projection (one tensor, one top-k
budget), the attention output projection, both MLP layers and the head. Nothing else has parameters:
LayerNorm is non-affine (edge-popup's non-affine BatchNorm convention carried over: with frozen weights a learned
affine would stay at its 1/0 init, i.e. the identity), and the sin-cos position embedding is a fixed buffer, so
no frozen random tensor exists outside the masks and the seed.

Each block's MLP activation is an activation site fed by `mlp.fc1` (sites.py). The blocks also serve GPT-nano
(gpt.py), with causal attention.
"""

from __future__ import annotations

import re
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models.sites import ActSite, Trace, traced_conv, traced_linear
from ticketcli.models.vit_family import VIT_BODY
from ticketcli.specs.run import ModelSpec


def sincos_2d(h: int, w: int, dim: int) -> torch.Tensor:
    """(h * w, dim) position embedding, tokens in row-major order: a quarter of the features each for sin and
    cos of the column and of the row index, at frequencies 1 / 10000^(i / (dim / 4)). On the CPU whatever the
    default device, as gpt.sincos_1d."""
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float32, device="cpu") / quarter)  # (dim/4,)
    rows, cols = torch.meshgrid(
        torch.arange(h, dtype=torch.float32, device="cpu"),
        torch.arange(w, dtype=torch.float32, device="cpu"),
        indexing="ij",
    )
    cx = cols.reshape(-1, 1) * omega  # (h*w, dim/4)
    ry = rows.reshape(-1, 1) * omega
    return torch.cat([cx.sin(), cx.cos(), ry.sin(), ry.cos()], dim=1)


def attention(x: torch.Tensor, qkv: torch.Tensor, heads: int, causal: bool = False) -> torch.Tensor:
    """Multi-head self-attention from x's projected (B, N, 3D) q/k/v; returns (B, N, D) before the output
    projection. Written out (not scaled_dot_product_attention) so double backward (GraSP) works everywhere.
    causal: token i attends to tokens 0..i only."""
    b, n, three_d = qkv.shape
    d = three_d // 3
    q: torch.Tensor  # iterating a Tensor is typed Any
    k: torch.Tensor
    v: torch.Tensor
    q, k, v = qkv.reshape(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # each (B, heads, N, hd)
    scores = (q @ k.transpose(-2, -1)) * (d // heads) ** -0.5  # (B, heads, N, N)
    if causal:
        future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)  # (N, N): key after query
        scores = scores.masked_fill(future, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).transpose(1, 2).reshape(b, n, d)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, bias: bool, causal: bool = False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a Module call is typed Any
        return cast(torch.Tensor, self.proj(attention(x, self.qkv(x), self.heads, self.causal)))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, bias: bool, prefix: str = ""):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=bias)
        self.act = ActSite(f"{prefix}.fc1", F.gelu)
        self.fc2 = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    """Pre-norm transformer block; `prefix` is its own name ("blocks.0"), which its activation site carries."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int, bias: bool, prefix: str = "", causal: bool = False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = Attention(dim, heads, bias, causal)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.mlp = Mlp(dim, mlp_ratio * dim, bias, f"{prefix}.mlp")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return cast(torch.Tensor, x + self.mlp(self.norm2(x)))

    def forward_with(
        self, x: torch.Tensor, p: dict[str, torch.Tensor], prefix: str, trace: Trace | None = None
    ) -> torch.Tensor:
        def linear(name: str, t: torch.Tensor) -> torch.Tensor:
            return traced_linear(f"{prefix}.{name}", t, p, trace)

        heads, causal = self.attn.heads, self.attn.causal
        x = x + linear("attn.proj", attention(x, linear("attn.qkv", self.norm1(x)), heads, causal))
        return x + linear("mlp.fc2", self.mlp.act(linear("mlp.fc1", self.norm2(x)), trace))


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int, bias: bool):
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, patch, bias=bias)


class VisionTransformer(nn.Module):
    def __init__(
        self,
        input: tuple[int, int, int],
        classes: int,
        patch: int,
        dim: int,
        depth: int,
        heads: int,
        mlp_ratio: int,
        bias: bool,
    ):
        super().__init__()
        c, h, w = input
        self.patch_embed = PatchEmbed(c, dim, patch, bias)
        # a fixed function of the geometry, not state: left out of state dicts (exports, checkpoints)
        self.register_buffer("pos_embed", sincos_2d(h // patch, w // patch, dim), persistent=False)  # (N, D)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio, bias, f"blocks.{i}") for i in range(depth))
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.head = nn.Linear(dim, classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.pos_embed  # (B, N, D)
        for block in self.blocks:
            x = block(x)
        return cast(torch.Tensor, self.head(self.norm(x).mean(1)))

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        """The forward pass with these tensors as parameters; with a trace, what a study measures (sites.py)."""
        x = traced_conv(self.patch_embed.proj, "patch_embed.proj", x, p, trace)  # (B, D, H/p, W/p)
        x = x.flatten(2).transpose(1, 2) + cast(torch.Tensor, self.pos_embed)  # (B, N, D)
        for i, block in enumerate(cast(list[Block], self.blocks)):
            x = block.forward_with(x, p, f"blocks.{i}", trace)
        return traced_linear("head", self.norm(x).mean(1), p, trace)


def build_vit(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """vit:pP-dD-lL-hH[-mR] for the spec's input: patches must tile the image exactly."""
    m = re.fullmatch(VIT_BODY, "-".join(spec.layers))
    assert m is not None, spec.layers  # the spec parser accepted only this form
    patch, dim, depth, heads, mlp_ratio = (int(v) if v is not None else 4 for v in m.groups())  # -m: 4 unless given
    c, h, w = shape
    if h % patch or w % patch:
        raise UsageError(
            f"model {spec.to_string()}: {patch}x{patch} patches do not tile {h}x{w} inputs (shape {shape})",
            hint="choose a patch size that divides the image's height and width",
        )
    return VisionTransformer(shape, classes, patch, dim, depth, heads, mlp_ratio, spec.bias)
