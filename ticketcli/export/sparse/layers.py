"""The sparse runtime form's layers: a Linear, and a Conv2d lowered to a matmul (unfold, im2col), whose masked weight
W * M is a torch CSR tensor multiplied by `torch.sparse.mm`; `csr_of` builds that tensor from a dense W * M and
`csr_tensor` from its three arrays (checked by the caller: file.py)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


@contextmanager
def quiet_csr() -> Iterator[None]:
    """torch's one-time warnings about CSR tensors (a beta feature; invariant checks off by default): the layers
    check their indices themselves (file.py), and the warnings would reach the user's terminal."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
        yield


def index_dtype(nnz: int, rows: int, cols: int) -> torch.dtype:
    """int32 indices where they fit (half the bytes, and the kernels take them), else int64."""
    return torch.int32 if max(nnz, rows, cols) < 2**31 - 1 else torch.int64


def csr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The CSR tensor of these arrays, without copying them (they must already hold a valid CSR matrix)."""
    with quiet_csr():
        return torch.sparse_csr_tensor(crow, col, values, shape, check_invariants=False)


def csr_of(dense: torch.Tensor, mask: torch.Tensor, rows: int = 4096) -> torch.Tensor:
    """The CSR tensor of `dense` viewed as (shape[0], rest), storing the entries `mask` keeps (an exact zero that
    the mask keeps is stored too), built `rows` rows at a time so that no index array as large as the layer is
    made."""
    w = dense.reshape(dense.shape[0], -1)
    m = mask.reshape(w.shape)
    n_rows, n_cols = w.shape
    counts = torch.zeros(n_rows + 1, dtype=torch.int64)
    cols: list[torch.Tensor] = []
    vals: list[torch.Tensor] = []
    for start in range(0, n_rows, rows):
        keep = m[start : start + rows].to(torch.bool)
        counts[start + 1 : start + 1 + keep.shape[0]] = keep.sum(1)
        cols.append(keep.nonzero()[:, 1].to(torch.int32 if n_cols < 2**31 - 1 else torch.int64))
        vals.append(w[start : start + rows][keep].to(torch.float32))
    crow = torch.cumsum(counts, 0)
    nnz = int(crow[-1])
    dtype = index_dtype(nnz, n_rows, n_cols)
    col = torch.cat(cols).to(dtype) if cols else torch.zeros(0, dtype=dtype)
    values = torch.cat(vals) if vals else torch.zeros(0)
    return csr_tensor(crow.to(dtype), col, values.to(dense.device), (n_rows, n_cols))


class SparseLinear(nn.Module):
    """y = x W^T + b with W a CSR tensor (out_features, in_features): torch.sparse.mm(W, x^T)^T."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        with quiet_csr():
            y = torch.sparse.mm(self.weight, flat.t().contiguous()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)


class SparseConv2d(nn.Module):
    """A Conv2d lowered to a matmul: unfold the input into columns (im2col), multiply by the CSR weight
    (out_channels, in_channels * kh * kw) and fold the result back to (B, out, H', W'). One group only."""

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_channels = conv.out_channels
        self.kernel_size = conv.kernel_size
        self.stride = conv.stride
        self.padding = conv.padding
        self.dilation = conv.dilation
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)  # (B, C*kh*kw, L)
        ho = (h + 2 * self.padding[0] - self.dilation[0] * (self.kernel_size[0] - 1) - 1) // self.stride[0] + 1
        wo = (w + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1) // self.stride[1] + 1
        flat = cols.transpose(0, 1).reshape(cols.shape[1], -1)  # (C*kh*kw, B*L)
        with quiet_csr():
            y = torch.sparse.mm(self.weight, flat)  # (out, B*L)
        y = y.reshape(self.out_channels, b, ho * wo).transpose(0, 1)
        if self.bias is not None:
            y = y + self.bias[:, None]
        return y.reshape(b, self.out_channels, ho, wo)


def lowerable(layer: nn.Module) -> bool:
    """A layer the sparse form can compute: a Linear, or a Conv2d with one group and numeric, not 'same', padding
    (the unfold takes numbers) in zero padding mode."""
    if isinstance(layer, nn.Linear):
        return True
    return (
        isinstance(layer, nn.Conv2d)
        and layer.groups == 1
        and layer.padding_mode == "zeros"
        and not isinstance(layer.padding, str)
    )


def sparse_layer(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    """The sparse counterpart of a lowerable `layer` with CSR `weight` (its (out, rest) view) and dense `bias`."""
    if isinstance(layer, nn.Conv2d):
        return SparseConv2d(layer, weight, bias)
    return SparseLinear(weight, bias)
