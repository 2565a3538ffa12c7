"""The Vision Transformer family's torch-free facts: vit's grammar (p<patch>-d<width>-l<blocks>-h<heads>[-m<mlp
ratio>]), its cost from the spec alone (with the transformer blocks' cost gpt-nano shares) and its description; the
network is in vit.py."""

from __future__ import annotations

import re

from ticketcli.errors import UsageError
from ticketcli.models.cost import FLOAT, Cost, Estimate
from ticketcli.models.family import Arguments, Family, Shape
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import check_depth

VIT_BODY = r"p([0-9]+)-d([0-9]+)-l([0-9]+)-h([0-9]+)(?:-m([0-9]+))?"


def vit_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """A vit's ':' arguments: positive numbers, its width a multiple of its heads and of 4."""
    m = re.fullmatch(VIT_BODY, body or "")
    if not m:
        raise UsageError(
            f"invalid model spec {text!r}: vit takes p<patch>-d<width>-l<blocks>-h<heads>[-m<mlp ratio>]",
            hint="e.g. vit:p4-d64-l4-h4 or vit:p4-d64-l4-h4-m2",
        )
    values = [int(v) for v in m.groups() if v is not None]
    if min(values) <= 0:
        raise UsageError(f"invalid model spec {text!r}: vit's numbers must be positive")
    patch, width, _, heads = values[:4]
    if width % heads or width % 4:
        raise UsageError(
            f"invalid model spec {text!r}: vit's width d{width} must be a multiple of its "
            f"{heads} heads and of 4 (the 2-D sin-cos position embedding)"
        )
    check_depth(text, values[2], "blocks")
    return {"layers": tuple(m.group(0).split("-"))}


def blocks_cost(c: Cost, dim: int, heads: int, ratio: int, depth: int, tokens: int, bias: bool, causal: bool) -> None:
    """`depth` transformer blocks over `tokens` tokens (models.vit.Block), at once."""
    one = Cost()
    one.act(dim * tokens)  # norm1
    one.linear(dim, 3 * dim, bias, tokens)  # qkv
    one.act(dim * tokens, 2)  # q and k made contiguous for the product
    one.act(heads * tokens * tokens, 4 if causal else 3)  # scores, scaled, (masked), softmax
    one.act(dim * tokens, 2)  # weights @ v, and its heads merged back
    one.linear(dim, dim, bias, tokens)  # proj
    one.act(dim * tokens, 2)  # the residual sum, norm2
    one.linear(dim, ratio * dim, bias, tokens)  # fc1
    one.act(ratio * dim * tokens)  # GELU
    one.linear(ratio * dim, dim, bias, tokens)  # fc2
    one.act(dim * tokens)  # the residual sum
    c.many(one, depth)


def _vit(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    m = re.fullmatch(VIT_BODY, "-".join(spec.layers))
    if m is None:
        raise UsageError(f"invalid vit arguments {'-'.join(spec.layers)[:80]!r}")
    patch, dim, depth, heads, ratio = (int(v) if v is not None else 4 for v in m.groups())
    bias = spec.bias
    ch, h, w = shape
    if spec.input is not None and (h % patch or w % patch):  # as models.vit.build_vit refuses it
        raise UsageError(
            f"model {spec.to_string()}: {patch}x{patch} patches do not tile {h}x{w} inputs (shape {shape})",
            hint="choose a patch size that divides the image's height and width",
        )
    tokens = (h // patch) * (w // patch)
    c = Cost()
    c.act(ch * h * w)
    c.conv(ch, dim, patch, bias, tokens)
    c.buffer_bytes += FLOAT * tokens * dim  # the sin-cos position embedding
    c.act(dim * tokens)  # + position embedding
    blocks_cost(c, dim, heads, ratio, depth, tokens, bias, causal=False)
    c.act(dim * tokens)  # final norm
    c.act(dim)  # mean over tokens
    c.linear(dim, classes, bias)
    c.act(classes)
    return c.done()


VIT = Family(
    description="Vision Transformer vit:p4-d64-l4-h4 (patch, width, blocks, heads; -m2: MLP ratio).",
    build="ticketcli.models.vit:build_vit",
    parse=vit_arguments,
    cost=_vit,
    examples=("vit:p4-d16-l1-h2@1x8x8-10", "vit:p2-d16-l2-h2-m2@3x8x8-10+bias", "vit:p1-d8-l1-h4@1x8x8-10"),
)
