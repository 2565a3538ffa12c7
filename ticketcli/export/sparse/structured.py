"""The structured layouts of the sparse form: a block ticket's weights as BSR (torch's block compressed rows) and a
2:4 ticket's in the compressed 2:4 layout, and the layers that compute with them.

BSR: a weight's (out, in) view, padded with zeros to whole R x C blocks (an edge block is a block like the others),
as torch's BSR arrays: `crow_indices` (block rows + 1, from 0, never decreasing), `col_indices` (per kept block, its
block column, increasing along a block row) and `values` (kept blocks, R, C). BsrLinear and BsrConv2d multiply it
with torch.sparse.mm (on the CPU torch's BSR product takes square blocks only: `bsr_refusal` says where it cannot
run).

2:4 (the file's portable layout): per row of the (out, in) view, in groups of 4 consecutive inputs, the 2 kept
values in `values` (out, in / 2, float32) and their positions inside the group in `positions` (out, in / 2, uint8,
0..3, the pair increasing): entry (i, 2g + k) is W[i, 4g + positions[i, 2g + k]]. A group that keeps fewer than
2 (a 1:4 mask) is filled with a zero at its lowest free positions. SemiStructuredLinear computes with torch's
semi-structured sparse kernels, which run on CUDA only."""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.export.sparse.layers import pair

BSR, TWO_FOUR, CSR = "bsr", "2:4", "csr"
GROUP, KEPT = 4, 2  # the 2:4 layout: 2 kept of every 4


