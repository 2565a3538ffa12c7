"""What a --log-to destination already holds, checked before the run (torch-free, without mlflow): a destination is
absent, an existing store of its tracker, or refused in one line (exit 2). What a store says is untrusted: an MLflow
store whose experiment `ticket` or any of whose runs keeps its artifacts anywhere but a local path inside the store
(a URL, another folder) would make the run reach an address the user did not name; a file that is not an MLflow
store (another program's database, an empty file) is not written into; a FIFO, a device or a socket is never
opened. `--force` does not change any of this: it overwrites an output, and a store is not an output to replace."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.settings.track import Destination
from ticketcli.specs.ranges import show
from ticketcli.track.mlflow_store import EXPERIMENT

MAX_META = 1 << 20  # bytes of one meta.yaml read
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDES = ("-journal", "-wal", "-shm")
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs"})
FOLDER_ENTRIES = frozenset({".trash", "models"})  # besides the experiments' folders, named by their numeric ids


def refuse(d: Destination, why: str) -> UsageError:
    return UsageError(f"--log-to {d.text}: {why}")


def _stat(d: Destination, path: Path) -> os.stat_result | None:
    """What `path` is (following links), None if absent; never opens it."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise refuse(d, f"cannot be read: {e.strerror or e}") from None


def check_destination(d: Destination) -> None:
    if d.kind == "tensorboard":
        st = _stat(d, Path(d.target))
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise refuse(d, "is not a folder; a TensorBoard destination is a folder (absent or a log folder)")
    elif d.target.startswith("sqlite:///"):
        _sqlite_store(d, _resolved(d, d.target.removeprefix("sqlite:///")))
    else:
        _folder_store(d, _resolved(d, d.target.removeprefix("file://")))


def _resolved(d: Destination, path: str) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise refuse(d, f"cannot be resolved ({type(e).__name__}: a symlink loop?)") from None


def _inside(d: Destination, uri: Any, root: Path, what: str) -> None:
    """`uri` (an artifact location) must be a local path inside `root`, else the run is refused."""
    text = uri if isinstance(uri, str) else ""
    parts = urlsplit(text)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        local: str | None = unquote(parts.path)
    else:
        local = text if text and not parts.scheme else None
    try:
        if local is not None and "\0" not in local and Path(local).resolve().is_relative_to(root):
            return
    except (OSError, RuntimeError):  # a symlink loop: not a place to write to
        pass
    raise refuse(d, f"{what} keeps its artifacts at {show(uri)}, not inside the store; not opened")


def _sqlite_store(d: Destination, db: Path) -> None:
    st = _stat(d, db)
    if st is None:
        return
    if not stat.S_ISREG(st.st_mode):
        raise refuse(d, "is not a regular file (a FIFO, a device, a socket or a folder); not opened")
    if st.st_size == 0:
        raise refuse(d, "is an empty file, not an MLflow store; name a new file or an existing MLflow store")
    for suffix in SQLITE_SIDES:  # SQLite opens these beside the database: they too must be regular files
        side = _stat(d, db.with_name(db.name + suffix))
        if side is not None and not stat.S_ISREG(side.st_mode):
            raise refuse(d, f"its {db.name + suffix} is not a regular file (a FIFO, a device or a socket); not opened")
    try:
        with db.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise refuse(d, f"cannot be read: {e.strerror or e}") from None
    if head != SQLITE_HEADER:
        raise refuse(d, "is not an MLflow store (not a SQLite database); name a new file or an MLflow store")
    try:
        con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True, timeout=5.0)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not MLFLOW_TABLES <= tables:
                raise refuse(d, "is another program's SQLite database, not an MLflow store; not written into")
            experiments = con.execute("SELECT artifact_location FROM experiments WHERE name = ?", (EXPERIMENT,))
            for (location,) in experiments.fetchall():
                _inside(d, location, db.parent, f"its experiment {EXPERIMENT!r}")
            for run, uri in con.execute("SELECT run_uuid, artifact_uri FROM runs"):
                _inside(d, uri, db.parent, f"its run {show(run)}")
        finally:
            con.close()
    except sqlite3.Error as e:
        raise refuse(d, f"cannot be read as an MLflow store: {e}") from None


def _meta(d: Destination, path: Path) -> JsonObject:
    """A store's meta.yaml (an experiment's or a run's); absent: {}."""
    import yaml  # MLflow's own dependency: present wherever --log-to mlflow: is accepted

    st = _stat(d, path)
    if st is None:
        return {}
    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_META:
        raise refuse(d, f"{path} is not a store's meta.yaml (not a regular file, or over {MAX_META} bytes)")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, yaml.YAMLError) as e:
        raise refuse(d, f"{path} cannot be read: {type(e).__name__}") from None
    return doc if isinstance(doc, dict) else {}


def _folder_store(d: Destination, folder: Path) -> None:
    st = _stat(d, folder)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise refuse(d, "is not a folder; an MLflow folder store is a folder (absent or an MLflow store)")
    try:
        _experiments(d, folder)
    except OSError as e:
        raise refuse(d, f"cannot be read: {e.strerror or e}") from None


def _experiments(d: Destination, folder: Path) -> None:
    """Each experiment of a folder store, and each of its runs, keeps its artifacts inside the store."""
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name in FOLDER_ENTRIES:
            continue
        if not (entry.name.isdigit() and entry.is_dir()):
            raise refuse(d, f"is not an MLflow store (it holds {show(entry.name)}); name a new folder or a store")
        experiment = Path(entry.path)
        meta = _meta(d, experiment / "meta.yaml")
        if meta.get("name") == EXPERIMENT:
            _inside(d, meta.get("artifact_location"), folder, f"its experiment {EXPERIMENT!r}")
        for run in sorted(experiment.iterdir()):
            found = _meta(d, run / "meta.yaml") if run.is_dir() else {}
            if "artifact_uri" in found:
                _inside(d, found["artifact_uri"], folder, f"its run {show(run.name)}")
