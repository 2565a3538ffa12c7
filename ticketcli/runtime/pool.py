"""Run independent tasks in spawned worker processes (sweep-k's and drift --tradeoff's --workers), yielding each
result as it finishes; one worker runs them in this process, in order. Each worker uses `threads` torch threads, so
a task's result does not depend on how many run at once."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from ticketcli.errors import RunFailed

Task = TypeVar("Task")
Result = TypeVar("Result")


def run_pool(
    run: Callable[[Task, int], Result],
    tasks: Sequence[Task],
    *,
    workers: int,
    threads: int,
    describe: Callable[[Task], str],
) -> Iterator[tuple[Task, Result]]:
    """(task, run(task, threads)) for every task, in finishing order; a dead worker is a RunFailed naming
    describe(task); leaving early (an error, Ctrl-C) cancels what has not started."""
    if workers == 1:
        for t in tasks:
            yield t, run(t, threads)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run, t, threads): t for t in tasks}
        try:
            for f in as_completed(futures):
                try:
                    result = f.result()
                except BrokenProcessPool:
                    raise RunFailed(f"a worker process died while running {describe(futures[f])}") from None
                yield futures[f], result
        except BaseException:
            for f in futures:
                f.cancel()
            raise
