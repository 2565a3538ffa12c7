"""The exact top-k: which entries a mask keeps, defined once (exact counts, ties to the lowest index).

A mask keeps keep_count(density, n) = floor(density * n) entries: those with the largest values
(joint_topk_masks, topk_mask). Double-scoring ranks a layer's scores S together with auxiliary scores T in an
augmented space: joint_topk_masks([|S|, |T|], k) keeps the k largest of the concatenation at the augmented
density and the mask is its part on S. Ties go to the lowest index of the concatenation, so the mask is unique
and every algorithm that finds the k-th largest value (KTH_ALGORITHMS, one per device by speed) gives the same
bits. warm.py computes the same masks faster during score training."""

from __future__ import annotations

import math
from collections.abc import Sequence

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

# Full (stateless) selection per device type. CPU: measured (benchmarks/topk_scale.py, docs/results.md):
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
