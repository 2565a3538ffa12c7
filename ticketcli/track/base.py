"""What every tracker does, and the guard around them: a `Tracker` opens a `RunLog` (one run: its name, parameters and
tags), which takes scalars per step, final metrics with the hyperparameters, artifacts and child runs (a sweep's grid
points). `Tracking` fans one run out to every `--log-to` destination and turns any error of a tracker into one
warning line, after which that tracker is dropped and the run goes on.

Torch-free: the trackers import their libraries (torch.utils.tensorboard, mlflow) only when they open a run."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ticketcli.errors import UsageError
from ticketcli.settings.track import EXTRA, Destination, destinations
from ticketcli.track.info import RunInfo, Scalar

Warn = Callable[[str], None]


class RunLog(Protocol):
    """One run in one tracker."""

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
    def open(self, info: RunInfo) -> RunLog: ...


MODULES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # the module each tracker needs (the [track] extra)


def require_extra(dests: Sequence[Destination]) -> None:
    """Refuse a tracker whose library is not installed, before any work (one line naming the extra)."""
    for d in dests:
        if importlib.util.find_spec(MODULES[d.kind]) is None:
            raise UsageError(f"--log-to {d.kind} needs the {MODULES[d.kind]} package", hint=EXTRA)


def tracker(d: Destination) -> Tracker:
    if d.kind == "tensorboard":
        from ticketcli.track.tb import TensorBoard

        return TensorBoard(Path(d.target))
    from ticketcli.track.mlflow_store import Mlflow

    return Mlflow(d.target)


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


class Guarded:
    """A run in one tracker whose every call is guarded: the first error is one warning line, and the tracker is
    left alone from then on (its children too)."""

    def __init__(self, what: str, log: RunLog | None, warn: Warn, dead: list[bool] | None = None):
        self.what, self.log, self.warn = what, log, warn
        self.dead = dead if dead is not None else [log is None]  # shared with the children

    def call(self, method: str, *args: Any) -> Any:
        if self.dead[0] or self.log is None:
            return None
        try:
            return getattr(self.log, method)(*args)
        except Exception as e:  # a tracker never breaks a run
            self.dead[0] = True
            self.warn(f"--log-to {self.what}: {first_line(e)}; the run goes on without it")
            return None

    def child(self, info: RunInfo) -> Guarded:
        return Guarded(self.what, self.call("child", info), self.warn, self.dead)


class Tracking:
    """One run (and its children) in every --log-to destination; each call goes to every tracker still alive."""

    def __init__(self, runs: Sequence[Guarded]):
        self.runs = list(runs)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        clean = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if clean:
            for r in self.runs:
                r.call("scalars", step, clean)

    def params(self, params: Mapping[str, Scalar]) -> None:
        for r in self.runs:
            r.call("params", params)

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        clean = {k: float(v) for k, v in metrics.items() if v is not None and not isinstance(v, bool)}
        for r in self.runs:
            r.call("finish", step, clean, hparams)

    def tags(self, tags: Mapping[str, str]) -> None:
        for r in self.runs:
            r.call("tags", tags)

    def artifact(self, path: str | Path | None) -> None:
        if path is not None and Path(path).is_file():
            for r in self.runs:
                r.call("artifact", Path(path))

    def child(self, info: RunInfo) -> Tracking:
        return Tracking([r.child(info) for r in self.runs])

    def close(self, status: str) -> None:
        for r in self.runs:
            r.call("close", status)


def open_tracking(dests: Sequence[Destination], info: RunInfo, warn: Warn) -> Tracking:
    """The run `info` opened in every destination; one that cannot open is a warning."""
    runs = []
    for d in dests:
        opened = Guarded(d.text, None, warn, [False])
        try:
            opened.log = tracker(d).open(info)
        except Exception as e:
            opened.dead[0] = True
            warn(f"--log-to {d.text}: {first_line(e)}; the run goes on without it")
        runs.append(opened)
    return Tracking(runs)


def check(log_to: Any) -> tuple[Destination, ...]:
    """A --log-to value (None: not given) as its destinations, each tracker's library installed: before any work."""
    dests = destinations(log_to)
    require_extra(dests)
    return dests


@contextmanager
def tracked(dests: Sequence[Destination], info: Callable[[], RunInfo], warn: Warn) -> Iterator[Tracking | None]:
    """The run in every destination (none: nothing is opened, None is yielded), closed as FINISHED, FAILED (an
    error) or KILLED (an interrupt) when the block ends. A tracker's failure is a warning (`warn`)."""
    if not dests:
        yield None
        return
    try:
        run = info()
    except Exception as e:
        warn(f"--log-to: {first_line(e)}; the run goes on without it")
        yield None
        return
    tracking = open_tracking(dests, run, warn)
    try:
        yield tracking
    except BaseException as e:
        tracking.close("FAILED" if isinstance(e, Exception) else "KILLED")
        raise
    tracking.close("FINISHED")


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
