"""Top-k masks (exact counts, ties to the lowest index), the straight-through estimator, density bookkeeping."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch


def keep_count(density: float, n: int) -> int:
    """floor(density * n) entries kept (paper: the floor(k_t d_t) largest), robust to 1 - 0.9 = 0.0999..."""
    return max(0, min(n, math.floor(density * n + 1e-6)))


def _flat_values(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    flat = [p.detach().reshape(-1) for p in parts]
    return flat[0] if len(flat) == 1 else torch.cat(flat)


def _kth_sort(values: torch.Tensor, k: int) -> float:
    return float(values.sort().values[values.numel() - k])


def _kth_topk(values: torch.Tensor, k: int) -> float:
    return float(values.topk(k, sorted=False).values.min())  # the k largest as a multiset: their minimum


def _kth_kthvalue(values: torch.Tensor, k: int) -> float:
    return float(values.kthvalue(values.numel() - k + 1).values)


def _kth_numpy(values: torch.Tensor, k: int, overwrite: bool = False) -> float:
    """np.partition's introselect (CPU only); `overwrite` partitions `values` in place instead of a copy."""
    if values.device.type != "cpu":
        raise ValueError("the numpy selection runs on the CPU only")
    a, j = values.numpy(), values.numel() - k
    if overwrite:
        a.partition(j)
        return float(a[j])
    return float(np.partition(a, j)[j])


# The k-th largest entry of a 1-D tensor, by algorithm; all return the same value (and so the same mask bits).
KTH_ALGORITHMS = {"sort": _kth_sort, "topk": _kth_topk, "kthvalue": _kth_kthvalue, "numpy": _kth_numpy}
# Every selection benchmarks/topk_scale.py compares: the stateless ones above and TopKSelector's warm band search.
SELECT_ALGORITHMS = (*KTH_ALGORITHMS, "band")

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
        v = _kth_numpy(torch.cat(flat), k, overwrite=True)  # the concatenation is ours: no second copy
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


