"""The mask mathematics: top-k masks (exact counts, ties to the lowest index), the straight-through estimator,
density bookkeeping.

A mask keeps keep_count(density, n) = floor(density * n) entries of a layer: those with the largest scores
(joint_topk_masks, topk_mask). Double-scoring ranks a layer's scores S together with auxiliary scores T in an
augmented space: joint_topk_masks([|S|, |T|], k) keeps the k largest of the concatenation at the augmented
density and the mask is its part on S (methods/scores.py). Ties go to the lowest index of the concatenation, so
the mask is unique and every algorithm that finds the k-th largest value (KTH_ALGORITHMS, one per device by
speed) gives the same bits. The gradient reaches the scores through masked_weight's straight-through estimator.
topk_search.py computes the same masks faster during score training."""

from __future__ import annotations

import math
import weakref
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch


def keep_count(density: float, n: int) -> int:
    """floor(density * n) entries kept (paper: the floor(k_t d_t) largest), robust to 1 - 0.9 = 0.0999..."""
    return max(0, min(n, math.floor(density * n + 1e-6)))


def _kth_sort(values: torch.Tensor, k: int) -> float:
    return float(values.sort().values[values.numel() - k])


def _kth_topk(values: torch.Tensor, k: int) -> float:
    return float(values.topk(k, sorted=False).values.min())  # the k largest as a multiset: their minimum


def _kth_kthvalue(values: torch.Tensor, k: int) -> float:
    return float(values.kthvalue(values.numel() - k + 1).values)


def kth_numpy(values: torch.Tensor, k: int, overwrite: bool = False) -> float:
    """The k-th largest by np.partition's introselect (CPU only); `overwrite` partitions `values` in place
    instead of a copy."""
    if values.device.type != "cpu":
        raise ValueError("the numpy selection runs on the CPU only")
    a, j = values.numpy(), values.numel() - k
    if overwrite:
        a.partition(j)
        return float(a[j])
    return float(np.partition(a, j)[j])


# The k-th largest entry of a 1-D tensor, by algorithm; all return the same value (and so the same mask bits).
KTH_ALGORITHMS = {"sort": _kth_sort, "topk": _kth_topk, "kthvalue": _kth_kthvalue, "numpy": kth_numpy}

# Full (stateless) selection per device type. CPU: measured (benchmarks/topk_scale.py, README "Top-k at scale"):
# numpy's introselect beats torch.kthvalue, torch.topk and torch.sort. CUDA and MPS were NOT measured here (no GPU
# on the development machine); the choice follows how torch implements them: on CUDA torch.topk runs a
# multi-block radix select over one large slice, whereas torch.kthvalue gives each slice a single thread block
# (a 1-D score tensor is one slice) and torch.sort sorts everything; MPS has a native sort while kthvalue is not
# implemented there (CPU fallback) and topk with a large k goes through a sort anyway. benchmarks/topk_scale.py
# prints the measured best when run on a GPU: change this table if it disagrees.
DEFAULT_KTH = {"cpu": "numpy", "cuda": "topk", "mps": "sort"}


def default_algorithm(device: torch.device | str) -> str:
    """The full-selection algorithm used on this device type when none is named (unknown types: torch.sort)."""
    return DEFAULT_KTH.get(torch.device(device).type, "sort")


def kth_largest(values: torch.Tensor, k: int, algorithm: str | None = None) -> float:
    """The k-th largest entry of a 1-D tensor (1 <= k <= n), by `algorithm` (default: the device's)."""
    return KTH_ALGORITHMS[algorithm or default_algorithm(values.device)](values, k)


