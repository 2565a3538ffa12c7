"""Reading a small input file whole, within a size bound: regular files only, so that a FIFO cannot hang a reader
and /dev/zero cannot feed it forever. Config files and CIFAR-10 batches are read this way."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ticketcli.errors import UsageError
from ticketcli.files.uninterrupted import open_descriptor


def read_regular_file(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes; anything else is a one-line UsageError."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UsageError(f"{what} not found: {p}") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise UsageError(f"cannot read {what} {p}: {getattr(e, 'strerror', None) or e}") from None
    _check_stat(st, p, limit, what)
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open must not wait for a writer
        f = open_descriptor(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), "rb")
    except OSError as e:
        raise UsageError(f"cannot read {what} {p}: {e.strerror or e}") from None
    with f:
        st = os.fstat(f.fileno())
        _check_stat(st, p, limit, what)  # the file actually opened, not the one stat'ed
        try:
            data = f.read(st.st_size)  # read(n) allocates n up front: the real size, never the limit
            grew = f.read(1)
        except OSError as e:
            raise UsageError(f"cannot read {what} {p}: {e.strerror or e}") from None
    if grew or len(data) != st.st_size:
        raise UsageError(f"{what} {p} changed while it was read")
    return data


def _check_stat(st: os.stat_result, p: Path, limit: int, what: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"{what} {p} is {kind}")
    if st.st_size > limit:
        raise UsageError(f"{what} {p} is larger than {limit / (1 << 20):g} MiB ({st.st_size} bytes)")


PATH_MAX = 4096  # bytes, Linux's limit for a whole path (and what other systems allow at most, roughly)
NAME_MAX = 255  # bytes of one path component


def shown_path(path: str | Path, keep: int = 80) -> str:
    """A path short enough for one error line: its first `keep` characters and its length beyond that."""
    text = str(path)
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} characters)"


def check_user_path(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, in one line, a path from the command line, a config or the environment that no system call could
    take: a NUL byte, more than PATH_MAX bytes, or a component of more than NAME_MAX bytes (each would be an
    OSError or ValueError deep inside whatever touches it first)."""
    text = os.fspath(path)
    if "\0" in text:
        escaped = text.replace("\0", "\\x00")
        raise UsageError(f"{what} {shown_path(escaped)} contains a NUL byte")
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate that no file name decodes to
        raise UsageError(f"{what} {shown_path(text)} is not a file name this system can encode") from None
    if len(raw) > PATH_MAX:
        raise UsageError(f"{what} {shown_path(text)} is {len(raw)} bytes long, more than PATH_MAX ({PATH_MAX})")
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise UsageError(
            f"{what} {shown_path(text)} has a name of {longest} bytes, more than NAME_MAX ({NAME_MAX}) per component"
        )
