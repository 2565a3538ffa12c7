"""Torch CPU threads: --threads N (and the API's threads=) for one run, and the per-worker count of a pool. Without
N (--threads auto, the default) a run takes the cores that are free when it starts (this process's cores less the
other tasks the kernel has running, sampled a few times over a few milliseconds), and fewer for a model whose step
is too little work to share (a thread per GRAIN multiply-adds); a pool of workers never asks for more threads than
this process may use cores. torch is imported inside the functions, so that the command line can check the value
before it loads torch."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ticketcli.errors import UsageError

POOL_THREADS = 1  # a pool worker's torch threads unless --threads is given: its result does not depend on --workers
GRAIN = 1 << 22  # multiply-adds of one step per thread below which one more thread costs more than it saves
SAMPLES, SAMPLE_GAP_S = 5, 0.002  # /proc/stat's running tasks: the fewest of 5 reads 2 ms apart (a busy task is
# running at every read; a short one at few)


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one: a container's or
    taskset's limit, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass(frozen=True)
class AutoThreads:
    """How --threads auto chose: `threads` of this process's `cores`, `others` tasks running elsewhere at the start
    (in cores' worth: the machine's running tasks scaled to this process's share of its CPUs), the model's
    multiply-adds per step (`work`, None: unknown, e.g. a user's module)."""

    threads: int
    cores: int
    others: float
    work: int | None

    def to_dict(self) -> dict[str, int | float | None]:
        return {"cores": self.cores, "others_running": round(self.others, 2), "work_per_step": self.work}


def others_running() -> float:
    """Tasks running besides this one, in this process's cores' worth (0.0 where it cannot be read): the fewest
    runnable tasks of a few reads of /proc/stat (procs_running counts this one), else the 1-minute load average,
    scaled from the machine's CPUs to the cores this process may use."""
    counts: list[int] = []
    for i in range(SAMPLES):
        try:
            with open("/proc/stat", "rb") as f:
                line = next((ln for ln in f if ln.startswith(b"procs_running ")), None)
        except OSError:
            break
        if line is None:
            break
        counts.append(int(line.split()[1]) - 1)
        if i + 1 < SAMPLES:
            time.sleep(SAMPLE_GAP_S)
    if counts:
        busy = float(max(0, min(counts)))
    else:
        try:
            busy = os.getloadavg()[0]
        except (OSError, AttributeError):
            return 0.0
    return busy * cores() / max(os.cpu_count() or 1, cores())


def choose(work: int | None = None) -> AutoThreads:
    """--threads auto: the free cores at the start (at least one), no more than the step's work can share."""
    n = cores()
    others = others_running()
    free = max(1, n - round(others))
    by_work = n if work is None or work <= 0 else max(1, work // GRAIN)
    return AutoThreads(min(free, by_work), n, others, work if work is not None and work > 0 else None)


def per_worker(workers: int, threads: int | None, *, flag: str = "--workers") -> int:
    """The torch threads of each of `workers` pool workers: `threads` when given, else POOL_THREADS. Either way
    workers x threads must fit in the cores this process may use (more only makes every worker wait for a core)."""
    each = POOL_THREADS if threads is None else threads
    if workers * each > cores():
        raise UsageError(
            f"{flag} {workers} x --threads {each} exceeds the {cores()} CPU cores here",
            hint=f"lower {flag}" + (" or --threads" if threads is not None and threads > 1 else ""),
        )
    return each


@contextmanager
def using(threads: int | None, auto: AutoThreads | None = None) -> Iterator[int]:
    """Run the body with `threads` torch threads (None: auto's choice, else choose()'s without a model's work),
    then restore the previous count; yields the number of threads the body runs with."""
    import torch  # here, not at import time: the command line validates --threads before it loads torch

    count = threads if threads is not None else (auto or choose()).threads
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