class TopKSelector:
    """joint_topk_masks(...)[0] with a warm start, for masks recomputed every step from slowly moving scores.

    On the CPU it first looks for the k-th largest value in a narrow band around the previous step's
    threshold (a few vectorised passes instead of a full selection), falling back to a full selection when the
    band misses. Parts declared `frozen` (the same values on every call for this key, e.g. auxiliary scores
    that never train) are sorted once and searched by bisection; several parts that change (trainable auxiliary
    scores) get a full selection. The result is always exactly joint_topk_masks(parts, k)[0]: only the search
    is cheaper.
    """

    def __init__(self, algorithm: str = "band"):
        """`algorithm`: "band" (the warm search on the CPU; elsewhere the device's default full selection) or a
        KTH_ALGORITHMS name, used for a full selection on every call (benchmarks compare them)."""
        if algorithm not in SELECT_ALGORITHMS:
            raise ValueError(f"unknown selection algorithm {algorithm!r}; choose from {', '.join(SELECT_ALGORITHMS)}")
        self.algorithm = algorithm
        # key -> (last threshold, band half-width, last change of the threshold)
        self.state: dict[str, tuple[float, float, float]] = {}
        self.sorted: dict[str, list[_Sorted]] = {}  # key -> frozen parts, sorted once
        self.searches = self.misses = 0  # band searches, and those that fell back to a full selection

    def __call__(
        self, key: str, parts: Sequence[torch.Tensor], k: int, dtype: torch.dtype = torch.bool, frozen: bool = False
    ) -> torch.Tensor:
        """The mask of the first part, as `dtype` (a float dtype saves torch's slow bool->float cast)."""
        n = sum(p.numel() for p in parts)
        full = None if self.algorithm == "band" else self.algorithm
        # Several live parts (trainable auxiliary scores): measured slower than a full selection at 10^7
        # weights (benchmarks/topk_scale.py): under weight decay the auxiliary scores collapse into a dense,
        # tied cluster around the threshold, so the band holds millions of values. Full selection there.
        live_aux = len(parts) > 1 and not frozen
        if k <= 0 or k >= n or full is not None or live_aux or any(p.device.type != "cpu" for p in parts):
            return joint_topk_masks(parts, k, full)[0].to(dtype)
        first = _Live(parts[0].detach().reshape(-1).numpy())
        if frozen:
            if key not in self.sorted:
                self.sorted[key] = [_Sorted(p.detach().reshape(-1).numpy()) for p in parts[1:]]
            views = [first, *self.sorted[key]]
        else:
            views = [first]  # one part: several live ones took the full selection above
        last = self.state.get(key)
        # Scores trained by Adam drift steadily (every entry moves by ~lr a step), so the threshold does too:
        # centre the band on the linear extrapolation and size it by the extrapolation's error, not by the step.
        guess = None if last is None else last[0] + last[2]
        v = None if last is None else _band_kth(views, k, guess, last[1])
        self.searches += last is not None
        self.misses += last is not None and v is None
        if v is None:
            # a fresh concatenation (several parts) is ours to partition in place: one copy of the scores, not two
            v = _kth_numpy(_flat_values(parts), k, overwrite=len(parts) > 1)
            w = 0.01 * abs(v) + 1e-12 if last is None else max(4 * abs(v - guess), 4 * last[1])
            x = first.a.dtype.type(v)
            keep = first.a >= x  # exact: v is one of the values
            kept = int(np.count_nonzero(keep)) + sum(p.count_at_least(x) for p in views[1:])
            if kept != k:  # ties at v, resolved as joint_topk_masks does without concatenating again
                tied = np.flatnonzero(first.a == x)
                keep[tied[max(k - sum(p.count_greater(x) for p in views), 0) :]] = False
                kept = k
        else:
            w = max(4 * abs(v - guess), 0.5 * last[1], 1e-7 * abs(v) + 1e-30)  # wide is cheap, a miss is not
            keep = first.at_least(v)  # from the band search's passes, without another one over the scores
            x = first.a.dtype.type(v)
            kept = sum(p.band_count_at_least(x) for p in views)  # likewise
            if kept != k:  # ties at v: the first part's come first in concatenated order, lowest index first
                first.drop_ties(x, k - sum(p.band_count_above(x) for p in views))
                kept = k
        self.state[key] = (v, w, 0.0 if last is None else v - last[0])
        if kept != k:
            return joint_topk_masks(parts, k)[0].to(dtype)  # ties at the threshold: rare, do it exactly
        if dtype != torch.bool:
            keep = keep.astype(torch.empty((), dtype=dtype).numpy().dtype)  # ~5x faster than torch's cast
        return torch.from_numpy(keep).view(parts[0].shape)


class _Live:
    """Values that change between calls: vectorised passes."""

    def __init__(self, a: np.ndarray):
        self.a = a

    def count_above(self, x) -> int:
        self.above = self.a > x  # kept for between()
        self.n_above = int(np.count_nonzero(self.above))
        return self.n_above

    def between(self, lo) -> np.ndarray:
        """Values in [lo, x] for the x of the last count_above (lo <= x)."""
        self.ge_lo = self.a >= lo
        self.band = np.flatnonzero(self.ge_lo ^ self.above)  # above is a subset of ge_lo
        self.band_values = self.a[self.band]
        return self.band_values

    def at_least(self, v: float) -> np.ndarray:
        """a >= v as bool, for a v inside the last band: ge_lo minus the band entries below v."""
        keep = self.ge_lo
        keep[self.band[self.band_values < self.a.dtype.type(v)]] = False
        return keep

    def count_at_least(self, x) -> int:
        return int(np.count_nonzero(self.a >= x))

    def count_greater(self, x) -> int:
        return int(np.count_nonzero(self.a > x))

    def band_count_at_least(self, x) -> int:
        """count_at_least(x) for an x inside the last band, from the band search's counts (no pass)."""
        return self.n_above + int(np.count_nonzero(self.band_values >= x))

    def band_count_above(self, x) -> int:
        return self.n_above + int(np.count_nonzero(self.band_values > x))

    def drop_ties(self, x, quota: int) -> None:
        """In the last at_least(x) mask, keep only the `quota` lowest-index entries equal to x."""
        tied = self.band[self.band_values == x]  # ascending: the band's indices come from flatnonzero
        self.ge_lo[tied[max(quota, 0) :]] = False


