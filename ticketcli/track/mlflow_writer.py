"""The MLflow writer process (started by mlflow_process.py): reads one JSON message a line from stdin, makes each
call on the store through mlflow_store.py (run 0 the root run, others its child runs), and replies on stdout with
{"ready": true, "run_id": ID, "resumed": BOOL} once the store is open (and the run reopened, if asked), {"done":
true} once its input has ended and everything is written, or {"error": LINE} once, after which it exits with 1.

It ignores SIGINT (the training process decides when a run stops) and, at the end of its input (the last message,
or the training process gone), writes what it holds and closes every run still open as KILLED, so that no metric it
was sent is lost."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ticketcli.track.base import first_line
from ticketcli.track.info import RunInfo
from ticketcli.track.mlflow_store import Mlflow, MlflowRun

CALLS = frozenset({"scalars", "params", "finish", "tags", "artifact", "close"})


def reply(message: dict[str, Any]) -> None:
    try:
        os.write(1, (json.dumps(message) + "\n").encode())
    except BrokenPipeError:  # the training process is gone: nobody to tell, the writes go on
        pass


def info_of(doc: Any) -> RunInfo:
    if not isinstance(doc, dict):
        raise ValueError("a run's info must be an object")
    return RunInfo(**doc)


def resume_of(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError("a run id to resume must be text")
    return value


class Writer:
    """The runs of one command, by the numbers the training process gave them."""

    def __init__(self) -> None:
        self.runs: dict[int, MlflowRun] = {}
        self.open: set[int] = set()

    def handle(self, message: dict[str, Any]) -> None:
        op, run = message["op"], int(message["run"])
        if op == "open":
            resume = message.get("resume")
            opened = Mlflow(str(message["target"])).open(info_of(message["info"]), resume_of(resume))
            self.runs[run] = opened
            self.open.add(run)
            reply({"ready": True, "run_id": opened.run_id, "resumed": opened.resumed})
        elif op == "child":
            child = int(message["child"])
            self.runs[child] = self.runs[run].child(info_of(message["info"]))
            self.open.add(child)
        elif op in CALLS:
            args = list(message["args"])
            if op == "artifact":
                args = [Path(args[0])]
            getattr(self.runs[run], op)(*args)
            if op == "close":
                self.open.discard(run)
        else:
            raise ValueError(f"unknown message {op!r}")

    def end(self) -> None:
        """The input has ended: runs still open (the training process ended without closing them) are KILLED,
        children first, after their last metrics."""
        for run in sorted(self.open, reverse=True):
            self.runs[run].close("KILLED")
        self.open.clear()


def leave(code: int) -> None:
    """Exit at once: every write is committed by then, and the interpreter's own shutdown with mlflow loaded takes
    seconds that the training process would wait for."""
    sys.stderr.flush()
    os._exit(code)


ORPHAN_S = 10.0  # once the training process is gone: how long the writer may still write what it was sent


def watch_parent() -> None:
    """End this process ORPHAN_S seconds after the training process is gone (it was killed, or ended before its
    writer): no writer outlives its command for longer, whatever it is stuck in."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    time.sleep(ORPHAN_S)
    leave(1)


def main() -> None:
    """The writer's loop, until the end of its input ({"done": true}) or the first error."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=watch_parent, name="watch-parent", daemon=True).start()
    writer = Writer()
    try:
        for line in sys.stdin.buffer:
            writer.handle(json.loads(line))
        writer.end()
    except Exception as e:  # reported to the training process as the tracker's one warning
        reply({"error": first_line(e)})
        leave(1)
    reply({"done": True})
    leave(0)
