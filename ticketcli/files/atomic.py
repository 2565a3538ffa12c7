"""Every file ticketcli writes goes through here: destination checks first, then a temp file in the same directory,
fsync and a rename, so a reader (or an interrupted run) sees the old file or the complete new one, never half.

Ownership: a file that did not exist is created exclusively (a hard link of the complete temp file, which fails if
the name appeared meanwhile), and each write returns the new file's identity (`Owned`: device, inode, size, mtime,
ctime). A run replaces or removes a file without --force only while that identity still matches: what it created
itself, never a file of the same name that someone else put there. The final step is never check-then-rename: a
name that was free when the run started is taken only by an exclusive link (or a no-replace rename), so a file that
appears there during the run is kept, and the run's result is kept beside it under a name the error line gives.
With --force the rename replaces whatever is there, atomically."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.files.uninterrupted import uninterrupted


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

    def to_dict(self) -> JsonObject:
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


def make_parents(path: str | Path) -> None:
    """Create the folders a file is to be written in (as --out-dir creates its own), before the work; a name that
    cannot be a folder is refused in one line."""
    parent = Path(path).parent
    if "\0" in str(parent) or os.path.lexists(parent):
        return  # a NUL, or a file in the way: check_destination refuses it
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return  # a file on the way: as above
    except OSError as e:
        raise UsageError(f"cannot create the folder {str(parent)[:200]}: {e.strerror or e}") from None


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
    if os.path.lexists(path) and not overwrite and not _still_ours(owned, path):
        raise UsageError(f"{path} already exists", hint="pass --force to overwrite it")
    probe_writable(path.parent, path)


def _still_ours(owned: Owned | None, path: Path) -> bool:
    """`owned` describes the file at `path`, and it is still that file."""
    return owned is not None and owned.path == os.path.abspath(path) and owned.still_ours()


def probe_writable(folder: Path, for_path: Path | None = None) -> None:
    """Create a one-byte file in `folder` and remove it: a read-only file system, a folder without write
    permission or a full file system fails now, with one line, instead of after the work."""
    target = for_path if for_path is not None else folder
    tmp = None
    try:
        with uninterrupted():  # a few microseconds: the probe is gone before a signal is raised
            try:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
                try:
                    os.write(fd, b"\0")  # a full disk refuses the first block (an empty file needs none)
                finally:
                    os.close(fd)
            finally:
                if tmp is not None:
                    Path(tmp).unlink(missing_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write {target}: {e.strerror or e}") from None


def space_shortfall(folder: str | Path, need: int) -> str | None:
    """A warning when the file system of `folder` has less free space than `need` bytes, else None."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return None
    if free >= need:
        return None
    return f"only {size_text(free)} free in {folder}; the outputs need about {size_text(need)}"