def padded(size: int, side: int) -> int:
    return -(-size // side) * side


def bsr_arrays(w: torch.Tensor, mask: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """(crow, col, values) of the 2-D W * M padded to whole blocks; a block is stored when its mask keeps any entry
    (a block mask keeps it whole)."""
    r, c = block
    rows, cols = w.shape
    pr, pc = padded(rows, r), padded(cols, c)
    full = torch.zeros(pr, pc, dtype=torch.float32, device=w.device)
    full[:rows, :cols] = w * mask.to(w.dtype)
    keep = torch.zeros(pr, pc, dtype=torch.bool, device=w.device)
    keep[:rows, :cols] = mask.to(torch.bool)
    grid = keep.reshape(pr // r, r, pc // c, c).any(dim=(1, 3))
    crow = torch.zeros(pr // r + 1, dtype=torch.int64, device=w.device)
    crow[1:] = torch.cumsum(grid.sum(1), 0)
    col = grid.nonzero()[:, 1]
    values = full.reshape(pr // r, r, pc // c, c).permute(0, 2, 1, 3)[grid].contiguous()
    return crow.to(torch.int32), col.to(torch.int32), values


def bsr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The BSR tensor of checked arrays, of the padded `shape` (torch warns that BSR is beta: not the user's to see)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_bsr_tensor(crow, col, values, shape, check_invariants=False)


def bsr_dense(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The dense (rows, cols) matrix of BSR arrays (their padding cut off)."""
    nb, r, c = values.shape
    rows, cols = shape
    pr, pc = (crow.numel() - 1) * r, padded(cols, c)
    out = torch.zeros(pr // r, pc // c, r, c, dtype=values.dtype, device=values.device)
    block_rows = torch.repeat_interleave(torch.arange(pr // r, device=values.device), (crow[1:] - crow[:-1]).long())
    out[block_rows, col.long()] = values
    return out.permute(0, 2, 1, 3).reshape(pr, pc)[:rows, :cols].contiguous()


def bsr_refusal(device: torch.device, block: tuple[int, int]) -> str | None:
    """Why torch's BSR product cannot run here for this block (None: it can)."""
    if device.type == "cpu" and block[0] != block[1]:
        return f"torch's BSR product on the CPU takes square blocks only, not {block[0]}x{block[1]}"
    return None


def bsr_fails(layer: BsrLinear) -> str | None:
    """Why the BSR product of a made layer fails on its device (None: it runs), tried on one zero column."""
    try:
        layer.product(torch.zeros(layer.in_features, 1, device=layer.weight.device))
    except (RuntimeError, NotImplementedError) as e:
        return f"torch's BSR product refused it ({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})"
    return None


class BsrLinear(nn.Module):
    """y = x W^T + b with W a BSR tensor of the weight padded to whole blocks: the input gets zero columns up to the
    padded width, and the padded rows of the product are cut off."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, out_features: int, in_features: int):
        super().__init__()
        self.out_features, self.in_features = out_features, in_features
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def product(self, flat: torch.Tensor) -> torch.Tensor:
        """W @ flat for flat (in, N): (out, N)."""
        extra = int(self.weight.shape[1]) - flat.shape[0]
        if extra:
            flat = F.pad(flat, (0, 0, 0, extra))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y: torch.Tensor = torch.sparse.mm(self.weight, flat.contiguous())
        return y[: self.out_features]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = self.product(x.reshape(-1, self.in_features).t()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features).contiguous()


class BsrConv2d(BsrLinear):
    """A Conv2d lowered to a matmul (unfold, im2col) whose (out, in * kh * kw) weight is BSR, as BsrLinear's."""

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor | None):
        kh, kw = pair(conv.kernel_size)
        super().__init__(weight, bias, conv.out_channels, conv.in_channels * kh * kw)
        self.kernel_size = (kh, kw)
        self.stride = pair(conv.stride)
        self.padding = pair(conv.padding)
        self.dilation = pair(conv.dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)  # (B, C*kh*kw, L)
        ho = (h + 2 * self.padding[0] - self.dilation[0] * (self.kernel_size[0] - 1) - 1) // self.stride[0] + 1
        wo = (w + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1) // self.stride[1] + 1
        y = self.product(cols.transpose(0, 1).reshape(cols.shape[1], -1))  # (out, B*L)
        y = y.reshape(self.out_features, b, ho * wo).transpose(0, 1)
        if self.bias is not None:
            y = y + self.bias[:, None]
        return y.reshape(b, self.out_features, ho, wo)


def bsr_layer(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> BsrLinear:
    """The BSR counterpart of a lowerable Linear or Conv2d."""
    if isinstance(layer, nn.Conv2d):
        return BsrConv2d(layer, weight, bias)
    assert isinstance(layer, nn.Linear)
    return BsrLinear(weight, bias, layer.out_features, layer.in_features)


def fits_two_four(mask: torch.Tensor) -> str | None:
    """Why a 2-D mask cannot be stored 2:4 (None: it can): its width a multiple of 4, at most 2 kept per group."""
    rows, cols = mask.shape
    if cols % GROUP:
        return f"its input width {cols} is not a multiple of {GROUP}"
    kept = mask.to(torch.bool).reshape(rows, cols // GROUP, GROUP).sum(-1)
    if bool((kept > KEPT).any()):
        i, g = (int(v) for v in (kept > KEPT).nonzero()[0])
        return f"it keeps {int(kept[i, g])} of the 4 inputs {GROUP * g}..{GROUP * g + 3} of row {i}"
    return None


def pack_two_four(w: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, positions) of the 2-D W * M in the 2:4 layout (the mask checked by fits_two_four)."""
    rows, cols = w.shape
    m = mask.to(torch.bool).reshape(rows, cols // GROUP, GROUP)
    # the kept positions first, then the free ones, each in increasing order; the first 2 are stored (sorted)
    order = torch.argsort((~m).to(torch.int8) * GROUP + torch.arange(GROUP, dtype=torch.int8), dim=-1)[..., :KEPT]
    positions = torch.sort(order, dim=-1).values
    vals = (w.to(torch.float32) * mask.to(torch.float32)).reshape(rows, cols // GROUP, GROUP)
    values = torch.gather(vals, -1, positions)
    return values.reshape(rows, -1).contiguous(), positions.reshape(rows, -1).to(torch.uint8).contiguous()


def unpack_two_four(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The dense (out, in) W * M of the 2:4 layout's arrays (checked)."""
    rows, half = values.shape
    out = torch.zeros(rows, half // KEPT, GROUP, dtype=values.dtype, device=values.device)
    out.scatter_(-1, positions.reshape(rows, -1, KEPT).long(), values.reshape(rows, -1, KEPT))
    return out.reshape(rows, -1)


class SemiStructuredLinear(nn.Module):
    """y = x W^T + b with W in torch's semi-structured (2:4) sparse format, on CUDA: the weight padded with zero
    rows and columns to the kernels' multiples, computed in `dtype` (float32 where torch's kernels take it, else
    float16), the result cast back to float32."""

    def __init__(self, dense: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
        super().__init__()
        from torch.sparse import to_sparse_semi_structured

        self.out_features, self.in_features = int(dense.shape[0]), int(dense.shape[1])
        self.dtype = dtype
        pr, pc = padded(self.out_features, 64), padded(self.in_features, 128)
        full = torch.zeros(pr, pc, dtype=dtype, device=dense.device)
        full[: self.out_features, : self.in_features] = dense
        self.weight = to_sparse_semi_structured(full)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = F.pad(x.reshape(-1, self.in_features).to(self.dtype), (0, int(self.weight.shape[1]) - self.in_features))
        y = F.linear(flat, self.weight)[:, : self.out_features].to(torch.float32)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)


def semi_structured(dense: torch.Tensor, bias: torch.Tensor | None, layer: nn.Module) -> tuple[nn.Module | None, str]:
    """(the semi-structured layer of a dense 2:4 W * M on its CUDA device, or None, and why)."""
    if dense.device.type != "cuda":
        return None, f"torch's semi-structured (2:4) kernels run on CUDA only, not on {dense.device.type}"
    if not isinstance(layer, nn.Linear):
        return None, "the semi-structured (2:4) form is made for Linear layers only"
    errors = []
    for dtype in (torch.float32, torch.float16):
        try:
            made = SemiStructuredLinear(dense, bias, dtype)
            made(torch.zeros(1, made.in_features, device=dense.device))  # the kernels run here, or refuse now
            name = str(dtype).removeprefix("torch.")
            return made, f"2:4 semi-structured on CUDA in {name}"
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
            errors.append(str(e).splitlines()[0][:80] if str(e) else type(e).__name__)
    return None, f"torch's semi-structured kernels refused it ({errors[-1]})"
