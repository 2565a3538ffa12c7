"""Claims on sweep-k's runs in a shared --out-dir: before a run starts, its sweep creates `ID.claim` (exclusively,
under the folder's lock) holding its pid, host, start time and a token; it removes the claim once the run's
ticket and record are stored. Another sweep on the same folder skips a claimed run and reads its record back when
it is done, so two sweeps share the work and each run is done once. A claim whose owner is gone is taken over:
on this host, a pid that is no longer alive (a killed sweep); from anywhere, a claim its owner stopped touching
(a heartbeat every HEARTBEAT_S seconds) for STALE_S seconds; anything in an `ID.claim` that is not a claim."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from ticketcli.errors import UsageError
from ticketcli.files.bounded import read_regular_file
from ticketcli.files.nesting import shallow_json
from ticketcli.files.uninterrupted import uninterrupted
from ticketcli.sweep.outputs import folder_lock

SUFFIX = ".claim"
HEARTBEAT_S = 60.0
STALE_S = 600.0  # ten missed heartbeats
POLL_S = 0.5  # how often a sweep waiting on another's runs looks again
CLAIM_LIMIT = 4096
_LIVE: set[str] = set()  # tokens of the Claims open in this process (two sweeps in one process are two owners)


def claim_path(out_dir: Path, run_id: str) -> Path:
    """The claim of run `run_id` in --out-dir."""
    return out_dir / f"{run_id}{SUFFIX}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # someone else's live process (or a pid we cannot ask about: not ours to call dead)
    return True


class Claims:
    """This process's claims in one --out-dir; a context manager that keeps them alive (the heartbeat) and gives
    back whatever it still holds on the way out (an error, Ctrl-C), so another sweep takes those runs at once."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.token = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.held: set[str] = set()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, name="sweep-claims", daemon=True)

    def __enter__(self) -> Claims:
        _LIVE.add(self.token)
        self._beat.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        for run_id in sorted(self.held):
            self.release(run_id)
        _LIVE.discard(self.token)

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            for run_id in list(self.held):
                try:
                    os.utime(claim_path(self.out_dir, run_id))
                except OSError:
                    pass  # taken over (we looked dead) or removed: nothing of ours to keep alive

    def owner(self, run_id: str) -> dict[str, Any] | None:
        """The live claim on `run_id` of another sweep, or None when the run is free (or its claim stale)."""
        path = claim_path(self.out_dir, run_id)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        try:
            doc = shallow_json(read_regular_file(path, CLAIM_LIMIT, "sweep-k claim"))
        except (UsageError, ValueError):
            return None  # not a claim a sweep wrote (written whole, under the lock): taken over
        if not (isinstance(doc, dict) and type(doc.get("pid")) is int and isinstance(doc.get("host"), str)):
            return None
        if doc.get("token") == self.token:
            return None  # our own
        if doc["host"] == self.host and doc["pid"] == os.getpid() and doc.get("token") not in _LIVE:
            return None  # this pid, reused by us, or an earlier sweep of this process: not running it any more
        if doc["host"] == self.host and doc["pid"] != os.getpid() and not _alive(doc["pid"]):
            return None  # its sweep died (killed): nobody runs it any more
        if time.time() - st.st_mtime > STALE_S:
            return None  # no heartbeat: a sweep on another host that died, or a reused pid here
        return doc

    def busy(self, run_ids: list[str]) -> set[str]:
        """The runs another live sweep holds now."""
        with folder_lock(self.out_dir):
            return {r for r in run_ids if self.owner(r) is not None}

    def take(self, run_id: str) -> bool:
        """Claim `run_id` for this sweep: True when it is ours now (it was free, or its claim stale)."""
        path = claim_path(self.out_dir, run_id)
        with folder_lock(self.out_dir):
            if self.owner(run_id) is not None:
                return False
            if path.is_dir() and not path.is_symlink():
                raise UsageError(f"cannot claim run {run_id}: {path} is a directory", hint="remove it")
            if os.path.lexists(path):
                path.unlink()  # a stale claim (its owner's is gone) or a stray file: the name is the sweep's
            doc = {"run": run_id, "pid": os.getpid(), "host": self.host, "started": time.time(), "token": self.token}
            with uninterrupted():  # a claim is written whole and known to be ours before a signal stops the sweep
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    return False  # a sweep that does not take the lock (another file system's view) was first
                except OSError as e:
                    raise UsageError(f"cannot claim {path}: {e.strerror or e}") from None
                try:
                    with os.fdopen(fd, "w") as f:
                        f.write(json.dumps(doc) + "\n")
                except OSError as e:  # a full disk: no half claim stays behind
                    path.unlink(missing_ok=True)
                    raise UsageError(f"cannot claim {path}: {e.strerror or e}") from None
                self.held.add(run_id)
            return True

    def release(self, run_id: str) -> None:
        """Remove our claim on `run_id` (its files are stored, or this sweep stops); another's is left alone."""
        path = claim_path(self.out_dir, run_id)
        self.held.discard(run_id)
        with folder_lock(self.out_dir):
            try:
                doc = shallow_json(read_regular_file(path, CLAIM_LIMIT, "sweep-k claim"))
            except (UsageError, ValueError, OSError):
                return
            if isinstance(doc, dict) and doc.get("token") == self.token:
                path.unlink(missing_ok=True)
