"""What every tracker does, and the guard around them: a `Tracker` opens a `RunLog` (one run: its name, parameters and
tags), which takes scalars per step, final metrics with the hyperparameters, artifacts and child runs (a sweep's grid
points). `Tracking` fans one run out to every `--log-to` destination and turns any error of a tracker into one
warning line, after which that tracker is dropped and the run goes on.

Torch-free: the trackers import their libraries (torch.utils.tensorboard, mlflow) only when they open a run."""

from __future__ import annotations

import importlib.util
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from ticketcli.errors import UsageError
from ticketcli.settings.track import EXTRA, Destination, destinations
from ticketcli.track.info import RunInfo, Scalar, StoreError
from ticketcli.track.stores import check_destination

Warn = Callable[[str], None]


class RunLog(Protocol):
    """One run in one tracker: `run_id` names it in its store (an MLflow run id, a TensorBoard run folder's name),
    `resumed` says whether it is a run reopened by that id."""

    run_id: str
    resumed: bool

    def scalars(self, step: int, values: Mapping[str, float]) -> None: ...

    def params(self, params: Mapping[str, Scalar]) -> None: ...

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        """The final metrics at `step`, and the hyperparameters they belong to (TensorBoard's hparams)."""

    def tags(self, tags: Mapping[str, str]) -> None: ...

    def artifact(self, path: Path) -> None: ...

    def child(self, info: RunInfo) -> RunLog: ...

    def close(self, status: str) -> None:
        """status: FINISHED, FAILED or KILLED."""


class Tracker(Protocol):
    def open(self, info: RunInfo, resume: str | None = None) -> RunLog:
        """The run `info`, or the run `resume` names reopened if the store still holds it."""


MODULES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # the module each tracker needs (the [track] extra)


def tracker(d: Destination) -> Tracker:
    if d.kind == "tensorboard":
        from ticketcli.track.tb import TensorBoard

        return TensorBoard(Path(d.target))
    from ticketcli.track.mlflow_process import MlflowProcess  # mlflow itself: in a writer process, never here

    return MlflowProcess(d.target)


def first_line(e: BaseException) -> str:
    """An error as one line, "Type: message" (a StoreError's line as it came)."""
    if isinstance(e, StoreError):
        return e.line[:400]
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


class Writer:
    """The one thread every tracker call of a command runs on, in order: the run never waits for a tracker (an
    import, a store's set-up, a write), only, at its end, for the last writes to finish."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._work, name="ticket-trackers", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while (task := self.queue.get()) is not None:
            task()  # each task is guarded (Guarded): nothing raises here

    def submit(self, task: Callable[[], None]) -> None:
        self.queue.put(task)

    def stop(self, timeout: float) -> bool:
        """Run what was submitted, then end; False if that took longer than `timeout` seconds (the thread is a
        daemon: it does not keep the process alive)."""
        self.queue.put(None)
        return self.join(timeout)

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


class Guarded:
    """A run in one tracker whose every call is guarded (and made on the Writer's thread): the first error is one
    warning line, and the tracker is left alone from then on (its children too)."""

    def __init__(self, what: str, warn: Warn, dead: list[bool] | None = None):
        self.what, self.warn = what, warn
        self.log: RunLog | None = None  # set by open() or open_child(), on the writer's thread
        self.dead = dead if dead is not None else [False]  # shared with the children

    def fail(self, e: Exception) -> None:
        if self.dead[0]:  # stopped at the command's end (tracked): said once there
            return
        self.dead[0] = True
        self.warn(f"--log-to {self.what}: {first_line(e)}; the run goes on without it")

    def open(self, make: Callable[[], RunLog], opened: Callable[[RunLog], None] | None = None) -> None:
        if self.dead[0]:
            return
        try:
            self.log = make()
        except Exception as e:  # a tracker never breaks a run
            self.fail(e)
            return
        if opened is not None:
            try:
                opened(self.log)
            except Exception as e:  # recording the run's id failed: the run is logged all the same
                self.warn(f"--log-to {self.what}: {first_line(e)}; its run is logged, but a resume starts another")

    def open_child(self, parent: Guarded, info: RunInfo) -> None:
        log = parent.log
        if log is not None:
            self.open(lambda: log.child(info))

    def call(self, method: str, *args: Any) -> None:
        if self.dead[0] or self.log is None:
            return
        try:
            getattr(self.log, method)(*args)
        except Exception as e:  # a tracker never breaks a run
            self.fail(e)


class Tracking:
    """One run (and its children) in every --log-to destination; each call is queued for every tracker still
    alive, on the Writer's thread, and returns at once."""

    def __init__(self, writer: Writer, runs: Sequence[Guarded]):
        self.writer, self.runs = writer, list(runs)
        self.ready = threading.Event()  # set once every tracker has opened its run or failed to (open_tracking)

    def _each(self, method: str, *args: Any) -> None:
        for r in self.runs:
            self.writer.submit(partial(r.call, method, *args))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        clean = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if clean:
            self._each("scalars", step, clean)

    def params(self, params: Mapping[str, Scalar]) -> None:
        self._each("params", dict(params))

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None and not isinstance(v, bool)}
        self._each("finish", step, clean, dict(hparams))

    def tags(self, tags: Mapping[str, str]) -> None:
        self._each("tags", dict(tags))

    def artifact(self, path: str | Path | None) -> None:
        if path is not None and Path(path).is_file():
            self._each("artifact", Path(path))

    def child(self, info: RunInfo) -> Tracking:
        children = [Guarded(r.what, r.warn, r.dead) for r in self.runs]
        for parent, c in zip(self.runs, children):
            self.writer.submit(partial(c.open_child, parent, info))
        return Tracking(self.writer, children)

    def close(self, status: str) -> None:
        self._each("close", status)