class _Sorted:
    """Values that never change: sorted once, then bisection."""

    def __init__(self, a: np.ndarray):
        self.s = np.sort(a)
        self.hi = 0.0

    def count_above(self, x: float) -> int:
        self.hi = x
        return self.s.size - int(np.searchsorted(self.s, x, "right"))

    def between(self, lo: float) -> np.ndarray:
        return self.s[int(np.searchsorted(self.s, lo, "left")) : int(np.searchsorted(self.s, self.hi, "right"))]

    def count_at_least(self, x: float) -> int:
        return self.s.size - int(np.searchsorted(self.s, x, "left"))

    band_count_at_least = count_at_least  # bisection is cheap anyway

    def count_greater(self, x: float) -> int:
        return self.s.size - int(np.searchsorted(self.s, x, "right"))

    band_count_above = count_greater


def _band_kth(views: list, k: int, t: float, w: float) -> float | None:
    """The k-th largest value over all views if it lies in [t - w, t + w], else None."""
    # Every part must compare against the very same bounds, in the arrays' own dtype (a Python float would also
    # make np.searchsorted convert the whole sorted array on every call).
    dt = views[0].a.dtype.type
    lo, hi = dt(t - w), dt(t + w)
    c_hi = sum(v.count_above(hi) for v in views)
    if c_hi >= k:
        return None
    band = [v.between(lo) for v in views]
    size = sum(b.size for b in band)
    if c_hi + size < k:
        return None
    j = size - (k - c_hi)  # position of the (k - c_hi)-th largest in ascending order
    if len(band) == 1:
        return float(np.partition(band[0], j)[j])  # a copy: the band's values are used again by at_least
    vals = np.concatenate(band)  # ours: partition it in place (the band can hold millions of tied-up values)
    vals.partition(j)
    return float(vals[j])


class _MaskedWeight(torch.autograd.Function):
    """W * H in the forward pass; dL/dS = (dL/d(W*H) * W) * sign(S) in the backward pass.

    Edge-popup's straight-through estimator in one autograd node: the hard top-k passes dL/dH = dL/d(W*H) * W
    to |S| unchanged (as if it were the identity), and d|S|/dS = sign(S) (0 at 0, as torch's abs). With signed
    ranking (the "NoAbs" ablation, H = top-k of S itself) the last factor is 1: dL/dS = dL/d(W*H) * W.
    """

    @staticmethod
    def forward(ctx, scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool) -> torch.Tensor:
        ctx.save_for_backward(scores, weight)
        ctx.signed = signed
        return weight * mask

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scores, weight = ctx.saved_tensors
        g = grad.mul(weight)
        return (g if ctx.signed else g.mul_(scores.sign())), None, None, None


def masked_weight(scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool = False) -> torch.Tensor:
    """The effective weight W * H, differentiable in the raw scores S through |S| (or S itself when `signed`)
    and a straight-through top-k."""
    return _MaskedWeight.apply(scores, weight, mask.to(weight.dtype), signed)


def mask_stats(masks: dict[str, torch.Tensor]) -> dict:
    """Kept/total counts and achieved density globally and per parameter."""
    per = {n: {"kept": int(m.sum()), "total": m.numel()} for n, m in masks.items()}
    kept = sum(v["kept"] for v in per.values())
    total = sum(v["total"] for v in per.values())
    for v in per.values():
        v["density"] = v["kept"] / v["total"] if v["total"] else 0.0
    return {"kept": kept, "total": total, "density": kept / total if total else 0.0, "per_param": per}
