"""Plain convolutional nets: Conv-2/4/6 (Frankle & Carbin; edge-popup) and VGG-style nets without BatchNorm."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models.conv_family import CONV_HEAD, CONV_LAYERS
from ticketcli.models.sites import traced_conv, traced_linear
from ticketcli.specs.run import ModelSpec


class ConvNet(nn.Module):
    """3x3 convolutions (padding 1) with ReLU, 2x2 max-pools at "M", then flatten and a ReLU MLP head.

    `features` and `classifier` are nn.Sequentials, so the parameter names ("features.0.weight",
    "classifier.1.weight", ...) are those of the same model written in plain PyTorch. No BatchNorm."""

    def __init__(
        self, layers: tuple[str, ...], head: tuple[int, ...], input: tuple[int, int, int], classes: int, bias: bool
    ):
        super().__init__()
        c, h, w = input
        feats: list[nn.Module] = []
        for item in layers:
            if item == "M":
                if h < 2 or w < 2:
                    raise UsageError(
                        f"a {input[1]}x{input[2]} input is too small for {len(layers)} layers "
                        f"with {layers.count('M')} 2x2 max-pools"
                    )
                feats.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            else:
                feats += [nn.Conv2d(c, int(item), 3, padding=1, bias=bias), nn.ReLU()]
                c = int(item)
        self.features = nn.Sequential(*feats)
        widths = (c * h * w, *head, classes)
        cls: list[nn.Module] = [nn.Flatten()]
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            cls.append(nn.Linear(a, b, bias=bias))
            if i < len(widths) - 2:
                cls.append(nn.ReLU())
        self.classifier = nn.Sequential(*cls)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.classifier(self.features(x)))  # a Module call is typed Any

    def forward_with(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward pass with these tensors as parameters (cheaper than torch.func.functional_call)."""
        for prefix, seq in (("features", self.features), ("classifier", self.classifier)):
            for i, m in enumerate(seq):
                if isinstance(m, nn.Conv2d):
                    x = traced_conv(m, f"{prefix}.{i}", x, params)
                elif isinstance(m, nn.Linear):
                    x = traced_linear(f"{prefix}.{i}", x, params)
                else:
                    x = m(x)
        return x


def build_conv(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """conv2, conv4 or conv6: its layers (conv_family.py's CONV_LAYERS), then FC 256-256-classes."""
    return ConvNet(CONV_LAYERS[spec.arch], CONV_HEAD, shape, classes, spec.bias)


def build_vgg(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """VGG-style ConvNet without BatchNorm (Appendix G): the spec's convs and pools, then one Linear to classes.

    Appendix G does not spell out the head; a single linear classifier keeps the model VGG-style and distinct
    from conv6 (which has the 256-256 FC head)."""
    return ConvNet(spec.layers, (), shape, classes, spec.bias)
