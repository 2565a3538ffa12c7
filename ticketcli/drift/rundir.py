"""A drift run directory (`--run-dir DIR`, `--resume DIR`): its layout and the files in it other than the state
(drift/state.py): `run.json`, the settings the run was started with; `measurements.jsonl`, one JSON record per
measurement, appended and flushed as it is taken; `trackers.json`, the --log-to runs to continue on a resume.

Every file read back is hostile until checked: regular files only (never through a symlink), read within a bound
(run.json and trackers.json are small; measurements.jsonl no larger than the run's own settings allow, checked
before a byte of it is read, and only up to the length the state vouches for, checked by its SHA-256), plain JSON
with the types expected, and anything else one UsageError line. What a run dir records of where to write (its
--log-to) is hostile too: a resume writes outside the run dir only where the command line says so again."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from pathlib import Path

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.files.atomic import Owned, write_atomic, write_owned
from ticketcli.files.bounded import read_regular_file
from ticketcli.files.nesting import shallow_json
from ticketcli.files.uninterrupted import open_descriptor, uninterrupted
from ticketcli.report.console import one_line, write_stderr
from ticketcli.settings.track import Destination

SETTINGS, STATE, MEASUREMENTS, TRACKERS = "run.json", "state.safetensors", "measurements.jsonl", "trackers.json"
FORMAT = "ticket-drift-run/1"
SETTINGS_LIMIT = 1 << 20  # run.json holds flags and a spec: a few KiB
TRACKERS_LIMIT = 1 << 16
MAX_ID = 255  # characters of a tracker's run id (an MLflow id is 32 hex digits, a TensorBoard run a folder name)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # and never a path: no separator, never . or ..
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def create(folder: Path, settings: JsonObject) -> tuple[bool, bytes]:
    """Start a run dir: `folder` is made (its parent must exist) or is an empty folder; run.json and an empty
    measurements.jsonl are created exclusively. Whether this call made the folder, and run.json's bytes (undo's)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise UsageError(f"--run-dir {folder} is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        hint = f"continue it with ticket drift --resume {folder}, or choose another --run-dir"
        raise UsageError(f"--run-dir {folder} is not empty", hint=hint)
    with uninterrupted():  # a run dir is started whole (settings and an empty record) or not at all
        try:
            made = not folder.is_dir()
            folder.mkdir(exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create --run-dir {folder}: {e.strerror or e}") from None
        payload = (json.dumps({"format": FORMAT, **settings}, indent=1) + "\n").encode()
        write_atomic(folder / SETTINGS, payload)
        try:
            os.close(os.open(folder / MEASUREMENTS, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666))
        except OSError as e:
            raise UsageError(f"cannot create {folder / MEASUREMENTS}: {e.strerror or e}") from None
    return made, payload


def undo(folder: Path, settings: bytes, made: bool, trackers: Owned | None) -> None:
    """A run refused before it measured anything takes back the run dir it started, if it is still as the run made
    it (its run.json, an empty measurements.jsonl, the trackers.json it wrote; nothing else), so that the same
    --run-dir can be used again: the files go, and the folder too if the run made it."""
    names = {SETTINGS: True, MEASUREMENTS: True, TRACKERS: trackers is not None}
    try:
        entries = {e.name: e for e in os.scandir(folder)}
        pristine = (
            all(names.get(n, False) and e.is_file(follow_symlinks=False) for n, e in entries.items())
            and (folder / SETTINGS).read_bytes() == settings
            and entries[MEASUREMENTS].stat(follow_symlinks=False).st_size == 0
            and (trackers is None or TRACKERS not in entries or trackers.still_ours())
        )
        if not pristine:
            return
        with uninterrupted():
            for n in entries:
                os.unlink(folder / n)
            if made:
                folder.rmdir()
    except (OSError, KeyError):  # changed under us: left as it is
        return


def _json_file(path: Path, limit: int, what: str) -> JsonObject:
    if path.is_symlink():
        raise UsageError(f"{what} {path} is a symlink; a run dir holds its own files")
    data = read_regular_file(path, limit, what)
    try:
        doc = shallow_json(data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError, JSONDecodeError and TooDeep are ValueErrors
        raise UsageError(f"{what} {path} is not JSON (damaged or not a run dir's)") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{what} {path} is not a JSON object")
    return doc


def open_settings(folder: Path) -> JsonObject:
    """run.json of the run dir `folder`, its envelope checked (the flags in it are checked by their settings)."""
    if not folder.is_dir() or folder.is_symlink():
        raise UsageError(f"--resume {folder} is not a run dir (not a folder)")
    if not (folder / SETTINGS).exists() and not (folder / SETTINGS).is_symlink():
        raise UsageError(f"--resume {folder} is not a run dir (no {SETTINGS})", hint="start it with --run-dir")
    doc = _json_file(folder / SETTINGS, SETTINGS_LIMIT, "run settings")
    if doc.get("format") != FORMAT:
        raise UsageError(f"{folder / SETTINGS} is not a drift run's settings ({FORMAT})")
    return doc


class Measurements:
    """measurements.jsonl: each record one line, appended and flushed as it is taken (a killed run leaves every
    measurement taken so far); `position()` is what a checkpoint records of it (records, bytes, SHA-256)."""

    def __init__(self, path: Path):
        self.path = path
        self.records, self.size, self.digest = 0, 0, hashlib.sha256()
        try:
            self.file = open_descriptor(path, os.O_RDWR | _NOFOLLOW, "r+b")
        except OSError as e:
            raise UsageError(f"cannot open {path}: {e.strerror or e}") from None
        if not stat.S_ISREG(os.fstat(self.file.fileno()).st_mode):
            self.file.close()
            raise UsageError(f"{path} is not a regular file")

    def bound(self, most: int, per_record: int, seeds: int) -> int:
        """The most bytes this run's measurements.jsonl can hold (`most` records, from `seeds` seeds, each within
        `per_record` bytes), checked against the file's size before any of it is read; one line for a larger
        file."""
        limit, have = most * per_record, os.fstat(self.file.fileno()).st_size
        if have > limit:
            raise UsageError(
                f"{self.path} holds {have} bytes, more than this run's settings allow ({limit}: {seeds} seeds x "
                f"{most // max(seeds, 1)} logged steps x {per_record} bytes a record)",
                hint=RESTART,
            )
        return limit

    def replay(self, records: int, size: int, sha256: str) -> list[JsonObject]:
        """The first `records` records, which must be exactly the first `size` bytes (SHA-256 `sha256`); the file
        is cut there, so that it ends like an uninterrupted run's at this point."""
        have = os.fstat(self.file.fileno()).st_size
        if size > have:
            raise UsageError(f"{self.path} holds {have} bytes, fewer than the {size} its checkpoint recorded")
        self.file.seek(0)
        data = self.file.read(size)  # at most the file's size: checked above
        if hashlib.sha256(data).hexdigest() != sha256:
            raise UsageError(f"{self.path} does not match its checkpoint (changed since)", hint=RESTART)
        lines = data.split(b"\n")
        if lines[-1] != b"" or len(lines) - 1 != records:
            raise UsageError(f"{self.path} does not hold the {records} records its checkpoint recorded", hint=RESTART)
        out = []
        for line in lines[:-1]:
            try:
                rec = shallow_json(line.decode("utf-8"))
            except ValueError:
                rec = None
            if not isinstance(rec, dict):
                raise UsageError(f"{self.path}: a record is not a JSON object", hint=RESTART)
            out.append(rec)
        self.truncate(size)
        self.records, self.size, self.digest = records, size, hashlib.sha256(data)
        return out

    def truncate(self, size: int) -> None:
        self.file.truncate(size)
        self.file.seek(size)

    def append(self, record: JsonObject) -> None:
        line = (json.dumps(record) + "\n").encode()
        self.file.write(line)
        self.file.flush()  # in the OS now: a killed process loses nothing that was measured
        self.records, self.size = self.records + 1, self.size + len(line)
        self.digest.update(line)

    def position(self) -> JsonObject:
        """What a checkpoint records; the file is on disk first (a state never vouches for bytes that are not)."""
        os.fsync(self.file.fileno())
        return {"records": self.records, "bytes": self.size, "sha256": self.digest.hexdigest()}

    def close(self) -> None:
        self.file.close()


RESTART = "remove the run dir's state.safetensors and measurements.jsonl to start the run over"


def read_trackers(folder: Path) -> dict[str, str]:
    """trackers.json: --log-to destination -> the id of the run to continue (none recorded: {})."""
    path = folder / TRACKERS
    if not path.exists() and not path.is_symlink():
        return {}
    doc = _json_file(path, TRACKERS_LIMIT, "tracker record")
    ids = doc.get("ids")
    if not (
        isinstance(ids, dict)
        and all(isinstance(v, str) and len(v) <= MAX_ID and RUN_ID.fullmatch(v) for v in ids.values())
    ):
        raise UsageError(f"{path} is not a tracker record (ids: destination -> run id)")
    return dict(ids)


class TrackerRecord:
    """A run dir's trackers.json for one process: the ids it recorded (`ids`, to reopen on a resume), and each
    tracker's run recorded as soon as it is open (`opened`, called from the trackers' thread)."""

    def __init__(self, folder: Path):
        self.path, self.ids = folder / TRACKERS, read_trackers(folder)
        self.owned: Owned | None = None
        self.lock = threading.Lock()

    def opened(self, destination: str, run_id: str) -> None:
        """`destination`'s run is `run_id`: recorded (replacing the record this run wrote), unless it says so."""
        with self.lock:
            if self.ids.get(destination) != run_id:
                self.ids = {**self.ids, destination: run_id}
                payload = (json.dumps({"ids": self.ids}, indent=1) + "\n").encode()
                overwrite = self.owned is None and self.path.is_file() and not self.path.is_symlink()
                self.owned = write_owned(self.path, payload, owned=self.owned, overwrite=overwrite)


def _writes_to(d: Destination) -> Path:
    """Where a --log-to destination writes, as its tracker resolves it (relative to the working folder)."""
    target = d.target
    if d.kind == "mlflow":
        for scheme in ("sqlite:///", "file://"):
            target = target.removeprefix(scheme)
    return Path(os.path.realpath(target))  # symlinks followed, `..` applied; a loop stays a path (never inside)


def check_recorded(folder: Path, recorded: tuple[Destination, ...], given: tuple[Destination, ...]) -> None:
    """A resume's recorded --log-to destinations, each named on stderr; one outside the run dir (a `..` escape, an
    absolute path elsewhere, a symlink out) is refused unless the command line names it again."""
    inside, named = Path(os.path.realpath(folder)), {g.text for g in given}
    places = [(d, _writes_to(d)) for d in recorded]
    for d, at in places:
        if at != inside and inside not in at.parents and d.text not in named:
            raise UsageError(
                f"{folder / SETTINGS} records --log-to {d.text[:200]}, which writes outside the run dir ({at})",
                hint=f"to resume logging there, repeat --log-to {d.text[:200]}",
            )
    for d, at in places:
        write_stderr(one_line(f"drift: --resume logs to its recorded --log-to {d.text} ({at})"))
