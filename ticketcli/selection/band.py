"""The band search that the warm selector (warm.py) runs: the k-th largest value over several parts, looked for
only in a band [lo, hi] of values, answered exactly or declined (None).

A part is a view: Live (values that change between calls: vectorised passes), Sorted (values that never change:
sorted once, then bisection) or Window (a window of a Sorted part around the threshold, with the count above it;
a query it cannot answer exactly raises OutOfWindow). Only numpy: no state beyond one call's passes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Live:
    """Values that change between calls: vectorised passes."""

    def __init__(self, a: np.ndarray):
        self.a = a
        self.dtype = a.dtype

    def count_above(self, x: float) -> int:
        self.above = self.a > x  # kept for between()
        self.n_above = int(np.count_nonzero(self.above))
        return self.n_above

    def between(self, lo: float) -> np.ndarray:
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

    def count_at_least(self, x: float) -> int:
        return int(np.count_nonzero(self.a >= x))

    def count_greater(self, x: float) -> int:
        return int(np.count_nonzero(self.a > x))

    def band_count_at_least(self, x: float) -> int:
        """count_at_least(x) for an x inside the last band, from the band search's counts (no pass)."""
        return self.n_above + int(np.count_nonzero(self.band_values >= x))

    def band_count_above(self, x: float) -> int:
        return self.n_above + int(np.count_nonzero(self.band_values > x))

    def drop_ties(self, x: float, quota: int) -> None:
        """In the last at_least(x) mask, keep only the `quota` lowest-index entries equal to x."""
        tied = self.band[self.band_values == x]  # ascending: the band's indices come from flatnonzero
        self.ge_lo[tied[max(quota, 0) :]] = False


class Sorted:
    """Values that never change: sorted once, then bisection. `i0` and `n_hi`: how many values lie below and above
    `s` (none here; a Window holds only part of them)."""

    def __init__(self, a: np.ndarray):
        self.s = np.sort(a)
        self.dtype = a.dtype
        self.hi = 0.0
        self.i0, self.n, self.n_hi = 0, self.s.size, 0

    def _inside(self, x: float) -> None:
        # entries below the window are <= s[0] and those above >= s[-1]: exact for s[0] < x < s[-1] (NaN fails)
        if (self.i0 > 0 and not x > self.s[0]) or (self.n_hi > 0 and not x < self.s[-1]):
            raise OutOfWindow

    def count_above(self, x: float) -> int:
        above = self.count_greater(x)
        self.hi = x  # for between()
        return above

    def between(self, lo: float) -> np.ndarray:
        self._inside(lo)
        return self.s[int(np.searchsorted(self.s, lo, "left")) : int(np.searchsorted(self.s, self.hi, "right"))]

    def count_at_least(self, x: float) -> int:
        self._inside(x)
        return self.n - self.i0 - int(np.searchsorted(self.s, x, "left"))

    band_count_at_least = count_at_least  # bisection is cheap anyway

    def count_greater(self, x: float) -> int:
        self._inside(x)
        return self.n - self.i0 - int(np.searchsorted(self.s, x, "right"))

    band_count_above = count_greater


class OutOfWindow(Exception):
    """A query that a window of a frozen part cannot answer exactly."""


class Window(Sorted):
    """A window of a frozen part's sorted values: s = sorted[i0 : i0 + s.size] of n values, n_hi of them above
    it. Counts at a value x are exact when x lies strictly inside the window (or past an end with nothing beyond
    it); any other query raises OutOfWindow."""

    def __init__(self, s: np.ndarray, i0: int, n: int):
        self.s, self.dtype, self.hi = s, s.dtype, 0.0
        self.i0, self.n, self.n_hi = i0, n, n - i0 - s.size


def band_kth(views: Sequence[Live | Sorted], k: int, t: float, w: float) -> float | None:
    """The k-th largest value over all views if it lies in [t - w, t + w], else None."""
    # Every part must compare against the very same bounds, in the arrays' own dtype (a Python float would also
    # make np.searchsorted convert the whole sorted array on every call).
    dt = views[0].dtype.type
    return band_kth_in(views, k, dt(t - w), dt(t + w))


def band_kth_in(views: Sequence[Live | Sorted], k: int, lo: float, hi: float) -> float | None:
    """The k-th largest value over all views if it lies in [lo, hi] (lo <= hi, the views' dtype), else None."""
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
