"""The character-level GPT's torch-free facts: gpt-nano's grammar (l<blocks>-d<width>-h<heads>-c<context>[-m<mlp
ratio>][-v<vocabulary>]), its cost from the spec alone and its description; the network is in gpt.py."""

from __future__ import annotations

import re

from ticketcli.errors import UsageError
from ticketcli.models.cost import FLOAT, Cost, Estimate
from ticketcli.models.family import Arguments, Family, Shape
from ticketcli.models.vit_family import blocks_cost
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import check_depth

GPT_BODY = r"l([0-9]+)-d([0-9]+)-h([0-9]+)-c([0-9]+)(?:-m([0-9]+))?(?:-v([0-9]+))?"


def gpt_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """gpt-nano's ':' arguments, as written (the builder checks the numbers against each other)."""
    if body is None or not re.fullmatch(GPT_BODY, body):
        raise UsageError(
            f"invalid model spec {text!r}: gpt-nano takes l<blocks>-d<width>-h<heads>-c<context>"
            "[-m<mlp ratio>][-v<vocabulary>]",
            hint="e.g. gpt-nano:l2-d64-h4-c64",
        )
    check_depth(text, int(body.split("-")[0][1:]), "blocks")
    return {"layers": tuple(body.split("-"))}


def gpt_numbers(spec: ModelSpec) -> dict[str, int]:
    """The spec's l, d, h, c, m and v values (m defaults to 4; v is absent until the text fills it in)."""
    m = re.fullmatch(GPT_BODY, "-".join(spec.layers))
    if m is None:  # specs.py validated the syntax; a spec built by hand may not have been
        raise UsageError(f"invalid model spec {spec.to_string()!r}", hint="e.g. gpt-nano:l2-d64-h4-c64")
    out = {k: int(v) for k, v in zip("ldhcmv", m.groups()) if v is not None}
    out.setdefault("m", 4)
    return out


def _gpt(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    n = gpt_numbers(spec)
    depth, dim, heads, context, ratio = n["l"], n["d"], n["h"], n["c"], n["m"]
    vocab = n.get("v", 256)  # filled in from the text's characters later; 256 bounds a byte-level one
    bias = spec.bias
    c = Cost()
    c.params += vocab * dim  # the token embedding (no bias)
    c.buffer_bytes += FLOAT * context * dim  # the sin-cos position embedding
    c.fixed_bytes += 2 * context * context  # the causal mask and its complement (bool)
    c.act(context, 2)  # the character ids (int64)
    c.act(dim * context, 2)  # embedding, + position embedding
    blocks_cost(c, dim, heads, ratio, depth, context, bias, causal=True)
    c.act(dim * context)  # final norm
    c.linear(dim, vocab, bias, context)  # head
    c.act(vocab * context)  # the loss's log-softmax
    return c.done()


GPT_NANO = Family(
    description="Character GPT for `ticket drift --text`: gpt-nano:l2-d64-h4-c64 (blocks, width, heads, context).",
    build="ticketcli.models.gpt:build_gpt_nano",
    parse=gpt_arguments,
    cost=_gpt,
    examples=("gpt-nano:l1-d16-h2-c8-v12", "gpt-nano:l2-d16-h2-c8-m2-v12+bias", "gpt-nano:l1-d8-h4-c64-v12"),
    sized=False,  # its vocabulary comes from its text, not from "@CxHxW-K"
    text=True,
)
