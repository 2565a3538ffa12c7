"""Run independent tasks in spawned worker processes (sweep-k's and drift --tradeoff's --workers), yielding each
result as it finishes; one worker runs them in this process, in order. Each worker uses `threads` torch threads, so
a task's result does not depend on how many run at once."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from ticketcli.errors import RunFailed

Task = TypeVar("Task")
Result = TypeVar("Result")


def run_pool(
    run: Callable[[Task, int], Result],
    tasks: Iterable[Task],
    *,
    workers: int,
    threads: int,
    describe: Callable[[Task], str],
) -> Iterator[tuple[Task, Result]]:
    """(task, run(task, threads)) for every task, in finishing order; a dead worker is a RunFailed naming
    describe(task); leaving early (an error, Ctrl-C) cancels what has not started. Tasks are drawn from `tasks`
    only as a worker frees up, so a lazy iterable (sweep-k claiming each run as it starts) decides late."""
    if workers == 1:
        for t in tasks:
            yield t, run(t, threads)
        return
    pending = iter(tasks)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures: dict[Future[Result], Task] = {}

        def fill() -> None:
            if len(futures) >= workers:
                return
            for t in pending:
                futures[pool.submit(run, t, threads)] = t
                if len(futures) >= workers:
                    return

        try:
            fill()
            while futures:
                done, _ = wait(futures, return_when=FIRST_COMPLETED)
                finished = []
                for f in done:
                    t = futures.pop(f)
                    try:
                        finished.append((t, f.result()))
                    except BrokenProcessPool:
                        raise RunFailed(f"a worker process died while running {describe(t)}") from None
                fill()  # before handing results over: the workers keep busy while the caller stores them
                yield from finished
        except BaseException:
            for f in futures:
                f.cancel()
            raise
