"""The sparse runtime form's layers: a Linear, and a Conv2d lowered to a matmul (unfold, im2col), whose masked weight
W * M is a torch CSR tensor multiplied by `csr_matmul`; `csr_of` builds that tensor from a dense W * M and
`csr_tensor` from its three arrays (checked by the caller: file.py)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import cast

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


MaskRows = Callable[[int, int], torch.Tensor]  # (start, stop) -> the mask's rows start..stop-1, bool


def chunk_rows(cols: int) -> int:
    """Rows handled at a time: about a million entries, so that no temporary is a sizeable part of a layer."""
    return max(1, (1 << 20) // max(1, cols))


def csr_rows(w: torch.Tensor, mask_rows: MaskRows, *, zero_dropped: bool = False) -> torch.Tensor:
    """The CSR tensor of the 2-D `w`, storing the entries the mask keeps (an exact zero that it keeps is stored
    too), built a few rows at a time into arrays allocated once at their final size (the mask's rows are asked
    for twice: counted, then gathered). `zero_dropped`: also zero the dropped entries of `w` in place, making it
    the dense W * M."""
    n_rows, n_cols = w.shape
    step = chunk_rows(n_cols)
    counts = torch.zeros(n_rows + 1, dtype=torch.int64)
    for start in range(0, n_rows, step):
        stop = min(n_rows, start + step)
        counts[start + 1 : stop + 1] = mask_rows(start, stop).sum(1)
    crow = torch.cumsum(counts, 0)
    del counts
    nnz = int(crow[-1])
    dtype = index_dtype(nnz, n_rows, n_cols)
    col = torch.empty(nnz, dtype=dtype)
    values = torch.empty(nnz, dtype=torch.float32, device=w.device)
    for start in range(0, n_rows, step):
        stop = min(n_rows, start + step)
        keep = mask_rows(start, stop).to(w.device, torch.bool)
        a, b = int(crow[start]), int(crow[stop])
        col[a:b] = keep.nonzero()[:, 1].to(dtype).cpu()
        values[a:b] = w[start:stop][keep]
        if zero_dropped:
            w[start:stop].mul_(keep)
    return csr_tensor(crow.to(dtype).to(w.device), col.to(w.device), values, (n_rows, n_cols))


def csr_of(dense: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The CSR tensor of `dense` viewed as (shape[0], rest), storing the entries `mask` keeps."""
    w = dense.reshape(dense.shape[0], -1)
    m = mask.reshape(w.shape)
    return csr_rows(w, lambda start, stop: m[start:stop].to(torch.bool))


NARROW = 16  # right-hand columns (the batch, for a Linear) below which torch.sparse.mm is the faster CPU kernel


