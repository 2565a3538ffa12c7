"""Run independent tasks in spawned worker processes (sweep-k's and a trade-off sweep's --workers), yielding each
result as it finishes; one worker runs them in this process, in order. Each worker uses `threads` torch threads, so
a task's result does not depend on how many run at once.

Signals are the parent's alone: the workers are started with SIGINT and SIGTERM blocked (a Ctrl-C reaches the
whole foreground process group), so no worker prints a KeyboardInterrupt traceback or dies on its own; the parent
decides how the run ends, and the first signal it catches ends the workers at once. They write nothing (each
returns its result to the parent, which writes the files), so ending them leaves nothing half-written."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import TypeVar

from ticketcli.errors import RunFailed
from ticketcli.runtime.interrupts import SIGNALS, on_stop

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
    describe(task); leaving early (an error, Ctrl-C) ends the workers: what has not started never does. Tasks are
    drawn from `tasks` only as a worker frees up, so a lazy iterable (sweep-k claiming each run as it starts)
    decides late."""
    if workers == 1:
        for t in tasks:
            yield t, run(t, threads)
        return
    pending = iter(tasks)
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures: dict[Future[Result], Task] = {}

        def fill() -> None:
            """Submit tasks until every worker has one (or none is left)."""
            with _signals_blocked():  # a worker is spawned by submit and keeps the mask for good
                while len(futures) < workers and (t := next(pending, None)) is not None:
                    futures[pool.submit(run, t, threads)] = t

        with on_stop(lambda: _end_workers(pool)):
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
                # their results would not be read: leaving does not wait for them. Killing them breaks the pool, so
                # that nothing more starts; the futures are not cancelled as well, since the executor's own thread
                # then fails them all and must find none already cancelled (it raises on those, with a traceback)
                _end_workers(pool)
                raise


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread meanwhile: a child started now inherits the mask through exec, and
    a blocked signal is never delivered to it. This process loses nothing: the signal is delivered to another of
    its threads or when the mask is restored, and its handler runs as usual."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes (they block SIGTERM; they hold no output of ours). The executor has no public
    way to do so before Python 3.14's kill_workers, which also shuts it down: not a thing to do in a signal
    handler, so its process table is read instead; the executor sees its workers die and ends its own threads."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.kill()
        except (OSError, ValueError):  # already reaped, or closed
            pass
