"""CIFAR-style ResNets (He et al. 2016) and wide ResNets (Zagoruyko & Komodakis 2016) with non-affine BatchNorm.

Both start with a 3x3 convolution at stride 1 and no max-pool, so that 32x32 (and 28x28, 8x8) inputs keep their
resolution into the first stage, and end with global average pooling and one Linear layer; any input size works.
BatchNorm has no learned affine parameters (edge-popup's NonAffineBatchNorm, batchnorm.py), so every parameter is
a convolution's or the classifier's, and every parameter is masked. Names follow torchvision's ResNet (`conv1`,
`bn1`, `layer1.0.conv1`, `layer2.0.downsample.0`, `fc`); `forward` is that plain PyTorch model, `forward_with`
the same computation with given tensors as parameters. The ResNet's ReLUs are activation sites (sites.py): the
stem's and each block's first are fed by the convolution before them, a block's last (after the residual sum) by
its second convolution.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ticketcli.models.resnet_family import RESNET_STAGES
from ticketcli.models.sites import ActSite, Trace, traced_conv, traced_linear
from ticketcli.specs.run import ModelSpec


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, affine=False)


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus the input, then ReLU; where the shape changes the input goes through a
    1x1 convolution and BN (projection shortcut, He et al.'s option B, as torchvision and edge-popup's cResNet).
    `prefix` is the block's own name ("layer1.0"), which its activation sites carry."""

    def __init__(self, cin: int, cout: int, stride: int, bias: bool, prefix: str = ""):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=bias)
        self.bn1 = _bn(cout)
        self.act1 = ActSite(f"{prefix}.conv1")
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=bias)
        self.bn2 = _bn(cout)
        self.act2 = ActSite(f"{prefix}.conv2")  # after the residual sum
        self.downsample = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=bias), _bn(cout)) if stride != 1 or cin != cout else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        # a Module call is typed Any
        return cast(torch.Tensor, self.act2(out + (x if self.downsample is None else self.downsample(x))))

    def forward_with(
        self, x: torch.Tensor, p: dict[str, torch.Tensor], prefix: str, trace: Trace | None = None
    ) -> torch.Tensor:
        out = self.act1(self.bn1(traced_conv(self.conv1, f"{prefix}.conv1", x, p, trace)), trace)
        out = self.bn2(traced_conv(self.conv2, f"{prefix}.conv2", out, p, trace))
        if self.downsample is not None:
            conv = cast(nn.Conv2d, self.downsample[0])
            x = self.downsample[1](traced_conv(conv, f"{prefix}.downsample.0", x, p, trace))
        return cast(torch.Tensor, self.act2(out + x, trace))


