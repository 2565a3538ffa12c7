"""Every file ticketcli writes goes through here: destination checks first, then a temp file in the same directory,
fsync and a rename, so a reader (or an interrupted run) sees the old file or the complete new one, never half."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ticketcli.errors import UsageError


def check_destination(path: str | Path, *, overwrite: bool = False) -> None:
    """Refuse a path a file cannot be written to (callers check before long work, write_atomic checks again).

    Only regular files are ever replaced, and only with `overwrite` (--force): a FIFO, a device (/dev/null), a
    socket or a directory is refused even then, also behind a symlink. A symlink to a regular file is replaced
    by the new file (the link, not its target: the rename never writes through it)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    try:
        mode = path.stat().st_mode  # follows a symlink: what a write to this name would reach
    except FileNotFoundError:
        mode = None  # absent, or a dangling symlink
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {path}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(
            f"cannot write {path}: it is {_file_kind(mode)}, not a regular file (even --force only "
            "replaces regular files)",
            hint="choose another path",
        )
    if os.path.lexists(path) and not overwrite:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def write_atomic(path: str | Path, payload: bytes, *, overwrite: bool = False) -> int:
    """Write bytes atomically (temp file in the same directory, fsync, rename), world-readable as umask allows;
    returns the number of bytes written."""
    path = Path(path)
    check_destination(path, overwrite=overwrite)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; a ticket is meant to be shared
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    except BaseException:  # an interrupt at any point unlinks the temp file: readers see old or complete new
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return len(payload)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
