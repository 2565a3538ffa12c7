"""Per layer, sparse against dense: both forms timed interleaved at a representative batch on the device they run
on, and the decision kept as a typed record (LayerRecord): the layer stays dense where the sparse kernel loses."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ticketcli.contract.schema import JsonObject

SPARSE, DENSE = "sparse", "dense"
REPEATS = 7  # interleaved timing rounds per layer; each round times each form over several calls
MARGIN = 0.01  # a change the whole network measures within this fraction of its time is noise, not kept
MIN_ROUND_S = 0.004  # a round is at least this long (more calls for a fast layer), so the clock's grain is noise


@dataclass(frozen=True)
class LayerRecord:
    """One masked layer of the sparse form: where it lies, its weight's shape and density, the form it computes in
    and why (the two forms' median times per call at `batch`, when measured)."""

    name: str  # the module's name in the network ("layers.0", "features.3")
    kind: str  # "linear" or "conv2d"
    shape: tuple[int, ...]  # the weight's
    nnz: int  # entries the mask keeps
    density: float
    form: str  # SPARSE or DENSE
    reason: str  # "sparse 2.3x faster", "dense: sparse 0.8x", ...
    sparse_ms: float | None = None  # median time per call at `batch`, None when not measured
    dense_ms: float | None = None
    batch: int | None = None
    device: str | None = None
    layout: str | None = None  # how the file stores the weight: "csr", "bsr", "2:4"; None: CSR if sparse, else dense
    kernel: str | None = None  # what it computes with here: "csr", "bsr", "2:4"; None: CSR if sparse, else dense

    @property
    def stored(self) -> str | None:
        """The layout the file stores the weight in ("csr", "bsr", "2:4"), None where it is dense."""
        return self.layout if self.layout is not None else ("csr" if self.form == SPARSE else None)

    @property
    def computes(self) -> str | None:
        """The sparse kernel the layer computes with ("csr", "bsr", "2:4"), None where it is dense."""
        if self.form != SPARSE:
            return None
        return self.kernel if self.kernel is not None else "csr"

    @property
    def speedup(self) -> float | None:
        """dense time over sparse time (> 1: sparse is faster), when measured."""
        if self.sparse_ms is None or self.dense_ms is None or self.sparse_ms <= 0:
            return None
        return self.dense_ms / self.sparse_ms

    def to_dict(self) -> JsonObject:
        return {
            "name": self.name,
            "kind": self.kind,
            "shape": list(self.shape),
            "nnz": self.nnz,
            "density": self.density,
            "form": self.form,
            "reason": self.reason,
            "sparse_ms": self.sparse_ms,
            "dense_ms": self.dense_ms,
            "batch": self.batch,
            "device": self.device,
            "layout": self.stored,
            "kernel": self.computes,
        }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def clock(device: torch.device) -> Callable[[], float]:
    """The clock a timing reads: the calling thread's CPU time where torch computes on the CPU in that one thread
    (what other processes' load on a busy machine does not inflate), else the wall clock."""
    if device.type == "cpu" and torch.get_num_threads() == 1:
        return time.thread_time
    return time.perf_counter


def _round(f: Callable[[], object], calls: int, device: torch.device) -> float:
    """Seconds per call over `calls` calls."""
    now = clock(device)
    sync(device)
    start = now()
    for _ in range(calls):
        f()
    sync(device)
    return (now() - start) / calls


@torch.no_grad()
def compare(sparse: nn.Module, dense: nn.Module, x: torch.Tensor, repeats: int = REPEATS) -> tuple[float, float]:
    """Median seconds per call of (sparse, dense) on x: one warm-up call each, then `repeats` rounds, alternating
    which form goes first, so that a busy machine slows both alike."""
    device = x.device

    def s() -> object:
        return sparse(x)

    def d() -> object:
        return dense(x)

    s(), d()
    once = max(_round(s, 1, device), _round(d, 1, device), 1e-7)
    calls = max(1, min(1000, int(MIN_ROUND_S / once)))
    ts: list[float] = []
    td: list[float] = []
    for i in range(repeats):
        pair = (s, d) if i % 2 == 0 else (d, s)
        first, second = (_round(f, calls, device) for f in pair)
        (ts, td)[i % 2].append(first)
        (td, ts)[i % 2].append(second)
    return statistics.median(ts), statistics.median(td)


@torch.no_grad()
def median_time(f: nn.Module, x: torch.Tensor, repeats: int = REPEATS) -> float:
    """Median seconds per call of f(x) over `repeats` rounds, after one warm-up call: one form timed alone, where
    the two cannot both be in memory (seeded.py times a big layer's dense form, lets it go, then times its sparse
    form, so that the sparse kernel's workspace never comes on top of the dense weight)."""
    device = x.device

    def call() -> object:
        return f(x)

    call()
    calls = max(1, min(1000, int(MIN_ROUND_S / max(_round(call, 1, device), 1e-7))))
    return statistics.median(_round(call, calls, device) for _ in range(repeats))


def decide(
    name: str, kind: str, shape: tuple[int, ...], nnz: int, times: tuple[float, float] | None, batch: int, device: str
) -> LayerRecord:
    """The layer's record: sparse where it measured faster than dense (or was not measured), dense otherwise."""
    total = 1
    for d in shape:
        total *= d
    density = nnz / total if total else 0.0
    if times is None:
        return LayerRecord(name, kind, shape, nnz, density, SPARSE, "sparse: not measured")
    ts, td = times
    ratio = td / ts if ts > 0 else float("inf")
    form = SPARSE if ratio > 1.0 else DENSE
    reason = f"sparse {ratio:.2g}x faster" if form == SPARSE else f"dense: sparse {ratio:.2g}x"
    return LayerRecord(name, kind, shape, nnz, density, form, reason, ts * 1e3, td * 1e3, batch, device)


@torch.no_grad()
def seconds(run: Callable[[], object], device: torch.device) -> float:
    """Seconds of one call of `run` (warm: the caller has run it before)."""
    return _round(run, 1, device)


@torch.no_grad()
def interleaved(
    run: Callable[[], object], setups: Sequence[Callable[[], None]], device: torch.device, repeats: int = REPEATS
) -> list[float]:
    """Seconds per call of `run` under each setup (a setup puts the network in one state; it runs outside the timed
    calls), the least over `repeats` rounds (another process's load only ever adds time; a change of a few percent
    stands out of the least times, not of the medians, on a busy machine): one warm-up call each, then the rounds,
    each timing every setup in a rotated order."""
    once = 0.0
    for setup in setups:
        setup()
        run()
        once = max(once, _round(run, 1, device))
    calls = max(1, min(1000, int(MIN_ROUND_S / max(once, 1e-7))))
    times: list[list[float]] = [[] for _ in setups]
    for i in range(repeats):
        for j in range(len(setups)):
            k = (i + j) % len(setups)
            setups[k]()
            times[k].append(_round(run, calls, device))
    return [min(t) for t in times]


@dataclass(frozen=True)
class Choice:
    """A layer's decision in the whole network: the option kept (0: dense) and the network's least seconds per
    call with each option, the others as decided."""

    option: int
    times: tuple[float, ...]


def choose_in_network(
    run: Callable[[], object],
    options: Mapping[str, Sequence[Callable[[], None]]],
    start: Mapping[str, int],
    device: torch.device,
    passes: int = 2,
) -> dict[str, Choice]:
    """Each layer's option (option 0 of each is dense) that makes the whole network `run` fastest, from `start`,
    chosen one layer at a time with the others as decided so far, over up to `passes` passes (a layer's best option
    can change once another one is decided: a product left transposed pays only where the next layer reads it so).
    A sparse option is kept only where the network measured more than MARGIN faster with it than dense."""
    chosen = dict(start)
    for name, setups in options.items():
        setups[chosen[name]]()
    out: dict[str, Choice] = {}
    for _ in range(passes):
        changed = False
        for name, setups in options.items():
            times = interleaved(run, setups, device)
            best = min(range(len(setups)), key=lambda i: times[i] * (1 + MARGIN if i else 1))
            changed = changed or best != chosen[name]
            chosen[name] = best
            setups[best]()
            out[name] = Choice(best, tuple(times))
        if not changed:
            break
    return out