class ResNet(nn.Module):
    """3x3 stem conv (stride 1) - BN - ReLU, stages of BasicBlocks (the first at stride 1, the others halving the
    resolution), global average pooling, Linear."""

    def __init__(
        self, widths: tuple[int, ...], blocks: tuple[int, ...], input: tuple[int, int, int], classes: int, bias: bool
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(input[0], widths[0], 3, 1, 1, bias=bias)
        self.bn1 = _bn(widths[0])
        self.act = ActSite("conv1")
        self.stages = len(widths)
        cin = widths[0]
        for i, (width, n) in enumerate(zip(widths, blocks)):
            stride = [2 if i > 0 and j == 0 else 1 for j in range(n)]
            self.add_module(
                f"layer{i + 1}",
                nn.Sequential(
                    *(
                        BasicBlock(cin if j == 0 else width, width, stride[j], bias, f"layer{i + 1}.{j}")
                        for j in range(n)
                    )
                ),
            )
            cin = width
        self.fc = nn.Linear(cin, classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.bn1(self.conv1(x)))
        for i in range(self.stages):
            x = self.get_submodule(f"layer{i + 1}")(x)
        return cast(torch.Tensor, self.fc(x.mean((2, 3))))  # (B, C) after global average pooling

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        """The forward pass with these tensors as parameters; with a trace, what a study measures (sites.py)."""
        x = self.act(self.bn1(traced_conv(self.conv1, "conv1", x, p, trace)), trace)
        for i in range(self.stages):
            for j, block in enumerate(cast(list[BasicBlock], self.get_submodule(f"layer{i + 1}"))):
                x = block.forward_with(x, p, f"layer{i + 1}.{j}", trace)
        return traced_linear("fc", x.mean((2, 3)), p, trace)


class WideBlock(nn.Module):
    """Pre-activation block of a wide ResNet: BN-ReLU-conv3x3-BN-ReLU-conv3x3 plus the input; where the shape
    changes the shortcut is a 1x1 convolution of the pre-activated input (Zagoruyko & Komodakis; no dropout)."""

    def __init__(self, cin: int, cout: int, stride: int, bias: bool):
        super().__init__()
        self.bn1 = _bn(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=bias)
        self.bn2 = _bn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=bias)
        self.shortcut = nn.Conv2d(cin, cout, 1, stride, bias=bias) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.bn1(x))
        out = self.conv2(torch.relu(self.bn2(self.conv1(a))))
        return cast(torch.Tensor, out + (x if self.shortcut is None else self.shortcut(a)))

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor], prefix: str) -> torch.Tensor:
        a = torch.relu(self.bn1(x))
        out = torch.relu(self.bn2(traced_conv(self.conv1, f"{prefix}.conv1", a, p)))
        out = traced_conv(self.conv2, f"{prefix}.conv2", out, p)
        return out + (x if self.shortcut is None else traced_conv(self.shortcut, f"{prefix}.shortcut", a, p))


class WideResNet(nn.Module):
    """WRN-depth-k: 3x3 stem conv to 16 channels, three stages of (depth - 4) / 6 WideBlocks of 16k, 32k, 64k
    channels (stride 1, 2, 2), BN-ReLU, global average pooling, Linear."""

    def __init__(self, depth: int, k: int, input: tuple[int, int, int], classes: int, bias: bool):
        super().__init__()
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(input[0], 16, 3, 1, 1, bias=bias)
        cin = 16
        for i, width in enumerate((16 * k, 32 * k, 64 * k)):
            self.add_module(
                f"layer{i + 1}",
                nn.Sequential(
                    *(WideBlock(cin if j == 0 else width, width, 2 if i > 0 and j == 0 else 1, bias) for j in range(n))
                ),
            )
            cin = width
        self.bn = _bn(cin)
        self.fc = nn.Linear(cin, classes, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        for i in range(3):  # the stages are registered by name (layer1..layer3), as torchvision's are
            x = self.get_submodule(f"layer{i + 1}")(x)
        return cast(torch.Tensor, self.fc(torch.relu(self.bn(x)).mean((2, 3))))

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        x = traced_conv(self.conv1, "conv1", x, p)
        for i in range(3):
            for j, block in enumerate(cast(list[WideBlock], self.get_submodule(f"layer{i + 1}"))):
                x = block.forward_with(x, p, f"layer{i + 1}.{j}")
        return traced_linear("fc", torch.relu(self.bn(x)).mean((2, 3)), p)


def build_resnet(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """ResNet-20 (He et al., CIFAR: three stages of 3 blocks, 16-32-64 channels) or ResNet-18, CIFAR style (3x3
    stem, no max-pool; edge-popup's cResNet18: 2-2-2-2 blocks, 64-128-256-512): RESNET_STAGES by name."""
    return ResNet(*RESNET_STAGES[spec.arch], shape, classes, spec.bias)


def build_wrn(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> nn.Module:
    """wrn:D-K: a wide ResNet of depth D = 6n + 4 and width factor K."""
    depth, k = (int(v) for v in spec.layers)
    return WideResNet(depth, k, shape, classes, spec.bias)