def csr_matmul(weight: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """The product (m, n) of the CSR `weight` (m, k) and the contiguous `dense` (k, n). On the CPU with at least
    NARROW columns, an embedding bag: row i of the product is the sum of `dense`'s rows col[crow[i]:crow[i + 1]]
    weighted by the values, one gather-and-scale kernel; measured on one thread it is about twice as fast as
    torch.sparse.mm's (MKL) at 64 columns and 2 to 20% density, but slower at 1 to 8 columns, where
    torch.sparse.mm computes (as on other devices: on CUDA it calls cuSPARSE)."""
    if weight.device.type == "cpu" and dense.shape[1] >= NARROW:
        return F.embedding_bag(
            weight.col_indices(),
            dense,
            weight.crow_indices(),
            mode="sum",
            per_sample_weights=weight.values(),
            include_last_offset=True,
        )
    if weight.device.type == "cpu":  # no warning on the CPU: not worth a warnings context per call
        y: torch.Tensor = torch.sparse.mm(weight, dense)
        return y
    with quiet_csr():
        y = torch.sparse.mm(weight, dense)
    return y


def param(layer: nn.Module, name: str) -> torch.Tensor | None:
    """A layer's weight or bias (None where it has none), typed."""
    t = getattr(layer, name, None)
    return t.detach() if isinstance(t, torch.Tensor) else None


def weight_of(layer: nn.Module) -> torch.Tensor:
    w = param(layer, "weight")
    if w is None:
        raise TypeError(f"{type(layer).__name__} has no weight")
    return w


def pair(v: object) -> tuple[int, int]:
    """A Conv2d's kernel size, stride, padding or dilation as two ints."""
    a, b = cast(tuple[int, int], v)
    return int(a), int(b)


ROWS = 1024  # a contiguous input's rows (a sequence's positions) multiplied at a time on the CPU, past this many
COLUMN_FLOATS = 1 << 20  # a transposed input (a sparse product): columns of x^T copied at a time, this many values


class SparseLinear(nn.Module):
    """y = x W^T + b with W a CSR tensor (out_features, in_features): csr_matmul(W, x^T)^T.

    `transposed_out` chooses the layout of y: True, the product's transpose as a view (no copy; the next sparse
    layer's x^T is then contiguous already); False, y copied contiguous (a residual add, a LayerNorm or attention's
    reshape read a transposed view several times slower than that copy costs); None (the default), a view for a
    2-D input (an MLP's chain of layers) and a copy for a sequence's (batch, positions, features)."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, transposed_out: bool | None = None):
        super().__init__()
        self.out_features, self.in_features = int(weight.shape[0]), int(weight.shape[1])
        self.transposed_out = transposed_out
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)  # a view where x is a sparse layer's transposed product
        transposed = self.transposed_out if self.transposed_out is not None else x.dim() == 2
        rows = ROWS if flat.is_contiguous() else max(ROWS, COLUMN_FLOATS // self.in_features)
        if flat.shape[0] > rows and self.weight.device.type == "cpu":
            return self._by_rows(flat, transposed, rows).reshape(*lead, self.out_features)
        # x^T contiguous: a no-op where x is a sparse layer's product returned as a transposed view (two copies
        # saved, a third of a 98% MLP's time at batch 64)
        yt = self._product(flat.t().contiguous())
        y = yt.t() if transposed else yt.t().contiguous()
        return y.reshape(*lead, self.out_features)

    def _product(self, xt: torch.Tensor) -> torch.Tensor:
        """W x^T + b for the contiguous x^T: (out_features, columns)."""
        yt = csr_matmul(self.weight, xt)
        return yt if self.bias is None else yt.add_(self.bias[:, None])  # in place: the product is a fresh tensor

    def _by_rows(self, flat: torch.Tensor, transposed: bool, rows: int) -> torch.Tensor:
        """The product of a (positions, in_features) input `rows` positions at a time: each block's x^T (a copy)
        and product stay in the CPU's cache (a sequence's 32768 positions multiplied at once stream every row of
        x^T from memory once per weight entry that reads it, up to 3x slower), written into the output's layout."""
        n = flat.shape[0]
        shape = (self.out_features, n) if transposed else (n, self.out_features)
        out = torch.empty(shape, dtype=flat.dtype, device=flat.device)
        for start in range(0, n, rows):
            part = self._product(flat[start : start + rows].t().contiguous())
            if transposed:
                out[:, start : start + rows] = part
            else:
                out[start : start + rows] = part.t()
        return out.t() if transposed else out


