"""Which files sweep-k wrote: a note in --out-dir of every file a sweep wrote (its runs' tickets and records, and
its plot elsewhere), each by its identity at write time (atomic.Owned: device, inode, size, mtime, ctime) and its
sha256. Rerunning the same command (which resumes the finished runs) may replace exactly those files without
--force; a file the user made, changed since, or copied along with the folder is still refused. Whoever hands over
the folder cannot forge the note for a user's file: its inode and change time are not theirs to know or set."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not POSIX: sweeps sharing a folder are not serialised there
    fcntl = None  # type: ignore[assignment]

from ticketcli.errors import UsageError
from ticketcli.files.atomic import Owned, check_destination, write_atomic, write_owned
from ticketcli.files.bounded import read_regular_file
from ticketcli.files.nesting import TooDeep
from ticketcli.files.uninterrupted import uninterrupted
from ticketcli.seeding import file_sha256
from ticketcli.ticketfile.meta import strict_json

OUTPUTS = "sweep-outputs.json"  # in --out-dir
FORMAT = "ticket-sweep-outputs/2"  # version 1 (path -> sha256 alone) is not trusted: it could be forged
OUTPUTS_LIMIT = 1 << 22  # a note of a few thousand paths; anything bigger is not ours
MAX_DEPTH = 8  # the note nests 4 deep
_LOCKED: dict[str, int] = {}  # folders this process holds folder_lock on, with its depth (the lock nests)
LOCK_WAIT_S = 30.0  # the longest wait for another process's lock on --out-dir (a sweep holds it for moments)
LOCK_POLL_S = 0.05
NOTE_FIRST_S = 5.0  # a waiting sweep says what it waits for after this long, then every NOTE_EVERY_S
NOTE_EVERY_S = 30.0
LOCK_HOW = "stop that process, or use another --out-dir"


class Waiting:
    """Says on stderr, soon and then every NOTE_EVERY_S, what a sweep waits for and how to take it over."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self._next = self.since + NOTE_FIRST_S

    def seconds(self) -> float:
        return time.monotonic() - self.since

    def tick(self, line: Callable[[], str]) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + NOTE_EVERY_S
            try:
                sys.stderr.write(f"sweep-k: waiting {int(now - self.since)} s for {line()}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # a closed stderr: the wait goes on, unannounced


def lock_holder(fd: int) -> str:
    """Who holds the flock on the open folder `fd`: `pid N` where the system says (Linux's /proc/locks)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for row in f.read(1 << 20).splitlines():
                words = row.split()
                if len(words) > 5 and words[1] == "FLOCK" and words[5] == inode and words[4].isdigit():
                    return f"pid {words[4]}"
    except OSError:
        pass
    return "another process"


@contextmanager
def folder_lock(folder: str | Path) -> Iterator[None]:
    """Hold an exclusive flock on --out-dir itself while reading and rewriting what sweeps share there (the note,
    the claims, a run's files with their note entries): two sweeps on one folder take turns. Nested calls in one
    process hold the one lock (a second flock of the same folder from this process would wait on itself)."""
    key = os.path.realpath(folder)
    if key in _LOCKED or fcntl is None:
        _LOCKED[key] = _LOCKED.get(key, 0) + 1
        try:
            yield
        finally:
            _LOCKED[key] -= 1
            if not _LOCKED[key]:
                del _LOCKED[key]
        return
    fd = None
    try:
        with uninterrupted():  # the descriptor is named before a signal can stop the run (the finally closes it)
            fd = os.open(key, os.O_RDONLY)
        waiting = None
        while True:  # released when fd closes, and by the kernel if the process dies
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waiting = waiting or Waiting()
                if waiting.seconds() >= LOCK_WAIT_S:
                    held = f"--out-dir {folder} is locked by {lock_holder(fd)} (waited {int(waiting.seconds())} s)"
                    raise UsageError(held, hint=LOCK_HOW) from None
                waiting.tick(lambda: f"the lock on --out-dir {folder}, held by {lock_holder(fd)} ({LOCK_HOW})")
                time.sleep(LOCK_POLL_S)
        _LOCKED[key] = 1
        try:
            yield
        finally:
            del _LOCKED[key]
    finally:
        if fd is not None:
            os.close(fd)


def read_json(path: Path, limit: int, what: str, max_depth: int) -> Any:
    """A small JSON file read like a ticket: regular files only, at most `limit` bytes, strict (no duplicate keys
    or huge integers) and at most `max_depth` levels deep; anything else is one UsageError line."""
    data = read_regular_file(path, limit, what)
    try:
        return strict_json(data, max_depth)
    except TooDeep:
        raise UsageError(f"{what} {path} nests more than {max_depth} levels deep") from None
    except ValueError:
        raise UsageError(f"{what} {path} is not valid JSON") from None


@dataclass
class Note:
    """The files a sweep wrote (absolute path -> identity and sha256) and whether the note file may be replaced."""

    out_dir: Path
    files: dict[str, tuple[Owned, str]] = field(default_factory=dict)
    problem: str | None = None  # why an existing note was not taken (not ours): replaced only with --force

    @property
    def path(self) -> Path:
        return self.out_dir / OUTPUTS

    def owned(self, path: str | Path) -> Owned | None:
        """The identity the sweep wrote `path` with, if the name still holds that very file with those bytes."""
        entry = self.files.get(os.path.abspath(path))
        if entry is None or not entry[0].still_ours():
            return None
        try:
            return entry[0] if file_sha256(path) == entry[1] else None
        except OSError:
            return None

    def check(self, overwrite: bool) -> None:
        """Before the work: a note file that is not a sweep's is the user's, replaced only with --force."""
        if self.problem is not None and not overwrite:
            raise UsageError(f"{self.problem}; it is not a note sweep-k wrote", hint="pass --force to replace it")
        if self.out_dir.is_dir():  # else run_sweep creates it
            check_destination(self.path, overwrite=True)

    def reload(self) -> None:
        """Take in what another sweep on this folder noted since this one read the note (under folder_lock)."""
        fresh = load_note(self.out_dir)
        if fresh is not None and fresh.problem is None:
            self.files = {**self.files, **fresh.files}

    def add(self, owned: Owned, payload: bytes) -> None:
        """Note a file just written (its identity and the sha256 of its bytes) and save the note, merged with what
        another sweep on this folder noted meanwhile."""
        with folder_lock(self.out_dir):
            self.reload()
            self.files[owned.path] = (owned, hashlib.sha256(payload).hexdigest())
            doc = {
                "format": FORMAT,
                "files": {p: {**o.to_dict(), "sha256": h} for p, (o, h) in sorted(self.files.items())},
            }
            write_atomic(self.path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), overwrite=True)
            self.problem = None


def remember(out_dir: str | Path | None, owned: Owned, payload: bytes) -> None:
    """Add a file the sweep just wrote outside its runs (the plot) to the note in out_dir, if there is one."""
    note = load_note(out_dir)
    if note is not None:
        note.add(owned, payload)


def check_plot(plot: Path, out_dir: str | Path | None, overwrite: bool) -> Owned | None:
    """Before the work: the plot's destination (this sweep's own earlier plot, which the note in out_dir names, is
    replaced like its runs' files) and the note it goes in; returns that earlier plot's identity, if any."""
    note = load_note(out_dir)
    owned = None if note is None else note.owned(plot)
    check_destination(plot, overwrite=overwrite, owned=owned)
    if note is not None:
        note.check(overwrite)
    return owned


def write_plot(plot: Path, png: bytes, out_dir: str | Path | None, overwrite: bool, owned: Owned | None) -> None:
    """Write the plot checked by check_plot (`owned`: what it returned) and note it in out_dir; a plot another sweep
    on out_dir drew meanwhile is in the note, and replaced like this sweep's own."""
    again = owned or written_by(out_dir, plot)
    written = write_owned(plot, png, overwrite=overwrite, owned=again, checked_at_start=True)
    remember(out_dir, written, png)


def written_here(out_dir: str | Path | None, path: str | Path) -> bool:
    """Whether `path` is still exactly the file a sweep with this --out-dir wrote (see Note.owned)."""
    return written_by(out_dir, path) is not None


def written_by(out_dir: str | Path | None, path: str | Path) -> Owned | None:
    """The identity a sweep with this --out-dir wrote `path` with, read from the note now (None if it did not, or
    the file changed since)."""
    note = load_note(out_dir)
    return None if note is None else note.owned(path)


def load_note(out_dir: str | Path | None) -> Note | None:
    """The note in out_dir (None without --out-dir); an absent, unreadable or forged-looking note knows nothing."""
    if out_dir is None:
        return None
    note = Note(Path(out_dir))
    if not os.path.lexists(note.path):
        return note
    try:
        doc = read_json(note.path, OUTPUTS_LIMIT, "sweep-k's outputs note", MAX_DEPTH)
    except UsageError as e:
        note.problem = str(e)
        return note
    files = doc.get("files") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
    if not isinstance(files, dict):
        note.problem = f"{note.path} is not sweep-k's outputs note (format {FORMAT})"
        return note
    for path, entry in files.items():
        sha = entry.pop("sha256", None) if isinstance(entry, dict) else None
        owned = Owned.from_dict(entry)
        if owned is not None and owned.path == path and isinstance(sha, str) and len(sha) == 64:
            note.files[path] = (owned, sha)
    return note
