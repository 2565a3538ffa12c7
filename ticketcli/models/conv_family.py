"""The ConvNet family's torch-free facts: conv2, conv4, conv6 (Frankle & Carbin's Conv-2/4/6) and vgg (a layer
list from the spec): their grammar, their cost from the spec alone and their descriptions; the networks are in
conv.py."""

from __future__ import annotations

from ticketcli.errors import UsageError
from ticketcli.models.cost import Cost, Estimate
from ticketcli.models.family import Arguments, Family, Shape, no_arguments
from ticketcli.specs.run import ModelSpec

CONV_LAYERS = {  # Conv-2/4/6: 64-64-pool, +128-128-pool, +256-256-pool; then the fully connected CONV_HEAD
    "conv2": ("64", "64", "M"),
    "conv4": ("64", "64", "M", "128", "128", "M"),
    "conv6": ("64", "64", "M", "128", "128", "M", "256", "256", "M"),
}
CONV_HEAD = (256, 256)


def vgg_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """A vgg's ':' arguments: positive conv widths and M (2x2 max-pool), starting with a width."""
    if body is None or not all(p == "M" or (p.isdigit() and int(p) > 0) for p in body.split("-")):
        raise UsageError(
            f"invalid model spec {text!r}: vgg takes positive conv widths and M (max-pool)",
            hint="e.g. vgg:64-64-M-128-128-M-256-256-M",
        )
    layers = tuple(body.split("-"))
    if "M" == layers[0] or all(p == "M" for p in layers):
        raise UsageError(f"invalid model spec {text!r}: vgg must start with a conv width")
    return {"layers": layers}


def convnet_cost(layers: tuple[str, ...], head: tuple[int, ...], shape: Shape, k: int, bias: bool) -> Estimate:
    """A ConvNet of these 3x3 convs and pools, then this fully connected head (models.conv.ConvNet)."""
    c = Cost()
    ch, h, w = shape
    c.act(ch * h * w)
    for item in layers:
        if item == "M":
            if h < 2 or w < 2:  # as models.conv.ConvNet refuses it
                raise UsageError(
                    f"a {shape[1]}x{shape[2]} input is too small for {len(layers)} layers "
                    f"with {layers.count('M')} 2x2 max-pools"
                )
            h, w = h // 2, w // 2
            c.act(ch * h * w, 3)  # the pooled output and its int64 indices
        else:
            c.conv(ch, int(item), 3, bias, h * w)
            ch = int(item)
            c.act(ch * h * w)  # ReLU
        c.depth += 1
    widths = (ch * h * w, *head, k)
    for a, b in zip(widths[:-1], widths[1:]):
        c.linear(a, b, bias)
        c.act(b)  # ReLU, or the loss's log-softmax after the last
        c.depth += 1
    return c.done()


def _fixed(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    return convnet_cost(CONV_LAYERS[spec.arch], CONV_HEAD, shape, classes, spec.bias)


def _conv(description: str, *examples: str) -> Family:
    """conv2, conv4 or conv6: fixed layers (CONV_LAYERS by name), sized by the data."""
    return Family(description, "ticketcli.models.conv:build_conv", no_arguments, _fixed, examples)


def _vgg(spec: ModelSpec, shape: Shape, classes: int) -> Estimate:
    return convnet_cost(spec.layers, (), shape, classes, spec.bias)


CONV2 = _conv("Conv-2: conv 64-64-M, then fully connected 256-256-classes.", "conv2@1x8x8-10")
CONV4 = _conv(
    "Conv-4: conv 64-64-M-128-128-M, then fully connected 256-256-classes.", "conv4@1x8x8-10", "conv4@3x9x7-10+bias"
)
CONV6 = _conv("Conv-6: conv 64-64-M-128-128-M-256-256-M, then fully connected 256-256-classes.", "conv6@1x8x8-10")
VGG = Family(
    description="VGG-style ConvNet from a layer list, e.g. vgg:64-64-M-128-128-M-256-256-M.",
    build="ticketcli.models.conv:build_vgg",
    parse=vgg_arguments,
    cost=_vgg,
    examples=("vgg:8-M-16-16-M@1x8x8-10", "vgg:4-M-4@2x5x9-3+bias"),
)
