"""The MLP family's torch-free facts: mlp (widths from the spec) and lenet300 (784-300-100-10 style, sized by the
data): their grammar, their cost from the spec alone and their descriptions; the networks are in mlp.py."""

from __future__ import annotations

import math
import re

from ticketcli.errors import UsageError
from ticketcli.models.cost import Cost, Estimate
from ticketcli.models.family import Arguments, Family, Shape, no_arguments
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import SPEC_HINT


def mlp_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """An mlp's ':' arguments as its widths: two or more positive numbers (with +res, two equal hidden ones)."""
    if body is None or not re.fullmatch(r"[0-9]+(?:-[0-9]+)+", body):
        raise UsageError(f"invalid model spec {text!r}", hint=SPEC_HINT)
    widths = tuple(int(w) for w in body.split("-"))
    if any(w <= 0 for w in widths):
        raise UsageError(f"invalid model spec {text!r}: widths must be positive")
    residual = bool(suffix["res"])
    if residual and not any(a == b for a, b in zip(widths[1:-2], widths[2:-1])):
        raise UsageError(
            f"invalid model spec {text!r}: +res adds identity skips only around hidden layers "
            "whose input and output widths agree, and this mlp has none",
            hint="e.g. mlp:784-256-256-256-10+res",
        )
    return {"widths": widths, "residual": residual, "norm": suffix["norm"]}


def mlp_cost(widths: tuple[int, ...], bias: bool, residual: bool = False, norm: str | None = None) -> Estimate:
    """An MLP of these widths (models.mlp.MLP)."""
    c = Cost()
    c.depth = len(widths) - 1
    c.act(widths[0])  # the flattened input
    last = len(widths) - 2
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        c.linear(a, b, bias)
        if i == last:
            c.act(b)  # the loss's log-softmax
            break
        if norm == "batch":
            c.batchnorm(b)
        elif norm is not None:
            c.act(b)
        c.act(b)  # the activation
        if residual and 1 <= i and widths[i] == b:
            c.act(b)  # the identity skip's sum
    return c.done()


def _mlp(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    return mlp_cost(spec.widths, spec.bias, spec.residual, spec.norm)


def _lenet300(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    return mlp_cost((math.prod(shape), 300, 100, classes), spec.bias)


MLP = Family(
    description="Multilayer perceptron mlp:784-256-256-256-10 (+res skips, +norm=batch|layer|rms, +bias).",
    build="ticketcli.models.mlp:build_mlp",
    parse=mlp_arguments,
    cost=_mlp,
    examples=(
        "mlp:64-16-10",
        "mlp:64-16-16-16-10+res+norm=batch+bias",
        "mlp:64-32-32-10+norm=layer",
        "mlp:5-3+norm=rms",
    ),
    sized=False,  # its widths are the spec's own, input and output included
    suffixes=("res", "norm"),
    no_geometry="an mlp's widths already fix its input and classes",
)
LENET300 = Family(
    "LeNet-300-100: an MLP with hidden layers of 300 and 100.",
    "ticketcli.models.mlp:build_lenet300",
    no_arguments,
    _lenet300,
    ("lenet300@1x8x8-10", "lenet300@3x5x4-7+bias"),
)
