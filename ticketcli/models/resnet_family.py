"""The ResNet family's torch-free facts: resnet20, resnet18 (CIFAR style) and wrn (a wide ResNet of the spec's
depth and width): their grammar, their cost from the spec alone and their descriptions; the networks are in
resnet.py."""

from __future__ import annotations

import re

from ticketcli.errors import UsageError
from ticketcli.models.cost import Cost, Estimate
from ticketcli.models.family import Arguments, Family, Shape, no_arguments
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import check_depth

RESNET_STAGES = {  # resnet20 (He et al., CIFAR) and resnet18 (CIFAR style): each stage's channels, its blocks
    "resnet20": ((16, 32, 64), (3, 3, 3)),
    "resnet18": ((64, 128, 256, 512), (2, 2, 2, 2)),
}


def wrn_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """A wide ResNet's ':' arguments: depth 6n+4 (at least 10) and width factor (at least 1)."""
    m = re.fullmatch(r"([0-9]+)-([0-9]+)", body or "")
    if not m:
        raise UsageError(f"invalid model spec {text!r}: wrn takes depth-width, e.g. wrn:16-4 or wrn:28-10")
    depth, width = int(m.group(1)), int(m.group(2))
    if depth < 10 or (depth - 4) % 6 or width < 1:
        raise UsageError(
            f"invalid model spec {text!r}: a wide ResNet's depth is 6n+4 (10, 16, 22, 28, 40, ...) "
            "and its width factor at least 1"
        )
    check_depth(text, 3 * ((depth - 4) // 6), "blocks")
    return {"layers": (str(depth), str(width))}


def _half(n: int) -> int:
    """A side after a stride-2 convolution (3x3 with padding 1, or 1x1): ceil(n / 2)."""
    return (n + 1) // 2


def resnet_cost(widths: tuple[int, ...], blocks: tuple[int, ...], shape: Shape, k: int, bias: bool) -> Estimate:
    """A ResNet of these stage widths and blocks per stage (models.resnet.ResNet)."""
    c = Cost()
    ch, h, w = shape
    c.act(ch * h * w)
    c.conv(ch, widths[0], 3, bias, h * w)
    c.batchnorm(widths[0], h * w)
    c.act(widths[0] * h * w)
    cin = widths[0]
    for i, (width, n) in enumerate(zip(widths, blocks)):
        for j in range(n):
            if i > 0 and j == 0:
                h, w = _half(h), _half(w)
            c.conv(cin, width, 3, bias, h * w)
            c.batchnorm(width, h * w)
            c.act(width * h * w)  # ReLU
            c.conv(width, width, 3, bias, h * w)
            c.batchnorm(width, h * w)
            if (i > 0 and j == 0) or cin != width:
                c.conv(cin, width, 1, bias, h * w)
                c.batchnorm(width, h * w)
            c.act(width * h * w, 2)  # the residual sum and its ReLU
            cin = width
            c.depth += 1
    c.act(cin)  # global average pooling
    c.linear(cin, k, bias)
    c.act(k)
    return c.done()


def _wide_block(c: Cost, cin: int, cout: int, stride: int, bias: bool, hw_in: int, hw_out: int, times: int) -> None:
    """`times` identical WideBlocks at once (a stage's blocks after its first are all alike): O(1) in the depth."""
    if times <= 0:
        return
    one = Cost()
    one.batchnorm(cin, hw_in)
    one.act(cin * hw_in)  # ReLU
    one.conv(cin, cout, 3, bias, hw_out)
    one.batchnorm(cout, hw_out)
    one.act(cout * hw_out)  # ReLU
    one.conv(cout, cout, 3, bias, hw_out)
    if stride != 1 or cin != cout:
        one.conv(cin, cout, 1, bias, hw_out)
    one.act(cout * hw_out)  # the residual sum
    c.many(one, times)


def _wrn(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    depth, k = (int(v) for v in spec.layers)
    bias = spec.bias
    c = Cost()
    n = (depth - 4) // 6
    ch, h, w = shape
    c.act(ch * h * w)
    c.conv(ch, 16, 3, bias, h * w)
    cin = 16
    for i, width in enumerate((16 * k, 32 * k, 64 * k)):
        stride = 2 if i > 0 else 1
        h2, w2 = (_half(h), _half(w)) if stride == 2 else (h, w)
        if n > 0:
            _wide_block(c, cin, width, stride, bias, h * w, h2 * w2, 1)
            _wide_block(c, width, width, 1, bias, h2 * w2, h2 * w2, n - 1)
            cin, h, w = width, h2, w2
    c.batchnorm(cin, h * w)
    c.act(cin * h * w)  # ReLU
    c.act(cin)  # global average pooling
    c.linear(cin, classes, bias)
    c.act(classes)
    return c.done()


def _fixed(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    return resnet_cost(*RESNET_STAGES[spec.arch], shape, classes, spec.bias)


def _resnet(description: str, *examples: str) -> Family:
    """resnet20 or resnet18: fixed stages (RESNET_STAGES by name), sized by the data."""
    return Family(description, "ticketcli.models.resnet:build_resnet", no_arguments, _fixed, examples)


RESNET20 = _resnet("ResNet-20 for CIFAR (non-affine BatchNorm).", "resnet20@1x8x8-10")
RESNET18 = _resnet(
    "ResNet-18, CIFAR style (3x3 stem, no max-pool; non-affine BatchNorm).",
    "resnet18@1x8x8-10",
    "resnet18@3x9x9-10+bias",
)
WRN = Family(
    description="Wide ResNet wrn:16-4 (depth-width).",
    build="ticketcli.models.resnet:build_wrn",
    parse=wrn_arguments,
    cost=_wrn,
    examples=("wrn:10-1@1x8x8-10", "wrn:16-2@3x7x7-5+bias"),
)
