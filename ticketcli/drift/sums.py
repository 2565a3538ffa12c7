"""Float64 sums and exact counts over float32 tensors, without a float64 copy of the tensor.

torch's `t.sum(dim, dtype=torch.float64)` on the CPU first writes a float64 copy of `t` (and a bool tensor's
`.sum()` an int64 one): for the activations of a convolutional network on a probe of 1024 images that copy costs
several times the convolution that made them. numpy's reductions cast in small buffers instead, so on the CPU
these helpers reduce float32 and float64 tensors through numpy, and elsewhere (CUDA, MPS, half precision) through
torch. Both sum in float64, so the results agree to float64 rounding; counts and extremes are exact.
"""

from __future__ import annotations

import math

import numpy as np
import torch

_NUMPY = (torch.float32, torch.float64)


def _host(t: torch.Tensor) -> np.ndarray | None:
    """t as a numpy view when numpy can reduce it (CPU, float32/float64 or bool), else None."""
    if t.device.type != "cpu" or (t.dtype not in _NUMPY and t.dtype != torch.bool):
        return None
    return t.detach().numpy()


def sum64(t: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Σ of t over `dim` (None: everything) in float64, as a float64 tensor on t's device."""
    a = _host(t)
    if a is None:
        return t.detach().sum(dim if dim is not None else tuple(range(t.dim())), dtype=torch.float64)
    axis = tuple(d % t.dim() for d in dim) if isinstance(dim, tuple) else dim
    return torch.as_tensor(np.add.reduce(a, axis=axis, dtype=np.float64))


def square_sum64(t: torch.Tensor) -> float:
    """Σ t² in float64 (every square exact for float32 input)."""
    a = _host(t)
    if a is None:
        return float(torch.linalg.vector_norm(t.detach(), dtype=torch.float64) ** 2)
    flat = a.reshape(-1)
    return float(np.einsum("i,i->", flat, flat, dtype=np.float64, casting="safe"))


_COMPARE = {
    "<": (np.less, torch.lt),
    ">": (np.greater, torch.gt),
    "==": (np.equal, torch.eq),
}


def compare(t: torch.Tensor, op: str, value: float, *, magnitude: bool = False) -> torch.Tensor:
    """The bool tensor `t op value` (op: "<", ">" or "=="), of |t| when `magnitude`; numpy's comparison loops on
    the CPU, several times faster there than torch's for a bool result. NaN compares False, -0.0 equals 0."""
    a = _host(t)
    np_op, torch_op = _COMPARE[op]
    if a is None:
        return torch_op(t.detach().abs() if magnitude else t.detach(), value)
    return torch.from_numpy(np_op(np.abs(a) if magnitude else a, value))


def count(mask: torch.Tensor) -> int:
    """How many entries of a bool tensor are True."""
    a = _host(mask)
    return int(np.count_nonzero(a)) if a is not None else int(torch.count_nonzero(mask))


def all_but(mask: torch.Tensor, keep: int) -> torch.Tensor:
    """A bool tensor's AND over every dimension but `keep` (a bool vector of size mask.shape[keep])."""
    dims = tuple(d for d in range(mask.dim()) if d != keep % mask.dim())
    a = _host(mask)
    if a is None:
        out = mask
        for d in reversed(dims):
            out = out.all(d)
        return out
    return torch.as_tensor(np.logical_and.reduce(a, axis=dims))


def peak_abs(t: torch.Tensor) -> float:
    """max |t| (NaN when t holds one), without an |t| copy."""
    low, high = (float(v) for v in torch.aminmax(t.detach()))
    return math.nan if math.isnan(low) or math.isnan(high) else max(-low, high)


def masked_sum64(values: torch.Tensor, where: torch.Tensor) -> float:
    """Σ of values where the bool tensor `where` is True, in float64; entries outside it do not count even when
    they are NaN or infinite."""
    a, w = _host(values), _host(where)
    if a is None or w is None:
        return float(torch.where(where, values.detach(), 0.0).sum(dtype=torch.float64))
    with np.errstate(invalid="ignore", over="ignore"):  # inf * False is NaN: handled below
        total = float(np.add.reduce(np.multiply(a, w).reshape(-1), dtype=np.float64))
    if np.isfinite(total):
        return total
    # a non-finite entry outside `where` became NaN in the product: select instead (rare, slower)
    return float(np.add.reduce(a[w], dtype=np.float64))
