"""MLflow from a separate process: `MlflowProcess` is the `--log-to mlflow:` tracker of the training process. It
starts one writer process per command (mlflow_writer.py), which imports mlflow and owns the store, and sends it
every call of the run and its child runs as one JSON line through a pipe. The training process never imports
mlflow, and the seconds MLflow takes (its import, creating a store's tables, the writes) are spent in another
process, never holding the run's GIL.

Every wait here has a deadline, after which the writer is killed and the tracker reports one error (a warning,
through base.Guarded): opening the store (OPEN_S), the pipe taking a message (STALL_S), the writer finishing its
writes once the root run is closed (FINISH_S). So a dead or stuck writer is reported once, never a hang, and what
the run's own process holds for it is bounded by what the run logs within those deadlines.

The writer starts in a session of its own (a Ctrl-C at the terminal does not reach it) and ignores SIGINT too: the
training process decides. When the training process ends (closed pipe), the writer writes what it was sent, closes
the runs still open as KILLED and exits."""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from ticketcli.contract.schema import JsonObject
from ticketcli.track.info import RunInfo, Scalar, StoreError

OPEN_S = 300.0  # importing mlflow and creating a store's tables takes seconds, longer on a loaded machine
STALL_S = 300.0  # the pipe full for this long: the writer no longer reads
FINISH_S = 300.0  # once the root run is closed: the writer's last writes, artifacts included
CODE = "import sys; sys.path[0] = sys.argv[1]; from ticketcli.track.mlflow_writer import main; main()"


def writer_command() -> list[str]:
    """The writer process's command line: this Python, importing this copy of ticketcli (and not a module of the
    working directory, which `-c` would put first on sys.path)."""
    return [sys.executable, "-c", CODE, str(Path(__file__).resolve().parents[2])]


