"""Every file ticketcli writes goes through here: destination checks first, then a temp file in the same directory,
fsync and a rename, so a reader (or an interrupted run) sees the old file or the complete new one, never half.

Ownership: a file that did not exist is created exclusively (a hard link of the complete temp file, which fails if
the name appeared meanwhile), and each write returns the new file's identity (`Owned`: device, inode, size, mtime,
ctime). A run replaces or removes a file without --force only while that identity still matches: what it created
itself, never a file of the same name that someone else put there."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ticketcli.errors import UsageError


@dataclass(frozen=True)
class Owned:
    """The identity of a file a run wrote, taken from the open file after it got its name: whoever hands over a
    folder cannot know (let alone set) the device, inode and change time of a user's file, so a record of these
    cannot be forged to claim that file."""

    path: str  # absolute
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: str | Path, st: os.stat_result) -> Owned:
        return cls(os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> Owned | None:
        """An identity as a record stores it, or None for anything that is not exactly one (typed: no bools)."""
        ints = ("dev", "ino", "size", "mtime_ns", "ctime_ns")
        if not (isinstance(d, dict) and d.keys() == {"path", *ints} and isinstance(d["path"], str)):
            return None
        if not all(type(d[k]) is int and d[k] >= 0 for k in ints):
            return None
        return cls(**d)

    def still_ours(self) -> bool:
        """The name still holds exactly the file that was written (not replaced, touched, or a link now)."""
        try:
            st = os.lstat(self.path)
        except (OSError, ValueError):
            return False
        return stat.S_ISREG(st.st_mode) and Owned.of(self.path, st) == self

    def remove(self) -> bool:
        """Unlink the file if it is still the one written; True if it was removed."""
        if not self.still_ours():
            return False
        Path(self.path).unlink(missing_ok=True)
        return True


def check_destination(path: str | Path, *, overwrite: bool = False, owned: Owned | None = None) -> None:
    """Refuse a path a file cannot be written to (callers check before long work, write_atomic checks again).

    Only regular files are ever replaced, and only with `overwrite` (--force) or when `owned` proves that this
    run (or the earlier run it resumes) wrote that very file: a FIFO, a device (/dev/null), a socket or a
    directory is refused even then, also behind a symlink. A symlink to a regular file is replaced by the new file
    (the link, not its target: the rename never writes through it). The folder must accept a new file: a
    read-only or full file system is refused here, before the work, not after it."""
    path = Path(path)
    if "\0" in str(path):
        raise UsageError(f"cannot write {str(path)[:120]!r}: a path cannot hold a NUL character")
    if not path.parent.is_dir():
        raise UsageError(f"cannot write {path}: directory {path.parent} does not exist")
    try:
        mode = path.stat().st_mode  # follows a symlink: what a write to this name would reach
    except FileNotFoundError:
        mode = None  # absent, or a dangling symlink
    except OSError as e:  # a name too long, a loop of links, no permission to look
        raise UsageError(f"cannot write {str(path)[:200]}: {e.strerror or e}") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise UsageError(f"cannot write {path}: it is a directory")
    if mode is not None and not stat.S_ISREG(mode):
        raise UsageError(
            f"cannot write {path}: it is {_file_kind(mode)}, not a regular file (even --force only "
            "replaces regular files)",
            hint="choose another path",
        )
    if (
        os.path.lexists(path)
        and not overwrite
        and not (owned is not None and _same_name(owned, path) and owned.still_ours())
    ):
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")
    probe_writable(path.parent, path)


def _same_name(owned: Owned, path: Path) -> bool:
    return owned.path == os.path.abspath(path)


def probe_writable(folder: Path, for_path: Path | None = None) -> None:
    """Create a one-byte file in `folder` and remove it: a read-only file system, a folder without write
    permission or a full file system fails now, with one line, instead of after the work."""
    target = for_path if for_path is not None else folder
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
        try:
            os.write(fd, b"\0")  # a full disk refuses the first block (an empty file needs none)
        finally:
            os.close(fd)
    except OSError as e:
        raise UsageError(f"cannot write {target}: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def space_shortfall(folder: str | Path, need: int) -> str | None:
    """A warning when the file system of `folder` has less free space than `need` bytes, else None."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free >= need:
        return None
    return f"only {_size(free)} free in {folder}; the outputs need about {_size(need)}"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    x, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while x >= 1024 and len(units) > 1:
        x, units = x / 1024, units[1:]
    return f"{x:.1f} {units[0]}"


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
    write_owned(path, payload, overwrite=overwrite)
    return len(payload)


def write_owned(path: str | Path, payload: bytes, *, overwrite: bool = False, owned: Owned | None = None) -> Owned:
    """write_atomic that returns the new file's identity. A name that did not exist is created exclusively (a
    file that appears there meanwhile is never replaced); an existing one is replaced only with `overwrite` or
    while it is still the file `owned` describes."""
    path = Path(path)
    check_destination(path, overwrite=overwrite, owned=owned)
    may_replace = overwrite or (owned is not None and _same_name(owned, path) and owned.still_ours())
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; a ticket is meant to be shared
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
            if may_replace or not _link_new(tmp, path):
                os.replace(tmp, path)
            else:
                Path(tmp).unlink()
            tmp = None
            identity = Owned.of(path, os.fstat(f.fileno()))  # after the name changes: link and rename touch ctime
    except FileExistsError:
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it") from None
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    finally:  # an interrupt at any point unlinks the temp file: readers see old or complete new
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return identity


def _link_new(tmp: str, path: Path) -> bool:
    """Give the complete temp file its name only if that name is free (FileExistsError otherwise); False where
    the file system has no hard links, then an exclusive create reserves the name before the rename."""
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # FileExistsError if taken
    return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