def joint_topk_masks(parts: Sequence[torch.Tensor], k: int, algorithm: str | None = None) -> list[torch.Tensor]:
    """Keep exactly the k largest entries over all parts taken together (as if flattened and concatenated).

    Ties at the threshold go to the lowest index in that concatenated order, so the result is unique:
    any correct selection algorithm (`algorithm`, a KTH_ALGORITHMS name), on any device, returns the same bits.
    Several parts are concatenated only to find the threshold (and on the CPU that copy is partitioned in
    place); the masks are compared part by part, so no second copy of the scores is made.
    """
    flat = [p.detach().reshape(-1) for p in parts]
    n = sum(f.numel() for f in flat)
    if not 0 <= k <= n:
        raise ValueError(f"cannot keep {k} of {n} entries")
    if k == 0 or k == n:
        return [torch.full(p.shape, k == n, dtype=torch.bool, device=p.device) for p in parts]
    algorithm = algorithm or default_algorithm(flat[0].device)
    if len(flat) == 1:
        v = kth_largest(flat[0], k, algorithm)
    elif algorithm == "numpy":
        v = kth_numpy(torch.cat(flat), k, overwrite=True)  # the concatenation is ours: no second copy
    else:
        v = kth_largest(torch.cat(flat), k, algorithm)
    keep = [f >= v for f in flat]
    extra = sum(int(torch.count_nonzero(m)) for m in keep) - k
    for f, m in zip(reversed(flat), reversed(keep)):  # ties at v: drop the highest-index ones
        if extra <= 0:
            break
        tied = torch.nonzero(f == v).flatten()
        drop = min(extra, tied.numel())
        m[tied[tied.numel() - drop :]] = False
        extra -= drop
    return [m.view(p.shape) for m, p in zip(keep, parts)]


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the k largest entries of `scores` (exactly k; ties to the lowest flat index)."""
    return joint_topk_masks([scores], k)[0]


class _MaskedWeight(torch.autograd.Function):
    """W * H in the forward pass; dL/dS = (dL/d(W*H) * W) * sign(S) in the backward pass.

    Edge-popup's straight-through estimator in one autograd node: the hard top-k passes dL/dH = dL/d(W*H) * W
    to |S| unchanged (as if it were the identity), and d|S|/dS = sign(S) (0 at 0, as torch's abs). With signed
    ranking (the "NoAbs" ablation, H = top-k of S itself) the last factor is 1: dL/dS = dL/d(W*H) * W.
    The mask itself is not needed by the backward pass and is not saved. `owned`: the incoming gradient is a
    fresh tensor that nothing else holds (W * H had one consumer, a linear layer, a convolution or an embedding,
    whose backward made it), so dL/dS is formed in it in place instead of in a second weight-sized temporary.
    """

    @staticmethod
    def forward(
        ctx, scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool, owned: bool
    ) -> torch.Tensor:
        ctx.save_for_backward(scores, weight)
        ctx.signed, ctx.owned = signed, owned
        return _product(weight, mask)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scores, weight = ctx.saved_tensors
        # the same values either way: mul_ and mul run the same kernel; otherwise `grad` may be shared with other
        # branches of the graph and a fresh tensor is needed
        g = grad.mul_(weight) if ctx.owned and grad.shape == weight.shape else grad.mul(weight)
        return (g if ctx.signed else g.mul_(scores.sign())), None, None, None, None


def _product(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weight * mask with the mask's 0/1 as weight's dtype: the same bits as weight * mask.to(weight.dtype).

    A bool mask on the CPU is multiplied by numpy, which casts it inside the multiplication loop: torch's own
    float * bool (and bool -> float cast) is several times slower there, and no float copy of the mask is made."""
    if mask.dtype == torch.bool and weight.device.type == "cpu" and mask.device.type == "cpu":
        w = weight.detach()
        if w.dtype in _NUMPY_FLOATS and w.is_contiguous() and mask.is_contiguous() and w.shape == mask.shape:
            return torch.from_numpy(np.multiply(w.numpy(), mask.numpy()))
    return weight * mask.to(weight.dtype)


_NUMPY_FLOATS = (torch.float32, torch.float64)  # dtypes whose products numpy computes exactly as torch does


def masked_weight(scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool = False) -> torch.Tensor:
    """The effective weight W * H, differentiable in the raw scores S through |S| (or S itself when `signed`)
    and a straight-through top-k. `mask`: bool or 0/1 in any dtype."""
    return _MaskedWeight.apply(scores, weight, mask, signed, False)


class MaskedWeights(Mapping[str, torch.Tensor]):
    """The effective weights W * H of a training forward pass, each made when the layer asks for it, and not kept
    for the backward pass: inside `recomputing()`, autograd saves a recipe instead of W * H and the backward
    pass multiplies it again (the same product, so the same bits) when it needs it.

    What the forward pass of a masked layer used to keep alive until the backward pass, W * H (4 bytes a
    weight), is then never held for more than one layer at a time. `scores[n]`: S for every masked name n.
    `recompute`: the names whose W * H is recomputed (default: all); the others are kept as autograd keeps them,
    and with none the hooks are not even installed (their Python costs more than a small layer's memory is
    worth). `owned`: the caller's layers consume each W * H once, in a linear layer, a convolution or an
    embedding (the built-in models), so that the gradient reaching W * H is fresh and dL/dS is formed in it in
    place.
    """

    def __init__(
        self,
        scores: Mapping[str, torch.Tensor],
        weights: Mapping[str, torch.Tensor],
        masks: Mapping[str, torch.Tensor],
        *,
        signed: bool = False,
        owned: bool = False,
        recompute: Collection[str] | None = None,
    ):
        self.scores, self.weights, self.masks, self.signed, self.owned = scores, weights, masks, signed, owned
        self.recompute = frozenset(scores if recompute is None else recompute)
        self._made: dict[int, tuple[weakref.ref, str]] = {}  # id(W * H) -> (the tensor, weakly; its name)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.scores:
            raise KeyError(name)
        w = _MaskedWeight.apply(self.scores[name], self.weights[name], self.masks[name], self.signed, self.owned)
        if name in self.recompute:
            self._made[id(w)] = (weakref.ref(w), name)
        return w

    def __iter__(self) -> Iterator[str]:
        return iter(self.scores)

    def __len__(self) -> int:
        return len(self.scores)

    @contextmanager
    def recomputing(self) -> Iterator[None]:
        """Within: a W * H (or a view of it) that an operation saves for its backward pass is saved as a recipe
        (weight, mask, the view's geometry) and multiplied again when the backward pass unpacks it."""
        if not self.recompute:
            yield
            return
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            try:
                yield
            finally:
                self._made.clear()

    def _pack(self, t: torch.Tensor) -> torch.Tensor | _Recipe:
        base = t if t._base is None else t._base
        made = self._made.get(id(base))
        if made is None or made[0]() is not base:  # not ours (an id can be reused once its tensor is gone)
            return t
        w, m = self.weights[made[1]], self.masks[made[1]]
        return _Recipe(w, m, w._version, m._version, tuple(t.shape), t.stride(), int(t.storage_offset()))


class _Recipe(NamedTuple):
    """What W * H's backward needs to make it again: the frozen weight and the mask, at their versions then."""

    weight: torch.Tensor
    mask: torch.Tensor
    weight_version: int
    mask_version: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def _unpack(saved: torch.Tensor | _Recipe) -> torch.Tensor:
    if isinstance(saved, torch.Tensor):
        return saved
    if saved.weight._version != saved.weight_version or saved.mask._version != saved.mask_version:
        raise RuntimeError("a weight or mask used in the forward pass was modified in place before its backward pass")
    w = _product(saved.weight, saved.mask)
    contiguous = saved.offset == 0 and saved.shape == tuple(w.shape) and saved.stride == w.stride()
    return w if contiguous else w.as_strided(saved.shape, saved.stride, saved.offset)


def mask_stats(masks: dict[str, torch.Tensor]) -> dict:
    """Kept/total counts and achieved density globally and per parameter."""
    per: dict[str, dict[str, int | float]] = {n: {"kept": int(m.sum()), "total": m.numel()} for n, m in masks.items()}
    kept = sum(v["kept"] for v in per.values())
    total = sum(v["total"] for v in per.values())
    for v in per.values():
        v["density"] = v["kept"] / v["total"] if v["total"] else 0.0
    return {"kept": kept, "total": total, "density": kept / total if total else 0.0, "per_param": per}
