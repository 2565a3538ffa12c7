"""Claims on sweep-k's runs in a shared --out-dir: before a run starts, its sweep creates `ID.claim` (exclusively,
under the folder's lock) holding its pid, host, start time and a token; it removes the claim once the run's
ticket and record are stored. Another sweep on the same folder skips a claimed run and reads its record back when
it is done, so two sweeps share the work and each run is done once. A claim whose owner is gone is taken over:
on this host, a pid that is no longer alive (a killed sweep); from anywhere, a claim its owner stopped touching
(a heartbeat every HEARTBEAT_S seconds) for STALE_S seconds; anything in an `ID.claim` that is not a claim. A
claim's word is checked, never taken: a symlink or any other non-regular file, fields a sweep does not write (a pid
this host cannot have, such as 1 or past pid_max), or a start or heartbeat time in the future is no claim."""

from __future__ import annotations

import json
import math
import os
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from ticketcli.errors import UsageError
from ticketcli.files.nesting import shallow_json
from ticketcli.files.uninterrupted import uninterrupted
from ticketcli.sweep.outputs import folder_lock

SUFFIX = ".claim"
HEARTBEAT_S = 60.0
STALE_S = 600.0  # ten missed heartbeats
POLL_S = 0.5  # how often a sweep waiting on another's runs looks again
CLAIM_LIMIT = 4096
SKEW_S = 5.0  # a start or heartbeat time later than now by more than this is forged (or a broken clock): stale
FIELDS = {"run", "pid", "host", "started", "token"}
_LIVE: set[str] = set()  # tokens of the Claims open in this process (two sweeps in one process are two owners)


def claim_path(out_dir: Path, run_id: str) -> Path:
    """The claim of run `run_id` in --out-dir."""
    return out_dir / f"{run_id}{SUFFIX}"


def _pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
            return int(f.read(32))
    except (OSError, ValueError):
        return 1 << 22  # Linux's own ceiling; other systems stay well below it


def _read_claim(path: Path) -> tuple[Any, os.stat_result] | None:
    """The JSON of the claim at `path` with its stat, never following a symlink; None when there is none, or when
    what is there is not a small regular file of JSON (not a claim a sweep wrote)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None  # absent, a symlink (ELOOP), unreadable
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > CLAIM_LIMIT:
            return None
        try:
            return shallow_json(f.read(CLAIM_LIMIT + 1)), st
        except (OSError, ValueError, RecursionError):
            return None


def _well_formed(doc: Any, run_id: str, now: float) -> bool:
    """Whether `doc` has the fields a sweep writes in its claim on `run_id`, of their types and ranges."""
    if not (isinstance(doc, dict) and set(doc) == FIELDS and doc["run"] == run_id):
        return False
    pid, host, started, token = doc["pid"], doc["host"], doc["started"], doc["token"]
    if type(pid) is not int or not 0 < pid < 1 << 31:
        return False
    if not (isinstance(host, str) and 0 < len(host) <= 255 and isinstance(token, str) and 0 < len(token) <= 128):
        return False
    return type(started) in (int, float) and math.isfinite(started) and 0 <= started <= now + SKEW_S


def _born_after(pid: int, started: float) -> bool:
    """Whether process `pid` of this host started after `started` (so it did not write a claim then: a reused or
    a named pid); False where the system does not say (Linux's /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            ticks = int(f.read(4096).rpartition(")")[2].split()[19])
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            boot = next(int(row.split()[1]) for row in f if row.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return boot + ticks / os.sysconf("SC_CLK_TCK") > started + SKEW_S


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
                    os.utime(claim_path(self.out_dir, run_id), follow_symlinks=False)
                except OSError:
                    pass  # taken over (we looked dead) or removed: nothing of ours to keep alive

    def owner(self, run_id: str) -> dict[str, Any] | None:
        """The live claim on `run_id` of another sweep, or None when the run is free (or its claim stale)."""
        now = time.time()
        read = _read_claim(claim_path(self.out_dir, run_id))
        if read is None or not _well_formed(read[0], run_id, now):
            return None  # not a claim a sweep wrote (written whole, under the lock): taken over
        doc: dict[str, Any] = read[0]
        st = read[1]
        if not now - STALE_S <= st.st_mtime <= now + SKEW_S:
            return None  # no heartbeat (a sweep on another host that died, a reused pid here), or a forged one
        if doc["host"] == self.host and not 1 < doc["pid"] <= _pid_max():
            return None  # no sweep of this host runs as that pid
        if doc["token"] == self.token:
            return None  # our own
        if doc["host"] == self.host and doc["pid"] == os.getpid() and doc.get("token") not in _LIVE:
            return None  # this pid, reused by us, or an earlier sweep of this process: not running it any more
        if doc["host"] == self.host and doc["pid"] != os.getpid() and not _alive(doc["pid"]):
            return None  # its sweep died (killed): nobody runs it any more
        if doc["host"] == self.host and _born_after(doc["pid"], doc["started"]):
            return None  # that pid's process started after the claim: not the sweep that wrote it
        return doc

    def waited_on(self, run_id: str) -> str:
        """What a sweep waiting on `run_id` waits for, and how to take the run over."""
        path = claim_path(self.out_dir, run_id)
        doc = self.owner(run_id)
        whose = "another sweep" if doc is None else f"pid {doc['pid']} on {doc['host']}"
        return f"run {run_id}, claimed by {whose} in {path} (to take it over: stop that sweep, or remove {path})"

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
            read = _read_claim(path)
            if read is not None and isinstance(read[0], dict) and read[0].get("token") == self.token:
                path.unlink(missing_ok=True)