WAIT_S = 300.0  # at the end of a run: how long the trackers may take to finish writing
WAIT_INTERRUPTED_S = 10.0


def _open(d: Destination, info: RunInfo, resume: str | None) -> RunLog:
    return tracker(d).open(info, resume)


Opened = Callable[[str, str], None]  # (a --log-to destination, the id of the run it opened)


def _opened(d: Destination, resume: str | None, on_open: Opened | None, warn: Warn, log: RunLog) -> None:
    if resume is not None and not log.resumed:
        warn(f"--log-to {d.text}: its run {resume} is no longer in the store; logging to a new run")
    if on_open is not None:
        on_open(d.text, log.run_id)


def open_tracking(
    dests: Sequence[Destination],
    info: RunInfo,
    warn: Warn,
    resume: Mapping[str, str] | None = None,
    on_open: Opened | None = None,
) -> Tracking:
    """The run `info`, opened in every destination on a new Writer's thread; one that cannot open is a warning.
    resume: destination -> the id of a run to reopen there instead (a resumed run); on_open(destination,
    run id) is told each run opened, as soon as it is."""
    writer = Writer()
    runs = [Guarded(d.text, warn) for d in dests]
    for d, r in zip(dests, runs):
        again = (resume or {}).get(d.text)
        writer.submit(partial(r.open, partial(_open, d, info, again), partial(_opened, d, again, on_open, warn)))
    tracking = Tracking(writer, runs)
    writer.submit(tracking.ready.set)
    return tracking


def check(log_to: Any) -> tuple[Destination, ...]:
    """A --log-to value (None: not given) as its destinations, each tracker's library installed and each destination
    absent or a store of its tracker (stores.py): before any work (else one line: a missing library names the
    extra)."""
    dests = destinations(log_to)
    for d in dests:
        if importlib.util.find_spec(MODULES[d.kind]) is None:
            raise UsageError(f"--log-to {d.kind} needs the {MODULES[d.kind]} package", hint=EXTRA)
        check_destination(d)
    return dests


@contextmanager
def tracked(
    dests: Sequence[Destination],
    info: Callable[[], RunInfo],
    warn: Warn,
    resume: Mapping[str, str] | None = None,
    on_open: Opened | None = None,
) -> Iterator[Tracking | None]:
    """The run in every destination (none: nothing is opened, None is yielded), closed as FINISHED, FAILED (an
    error) or KILLED (an interrupt) when the block ends, after which the trackers' last writes are awaited. A
    tracker's failure is a warning (`warn`). resume, on_open: as open_tracking's."""
    if not dests:
        yield None
        return
    try:
        run = info()
    except Exception as e:
        warn(f"--log-to: {first_line(e)}; the run goes on without it")
        yield None
        return
    tracking = open_tracking(dests, run, warn, resume, on_open)
    try:
        yield tracking
    except BaseException as e:
        tracking.close("FAILED" if isinstance(e, Exception) else "KILLED")
        if not isinstance(e, Exception):
            # an interrupt early in a run finds a store still opening (importing mlflow, creating its tables takes
            # seconds): what was logged is queued behind it, so the short wait starts once every tracker is open
            _wait(lambda t: tracking.ready.wait(t), WAIT_S, "to open their stores", warn)
        _stop(tracking, WAIT_INTERRUPTED_S if not isinstance(e, Exception) else WAIT_S, warn)
        raise
    tracking.close("FINISHED")
    _stop(tracking, WAIT_S, warn)


ANNOUNCE_S = 30.0  # a wait for the trackers longer than this is announced on stderr, with its bound


def _wait(wait: Callable[[float], bool], timeout: float, what: str, warn: Warn) -> bool:
    """wait(seconds) until it returns True or `timeout` seconds have passed; announced once it outlasts ANNOUNCE_S."""
    if wait(min(ANNOUNCE_S, timeout)):
        return True
    warn(f"--log-to: waiting up to {timeout:g} s for the trackers {what}")
    return wait(max(timeout - ANNOUNCE_S, 0.0))


def _stop(tracking: Tracking, timeout: float, warn: Warn) -> None:
    """The trackers' last writes, awaited at most `timeout` seconds; then no writer process of theirs is left."""
    writer = tracking.writer
    writer.queue.put(None)
    done = _wait(writer.join, timeout, "to finish writing", warn)
    if not done:
        for r in tracking.runs:
            r.dead[0] = True  # what the writer thread still reports is the line below, not a warning per tracker
        warn(f"--log-to: the trackers did not finish writing within {timeout:g} s; stopped them")
    if any(r.what.startswith("mlflow:") for r in tracking.runs):
        from ticketcli.track.mlflow_process import stop_writers

        stop_writers(writer.thread)


def tee(*callbacks: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None] | None:
    """One progress callback calling each of `callbacks` that is not None (None if all are)."""
    live = [c for c in callbacks if c is not None]
    if not live:
        return None
    if len(live) == 1:
        return live[0]

    def both(stats: dict[str, Any]) -> None:
        for c in live:
            c(stats)

    return both


def flat(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Scalar]:
    """A nested record as flat parameters: {"optim": {"lr": 0.1}} -> {"optim.lr": 0.1}; lists as text."""
    out: dict[str, Scalar] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat(v, key + "."))
        elif isinstance(v, (list, tuple)):
            out[key] = ",".join(str(x) for x in v)
        elif v is None:
            out[key] = "none"
        elif isinstance(v, (int, float, str, bool)):
            out[key] = v
        else:
            out[key] = str(v)
    return out