class Channel:
    """The writer process and its two pipes: JSON lines to it, JSON lines back ({"ready": true} once the store is
    open, {"done": true} once everything it was sent is written, {"error": LINE} before it exits on an error); its
    stderr kept in a temporary file for a crash's last line."""

    def __init__(self) -> None:
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            writer_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.to_child, self.from_child = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.to_child, False)  # every write waits in select(), with a deadline
        os.set_blocking(self.from_child, False)
        self.owner = threading.current_thread()  # the Writer thread of one command's trackers (stop_writers)
        LIVE.add(self)
        self.replies = b""
        self.error: str | None = None
        self.ready = self.done = self.resumed = False
        self.run_id = ""  # the root run's id in the store, from the writer's ready reply

    def _read(self, timeout: float) -> bool:
        """Take what the writer has replied, waiting up to `timeout` seconds for something; False at its end."""
        readable, _, _ = select.select([self.from_child], [], [], max(timeout, 0.0))
        if not readable:
            return True
        try:
            chunk = os.read(self.from_child, 65536)
        except BlockingIOError:
            return True
        self.replies += chunk
        *lines, self.replies = self.replies.split(b"\n")
        for line in lines:
            reply = json.loads(line)
            if reply.get("ready") is True:
                self.ready, self.run_id = True, str(reply.get("run_id", ""))
                self.resumed = reply.get("resumed") is True
            self.done |= reply.get("done") is True
            if self.error is None and isinstance(reply.get("error"), str):
                self.error = reply["error"]
        return bool(chunk)

    def failure(self) -> StoreError:
        """What ended the writer: the error it reported, else its exit and the last line it wrote to stderr."""
        if self.error is not None:
            return StoreError(self.error)
        code = self.proc.poll()
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(self.stderr.tell() - 4096, 0))
        tail = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        why = f": {tail[-1].strip()[:300]}" if tail else ""
        return StoreError(f"the MLflow writer process ended (exit code {code}){why}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:  # the writer leads a session of its own: anything it started goes with it
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        LIVE.discard(self)

    def wait_ready(self, timeout: float) -> None:
        """Until the writer has opened the store; its error, its end or the deadline raise StoreError."""
        deadline = time.monotonic() + timeout
        while not self.ready and self.error is None:
            if time.monotonic() > deadline:
                self.kill()
                raise StoreError(f"TimeoutError: the MLflow store did not open within {timeout:g} s")
            if not self._read(deadline - time.monotonic()):
                self.proc.wait()
                break
        if not self.ready:
            raise self.failure()

    def send(self, message: Mapping[str, Any]) -> None:
        """One message to the writer; its error or its end raise StoreError, and so does a pipe left full for
        STALL_S seconds (the writer is then killed)."""
        self._read(0.0)
        if self.error is not None:
            raise self.failure()
        data = memoryview((json.dumps(message) + "\n").encode())
        deadline = time.monotonic() + STALL_S
        while data:
            _, writable, _ = select.select([], [self.to_child], [], max(deadline - time.monotonic(), 0.0))
            if not writable:
                self.kill()
                raise StoreError(f"TimeoutError: the MLflow writer took no data for {STALL_S:g} s")
            try:
                data = data[os.write(self.to_child, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:  # the writer has ended: what it said (or its exit) is the error
                self.ended()
                raise self.failure() from None

    def ended(self) -> None:
        """Collect a writer that has closed its end of the pipe: its last replies and its exit."""
        try:
            self.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self.kill()
        while self._read(0.0):
            pass

    def finish(self, timeout: float) -> None:
        """No more messages: the writer writes what it was sent and exits; its error, or no exit within `timeout`
        seconds (it is then killed), raise StoreError."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        while not self.done and self._read(deadline - time.monotonic()):
            if time.monotonic() > deadline:
                self.kill()
                raise StoreError(f"TimeoutError: the MLflow writer did not finish within {timeout:g} s")
        try:  # once done, it exits at once (os._exit): the wait only collects it
            code = self.proc.wait(max(deadline - time.monotonic(), 10.0))
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        LIVE.discard(self)
        if not self.done or code != 0 or self.error is not None:
            raise self.failure()
        self.stderr.close()


LIVE: set[Channel] = set()  # the writer processes not yet collected


def stop_writers(owner: threading.Thread) -> int:
    """Kill the writer processes `owner` (a command's Writer thread) started and has not collected: at the end of
    the command, after its bounded wait, none outlives it. How many were killed."""
    mine = [c for c in list(LIVE) if c.owner is owner]
    for c in mine:
        c.kill()
    return len(mine)


def info_json(info: RunInfo) -> JsonObject:
    return dataclasses.asdict(info)


class RemoteRun:
    """One run (the root run, or a child run) in the writer process: each call is one message."""

    def __init__(self, channel: Channel, run: int, ids: list[int]):
        self.channel, self.run, self.ids = channel, run, ids  # ids: the last run id given, shared with children
        self.run_id, self.resumed = channel.run_id, channel.resumed  # the root run's (a child's are not used)

    def _call(self, method: str, *args: Any) -> None:
        self.channel.send({"op": method, "run": self.run, "args": list(args)})

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        self._call("scalars", step, dict(values))

    def params(self, params: Mapping[str, Scalar]) -> None:
        self._call("params", dict(params))

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        self._call("finish", step, dict(metrics), dict(hparams))

    def tags(self, tags: Mapping[str, str]) -> None:
        self._call("tags", dict(tags))

    def artifact(self, path: Path) -> None:
        self._call("artifact", str(path))

    def child(self, info: RunInfo) -> RemoteRun:
        self.ids[0] += 1
        self.channel.send({"op": "child", "run": self.run, "child": self.ids[0], "info": info_json(info)})
        return RemoteRun(self.channel, self.ids[0], self.ids)

    def close(self, status: str) -> None:
        self._call("close", status)
        if self.run == 0:  # the root run: the command's logging ends here
            self.channel.finish(FINISH_S)


class MlflowProcess:
    """The --log-to mlflow: tracker: each run opened in a writer process of its own."""

    def __init__(self, target: str):
        self.target = target

    def open(self, info: RunInfo, resume: str | None = None) -> RemoteRun:
        """The run `info`, or the store's run `resume` reopened (if the store holds it)."""
        channel = Channel()
        try:
            message = {"op": "open", "run": 0, "target": self.target, "info": info_json(info), "resume": resume}
            channel.send(message)
            channel.wait_ready(OPEN_S)
        except BaseException:
            if channel.proc.poll() is None:
                channel.kill()
            raise
        return RemoteRun(channel, 0, [0])