def size_text(n: int) -> str:
    """Bytes for an error line: 3.7 GiB, 512 MiB."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


def write_atomic(path: str | Path, payload: bytes, *, overwrite: bool = False, checked_at_start: bool = False) -> int:
    """Write bytes atomically (temp file in the same directory, fsync, rename), world-readable as umask allows;
    returns the number of bytes written (checked_at_start: see write_owned)."""
    write_owned(path, payload, overwrite=overwrite, checked_at_start=checked_at_start)
    return len(payload)


def write_owned(
    path: str | Path,
    payload: bytes,
    *,
    overwrite: bool = False,
    owned: Owned | None = None,
    checked_at_start: bool = False,
) -> Owned:
    """write_atomic that returns the new file's identity. A name that did not exist is created exclusively (a
    file that appears there meanwhile is never replaced); an existing one is replaced only with `overwrite` or
    while it is still the file `owned` describes.

    checked_at_start: the caller ran check_destination before its work, so a file at the name now appeared during
    that work; it is kept as it is, this write's bytes are kept beside it (`NAME.new-PID.EXT`, named in the
    error line) and the error is exit 2. Without it, an existing name is refused before anything is written."""
    path = Path(path)
    may_replace = overwrite or _still_ours(owned, path)
    if may_replace or not checked_at_start:  # else the start's check stands: anything at the name now is taken
        check_destination(path, overwrite=overwrite, owned=owned)
    tmp: str | None = None
    try:
        with uninterrupted():  # until `tmp` names the new file and `f` owns its descriptor, a signal is held
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            f = os.fdopen(fd, "wb")
        with f:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private; a ticket is meant to be shared
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
            if may_replace:
                os.replace(tmp, path)  # --force (or this run's own file): still one atomic rename
            elif not _place_new(tmp, path):
                if not checked_at_start:
                    raise FileExistsError(path)
                kept = _keep_beside(tmp, path)
                tmp = None
                raise UsageError(
                    f"{path} appeared while this run worked and was left as it is; this run's result is kept "
                    f"beside it as {kept}",
                    hint=f"compare the two and rename the one to keep, or pass --force to replace {path.name}",
                )
            Path(tmp).unlink(missing_ok=True)  # linked: the name holds the file now (or the rename moved it)
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


class ScratchFolder:
    """A new temporary folder for a `with` block (the block gets its path), removed with everything in it when the
    block ends. Made and removed in sections a signal does not split; a signal just before the removal leaves it
    to the finalizer, which removes the folder once this object is gone (unlike TemporaryDirectory, whose clean-up
    gives up its finalizer first and would leave the folder if interrupted part-way)."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def __enter__(self) -> Path:
        with uninterrupted():
            path = Path(tempfile.mkdtemp(prefix=self.prefix))
            self._remove = weakref.finalize(self, shutil.rmtree, path, ignore_errors=True)
        return path

    def __exit__(self, *exc: object) -> None:
        with uninterrupted():
            self._remove()  # once: a finalizer called is detached


def beside_name(path: Path, n: int = 0) -> Path:
    """Where a result whose name was taken during the run is kept: `o.safetensors` -> `o.new-PID.safetensors`
    (the extension stays, so a ticket is still a .safetensors file), `o.new-PID-2.safetensors` if that is taken."""
    tag = f".new-{os.getpid()}" + (f"-{n + 1}" if n else "")
    return path.with_name(f"{path.stem}{tag}{path.suffix}")


def _keep_beside(tmp: str, path: Path) -> Path:
    """Give the complete temp file a free name beside `path` (exclusively, like any new file); the temp is gone."""
    for n in range(1000):
        kept = beside_name(path, n)
        if _place_new(tmp, kept):
            Path(tmp).unlink(missing_ok=True)
            return kept
    raise OSError(errno.EEXIST, "no free name beside it", str(path))


def _place_new(tmp: str, path: Path) -> bool:
    """Give the complete temp file the name `path` only if that name is free; False when it is taken (nothing is
    replaced). The caller unlinks `tmp` afterwards (gone already after a rename).

    A hard link is exclusive everywhere it exists. A file system without hard links (EPERM, ENOTSUP, EXDEV,
    EMLINK: FAT, some network and FUSE mounts) falls back to Linux's renameat2(RENAME_NOREPLACE); where that is
    missing too, an exclusive create reserves the name and the rename replaces that empty placeholder: a reader
    may see an empty file there for that instant, but a file of the same name that appears first is never
    replaced."""
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
    moved = _rename_noreplace(tmp, path)
    if moved is not None:
        return moved
    with uninterrupted():  # an interrupt between the two would leave the empty placeholder at the output's name
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return False
        try:
            os.replace(tmp, path)
        except OSError:
            Path(path).unlink(missing_ok=True)  # the placeholder, ours: created exclusively just now
            raise
    return True


def _rename_noreplace(src: str, dst: Path) -> bool | None:
    """renameat2(RENAME_NOREPLACE): True when moved, False when `dst` exists, None where the C library or the file
    system does not offer it."""
    import ctypes  # only on file systems without hard links

    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    at_fdcwd, rename_noreplace = -100, 1
    if call(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.EEXIST:
        return False
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
        return None
    raise OSError(err, os.strerror(err), str(dst))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
