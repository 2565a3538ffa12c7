"""Torch CPU threads: --threads N (and the API's threads=) for one run, and the per-worker count of a pool. Without
N a run keeps torch's own choice (usually one thread per core); a pool of workers never asks for more threads than
this process may use cores. torch is imported inside the functions, so that the command line can check the value
before it loads torch."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ticketcli.errors import UsageError

POOL_THREADS = 1  # a pool worker's torch threads unless --threads is given: its result does not depend on --workers


def cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one: a container's or
    taskset's limit, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


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
def using(threads: int | None) -> Iterator[int]:
    """Run the body with `threads` torch threads (None: leave torch's setting alone), then restore the previous
    count; yields the number of threads the body runs with."""
    import torch  # here, not at import time: the command line validates --threads before it loads torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if threads is not None:
            torch.set_num_threads(previous)
