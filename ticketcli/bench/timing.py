"""Timing the forms interleaved, and the verdict. Every repeat runs each form once in turn (the order rotating from
repeat to repeat), so a machine that speeds up or slows down during the run (another process, the CPU's clock)
weighs on every form alike; a sample is one forward pass, or a few back to back where one is too short for the
clock (at least MIN_SAMPLE_S), divided by their number. The verdict (`verdict`) is pure arithmetic on the
timings, so it is tested with made-up ones."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

from ticketcli.bench.result import DENSE, Pick, Timing

Forward = Callable[[], object]  # one forward pass of a form on a fixed batch, synchronised (its result ready)
MIN_SAMPLE_S = 2e-3  # a sample's length at least: shorter calls are repeated inside the sample
WARMUP_CALLS = 3


def calls_per_sample(run: Forward, clock: Callable[[], float] = time.perf_counter) -> int:
    """Warm a form up (WARMUP_CALLS calls) and return how many calls make one sample of at least MIN_SAMPLE_S."""
    for _ in range(WARMUP_CALLS):
        run()
    t0 = clock()
    run()
    once = max(clock() - t0, 1e-7)
    return max(1, min(10_000, math.ceil(MIN_SAMPLE_S / once)))


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of the samples (a single sample is all three)."""
    if len(samples) < 2:
        return samples[0], samples[0], samples[0]
    q1, q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q2, q3


def interleaved(
    runs: dict[str, Forward], batch: int, repeats: int, clock: Callable[[], float] = time.perf_counter
) -> dict[str, Timing]:
    """Each form's latency at `batch`: `repeats` samples per form, taken in turn (rotating the order), as Timings
    with the speed-up over dense where dense is among them."""
    names = list(runs)
    inner = {n: calls_per_sample(runs[n], clock) for n in names}
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            run, k = runs[n], inner[n]
            t0 = clock()
            for _ in range(k):
                run()
            samples[n].append((clock() - t0) / k)
    timings = {}
    for n in names:
        q1, med, q3 = quartiles(samples[n])
        timings[n] = Timing(batch, med, q1, q3, repeats)
    if DENSE in timings:
        base = timings[DENSE].median_s
        timings = {
            n: Timing(t.batch, t.median_s, t.q1_s, t.q3_s, t.repeats, base / t.median_s) for n, t in timings.items()
        }
    return timings


def pick(timings: dict[str, Timing]) -> Pick:
    """The verdict at one batch size: the fastest form by median latency; it is recommended over dense only when it
    is faster beyond the noise, i.e. its third quartile lies below dense's first quartile."""
    fastest = min(timings, key=lambda n: timings[n].median_s)
    best = timings[fastest]
    dense = timings.get(DENSE)
    if dense is None:
        return Pick(best.batch, fastest, None, fastest, within_noise=False)
    speedup = dense.median_s / best.median_s
    if fastest == DENSE:
        return Pick(best.batch, DENSE, 1.0, DENSE, within_noise=False)
    noise = best.q3_s >= dense.q1_s
    return Pick(best.batch, fastest, speedup, DENSE if noise else fastest, within_noise=noise)


def verdict(per_batch: dict[int, dict[str, Timing]]) -> tuple[Pick, ...]:
    """One Pick per batch size, in the order measured."""
    return tuple(pick(t) for t in per_batch.values() if t)