class SparseConv2d(nn.Module):
    """A Conv2d lowered to a matmul: unfold the input into columns (im2col), multiply by the CSR weight
    (out_channels, in_channels * kh * kw) and fold the result back to (B, out, H', W'). One group only."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_channels = conv.out_channels
        self.kernel_size = pair(conv.kernel_size)
        self.stride = pair(conv.stride)
        self.padding = pair(conv.padding)  # numbers: lowerable() refuses a 'same' or 'valid' padding
        self.dilation = pair(conv.dilation)
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)  # (B, C*kh*kw, L)
        ho = (h + 2 * self.padding[0] - self.dilation[0] * (self.kernel_size[0] - 1) - 1) // self.stride[0] + 1
        wo = (w + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1) // self.stride[1] + 1
        flat = cols.transpose(0, 1).reshape(cols.shape[1], -1)  # (C*kh*kw, B*L)
        y = csr_matmul(self.weight, flat.contiguous())  # (out, B*L)
        y = y.reshape(self.out_channels, b, ho * wo).transpose(0, 1)
        if self.bias is not None:
            y = y + self.bias[:, None]
        return y.reshape(b, self.out_channels, ho, wo)


class TransposedInputLinear(nn.Linear):
    """A Linear kept dense in the sparse form, taking a sparse layer's product as it comes: a 2-D transposed view
    (its transpose contiguous) is multiplied as W x^T, and that product's transpose returned, in the layout
    SparseLinear returns; nn.Linear on it reads it several times slower, and copying it first costs more than the
    product (64 x 1024 -> 10 on one thread: 0.25 ms as it comes, 0.09 ms copied, 0.024 ms as W x^T). A sequence
    (batch, positions, features) in that layout is multiplied as x W^T, the BLAS reading x transposed in place, into
    a contiguous product, the layout its residual adds and norms read fastest. Any other input is multiplied as
    nn.Linear does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.is_contiguous():
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, x.shape[-1])  # a view where x is a transposed product; else a contiguous copy
        if flat.is_contiguous() or not flat.t().is_contiguous():
            return F.linear(flat.contiguous(), self.weight, self.bias).reshape(*x.shape[:-1], -1)
        if x.dim() > 2:
            w = self.weight.t()
            y = torch.mm(flat, w) if self.bias is None else torch.addmm(self.bias, flat, w)
            return y.reshape(*x.shape[:-1], -1)
        xt = flat.t()
        if self.bias is None:
            return torch.mm(self.weight, xt).t()
        return torch.addmm(self.bias[:, None], self.weight, xt).t()


def dense_linears_take_transposed_inputs(root: nn.Module) -> None:
    """Make every plain nn.Linear in `root` a TransposedInputLinear: the same module (parameters, hooks, state dict
    keys), whose class is swapped as torch's parametrizations swap theirs."""
    for layer in root.modules():
        if type(layer) is nn.Linear:
            layer.__class__ = TransposedInputLinear


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


def dense_of(csr: torch.Tensor) -> torch.Tensor:
    """The dense matrix of a CSR tensor, filled a few rows at a time (torch's to_dense peaks at about twice the
    dense size)."""
    crow, col, values = csr.crow_indices(), csr.col_indices(), csr.values()
    rows, cols = int(csr.shape[0]), int(csr.shape[1])
    out = torch.zeros(rows, cols, dtype=values.dtype, device=values.device)
    step = chunk_rows(cols)
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        a, b = int(crow[start]), int(crow[stop])
        counts = (crow[start + 1 : stop + 1] - crow[start:stop]).long()
        r = torch.repeat_interleave(torch.arange(start, stop, device=out.device), counts)
        out[r, col[a:b].long()] = values[a:b]
    return out


def dense_layer(layer: SparseLinear | SparseConv2d) -> nn.Module:
    """The dense nn.Linear or nn.Conv2d computing what a sparse layer computes (W * M dense), on its device."""
    weight = dense_of(layer.weight)
    bias = layer.bias
    dense: nn.Linear | nn.Conv2d
    if isinstance(layer, SparseConv2d):
        kh, kw = layer.kernel_size
        c = weight.shape[1] // (kh * kw)
        dense = nn.Conv2d(
            c,
            layer.out_channels,
            layer.kernel_size,
            layer.stride,
            layer.padding,
            layer.dilation,
            bias=bias is not None,
            device="meta",  # its parameters are set below: nothing allocated for the throw-away init
        )
        weight = weight.reshape(layer.out_channels, c, kh, kw)
    else:
        dense = nn.Linear(layer.in_features, layer.out_features, bias=bias is not None, device="meta")
    dense.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        dense.bias = nn.Parameter(bias, requires_grad=False)
    return dense.eval()
