"""The warm-started top-k search that makes score training fast; the masks it returns are exact.py's, bit for bit.

What it speeds up: score-based methods (edge-popup, double-scoring) recompute every layer's exact top-k mask at
every step from scores that move only a little. A full selection (exact.joint_topk_masks: numpy's introselect
over all n scores) costs a few passes over n per step; TopKSelector instead looks for the k-th largest value in a
narrow band around the previous step's threshold, extrapolated linearly (Adam moves every score by about lr a step,
so the threshold shifts steadily): counting the entries above the band and partitioning only the band's few values
(band.py).
Auxiliary parts that never change (double-scoring's frozen auxiliary scores) are sorted once and bisected; once
their owner can compute them again (a seeded redraw), only a window of the sorted values around the threshold is
kept, with the count above it, and rebuilt from a redraw in the rare step whose threshold leaves it.

How it is checked against the plain definition: the result must equal joint_topk_masks(parts, k)[0] (exactly k kept,
ties to the lowest index in concatenated order), whatever the warm state. The code never trusts the band: a band
that does not hold the k-th largest value returns None and a full selection runs; ties at the threshold are resolved
as joint_topk_masks resolves them. The tests (tests/test_topk_search.py) compare the selector, cold and warm over
many steps with injected ties and jumps, against a torch stable-sort oracle and joint_topk_masks, and check that the
band search either answers exactly or declines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ticketcli.selection.band import Live, OutOfWindow, Sorted, Window, band_kth, band_kth_in
from ticketcli.selection.exact import KTH_ALGORITHMS, joint_topk_masks, kth_numpy

# Every selection benchmarks/topk_scale.py compares: exact.py's stateless ones and TopKSelector's warm band search.
SELECT_ALGORITHMS = (*KTH_ALGORITHMS, "band")


class TopKSelector:
    """joint_topk_masks(...)[0] with a warm start, for masks recomputed every step from slowly moving scores.

    On the CPU it first looks for the k-th largest value in a narrow band around the previous step's
    threshold (a few vectorised passes instead of a full selection), falling back to a full selection when the
    band misses. Parts declared `frozen` (the same values on every call for this key, e.g. auxiliary scores
    that never train) are sorted once and searched by bisection; several parts that change (trainable auxiliary
    scores) get a full selection. The result is always exactly joint_topk_masks(parts, k)[0]: only the search
    is cheaper.
    """

    def __init__(self, algorithm: str = "band") -> None:
        """`algorithm`: "band" (the warm search on the CPU; elsewhere the device's default full selection) or a
        KTH_ALGORITHMS name, used for a full selection on every call (benchmarks compare them)."""
        if algorithm not in SELECT_ALGORITHMS:
            raise ValueError(f"unknown selection algorithm {algorithm!r}; choose from {', '.join(SELECT_ALGORITHMS)}")
        self.algorithm = algorithm
        # key -> (last threshold, band half-width, last change of the threshold)
        self.state: dict[str, tuple[float, float, float]] = {}
        self.sorted: dict[str, list[Sorted]] = {}  # key -> frozen parts, sorted once (or windows of them)
        # key -> how to compute the frozen parts again (ranked, in order), for keys whose frozen parts are held
        # only as windows around the threshold (window()); a window the threshold leaves is rebuilt from them
        self.sources: dict[str, Callable[[], list[torch.Tensor]]] = {}
        self.searches = self.misses = 0  # band searches, and those that fell back to a full selection
        self.rebuilds = 0  # windows rebuilt from their source because the threshold left them
        # a window holds this share of a frozen part's sorted values on each side of the threshold (at least
        # window_min of them): the threshold moves little between steps, so it rarely leaves one
        self.window_share, self.window_min = 1 / 64, 1024

    def __call__(
        self, key: str, parts: Sequence[torch.Tensor], k: int, dtype: torch.dtype = torch.bool, frozen: bool = False
    ) -> torch.Tensor:
        """The mask of the first part, as `dtype` (a float dtype saves torch's slow bool->float cast). For a key
        whose frozen parts this selector holds as windows (window()), `parts` may be the first part alone."""
        if key in self.sources:
            return self._windowed(key, parts[0], k, dtype)
        n = sum(p.numel() for p in parts)
        full = None if self.algorithm == "band" else self.algorithm
        # Several live parts (trainable auxiliary scores): measured slower than a full selection at 10^7
        # weights (benchmarks/topk_scale.py): under weight decay the auxiliary scores collapse into a dense,
        # tied cluster around the threshold, so the band holds millions of values. Full selection there.
        live_aux = len(parts) > 1 and not frozen
        if k <= 0 or k >= n or full is not None or live_aux or any(p.device.type != "cpu" for p in parts):
            return joint_topk_masks(parts, k, full)[0].to(dtype)
        first = Live(parts[0].detach().reshape(-1).numpy())
        if frozen:
            if key not in self.sorted:
                self.sorted[key] = [Sorted(p.detach().reshape(-1).numpy()) for p in parts[1:]]
            views: list[Live | Sorted] = [first, *self.sorted[key]]
        else:
            views = [first]  # one part: several live ones took the full selection above
        last = self.state.get(key)
        # Scores trained by Adam shift steadily (every entry moves by ~lr a step), so the threshold does too:
        # centre the band on the linear extrapolation and size it by the extrapolation's error, not by the step.
        guess, width = (0.0, 0.0) if last is None else (last[0] + last[2], last[1])  # read only when last is set
        v = None if last is None else band_kth(views, k, guess, width)
        self.searches += last is not None
        self.misses += last is not None and v is None
        searched = v is not None
        if v is None:
            # a fresh concatenation (several parts) is ours to partition in place: one copy of the scores, not two
            flat = [p.detach().reshape(-1) for p in parts]
            v = kth_numpy(flat[0] if len(flat) == 1 else torch.cat(flat), k, overwrite=len(flat) > 1)
            w = 0.01 * abs(v) + 1e-12 if last is None else max(4 * abs(v - guess), 4 * width)
        else:
            w = max(4 * abs(v - guess), 0.5 * width, 1e-7 * abs(v) + 1e-30)  # wide is cheap, a miss is not
        self.state[key] = (v, w, 0.0 if last is None else v - last[0])
        return _mask_at(first, views, k, v, searched, dtype, parts[0].shape)

    def window(self, key: str, source: Callable[[], list[torch.Tensor]]) -> bool:
        """From now on hold the frozen parts of `key` only as windows of their sorted values around the
        threshold, plus how many lie above each window: the mask needs nothing else while the threshold stays
        inside. `source()` computes the frozen parts again, the same values in the same order, as fresh tensors
        this selector may overwrite; it is called only when a threshold leaves a window, to rebuild it. Later
        calls for `key` may pass the first part alone. Returns False (and changes nothing) unless `key` went
        through the warm band search with frozen parts."""
        held, last = self.sorted.get(key), self.state.get(key)
        if held is None or last is None or key in self.sources:
            return False
        self.sources[key] = source
        self.sorted[key] = [self._window_of(p.s, last[0]) for p in held]
        return True

    def _window_of(self, s: np.ndarray, v: float) -> Window:
        half = max(self.window_min, int(s.size * self.window_share))
        c = int(np.searchsorted(s, s.dtype.type(v)))
        i0, i1 = max(c - half, 0), min(c + half, s.size)
        return Window(s[i0:i1].copy(), i0, s.size)

    def _windowed(self, key: str, part: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
        """__call__ for a key whose frozen parts are held as windows: exact while the threshold stays inside
        them; when it leaves, the parts are computed again and sorted, the call is answered from all of them,
        and new windows are cut around its threshold."""
        try:
            return self._window_search(key, part, k, dtype)
        except OutOfWindow:
            pass
        self.rebuilds += 1
        full = []
        for t in self.sources[key]():
            a = t.detach().reshape(-1).numpy()
            a.sort()  # in place: the source's tensors are fresh
            full.append(Window(a, 0, a.size))  # all of it: no query can fall outside
        self.sorted[key] = list(full)
        mask = self._window_search(key, part, k, dtype)
        self.sorted[key] = [self._window_of(w.s, self.state[key][0]) for w in full]
        return mask

    def _window_search(self, key: str, part: torch.Tensor, k: int, dtype: torch.dtype) -> torch.Tensor:
        """__call__'s warm search on the first part and the windows of the frozen ones; raises OutOfWindow
        (having changed no state but the counters) when the answer needs values outside a window."""
        windows = [w for w in self.sorted[key] if isinstance(w, Window)]  # all of them: window() made them
        first = Live(part.detach().reshape(-1).numpy())
        views: list[Live | Sorted] = [first, *windows]
        n = first.a.size + sum(w.n for w in windows)
        if k <= 0 or k >= n:  # never reached in practice: window() follows a band search, which needs 0 < k < n
            return torch.full(part.shape, k > 0, dtype=torch.bool).to(dtype)
        last = self.state[key]  # set: window() requires it
        guess, width = last[0] + last[2], last[1]
        # the band, clipped to the inside of every window (a band search over less still answers exactly or
        # declines): a band wider than a window would otherwise miss, and a miss widens the next band
        dt = first.dtype.type
        lo, hi = dt(guess - width), dt(guess + width)
        for win in windows:
            if win.i0 > 0:
                lo = max(lo, dt(np.nextafter(win.s[0], dt(np.inf))))
            if win.n_hi > 0:
                hi = min(hi, dt(np.nextafter(win.s[-1], dt(-np.inf))))
        v = band_kth_in(views, k, lo, hi) if lo <= hi else None
        self.searches += 1
        self.misses += v is None
        searched = v is not None
        if v is None:
            # The k-th largest over the first part and the windows, the entries above the windows counted in:
            # the true k-th largest whenever it lies strictly inside every window (the checks below).
            kk = k - sum(w.n_hi for w in windows)
            vals = np.concatenate([first.a, *(w.s for w in windows)])
            if not 0 < kk <= vals.size:
                raise OutOfWindow
            v = kth_numpy(torch.from_numpy(vals), kk, overwrite=True)
            del vals
            w = max(4 * abs(v - guess), 4 * width)
        else:
            w = max(4 * abs(v - guess), 0.5 * width, 1e-7 * abs(v) + 1e-30)
        self.state[key] = (v, w, v - last[0])
        return _mask_at(first, views, k, v, searched, dtype, part.shape)

    def frozen_values(self, key: str) -> list[torch.Tensor] | None:
        """The frozen parts of `key` as this selector holds them (sorted ascending, shared, not copied), or None
        if it holds none; passing them back instead of the original parts gives the same masks."""
        held = self.sorted.get(key)
        return None if held is None else [torch.from_numpy(p.s) for p in held]


def _mask_at(
    first: Live, views: Sequence[Live | Sorted], k: int, v: float, searched: bool, dtype: torch.dtype, shape: torch.Size
) -> torch.Tensor:
    """The first part's mask (as `dtype`) keeping exactly k entries of all the views at the k-th largest value v,
    ties at v resolved as joint_topk_masks does: the first part's first in concatenated order, lowest index first.
    `searched`: v came from the band search, whose passes give the mask and counts without another pass."""
    x = first.a.dtype.type(v)
    if searched:
        keep = first.at_least(v)
        if sum(p.band_count_at_least(x) for p in views) != k:
            first.drop_ties(x, k - sum(p.band_count_above(x) for p in views))  # in `keep`
    else:
        keep = first.a >= x  # exact: v is one of the values
        if int(np.count_nonzero(keep)) + sum(p.count_at_least(x) for p in views[1:]) != k:
            tied = np.flatnonzero(first.a == x)  # without concatenating again
            keep[tied[max(k - sum(p.count_greater(x) for p in views), 0) :]] = False
    if dtype != torch.bool:
        keep = keep.astype(torch.empty((), dtype=dtype).numpy().dtype)  # ~5x faster than torch's cast
    return torch.from_numpy(keep).view(shape)
