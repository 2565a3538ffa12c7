"""How every run of `ticket` ends: the one mapping from what was raised to an exit code and at most one line.

0 success · 1 a gate failed or a run diverged · 2 bad usage or input · 70 an internal error (a bug: one line,
the traceback only with TICKET_DEBUG=1) · 130/143 interrupted by SIGINT/SIGTERM · 141 stdout or stderr was closed
by its reader (`ticket inspect t | head -1`), ended quietly as a process killed by SIGPIPE would be.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import select
import signal
import sys
import traceback

import typer
from typer import _click as click  # Typer's own (vendored) click, whose exceptions its parser raises

from ticketcli.errors import Interrupted, TicketCliError, TicketFileError, UsageError
from ticketcli.files.bounded import shown_path
from ticketcli.report import console
from ticketcli.runtime.interrupts import received
from ticketcli.runtime.world import own_rank, quiet_rank  # not distributed.py: no torch at the edge

EX_SOFTWARE = 70  # sysexits.h: an internal software error
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # 141: what a shell shows for a process killed by SIGPIPE

Streams = tuple[tuple[int, int] | None, ...]  # std_streams(): (device, inode) of fds 1 and 2, None if closed


def report_error(e: TicketCliError) -> int:
    """Print a user-facing error's one line (under torchrun: rank 0, or a rank's own failure, or every rank's when
    no rank 0 is known to exist) and return its code."""
    rank = own_rank()
    if rank == 0:
        console.error(str(e), e.hint)
    elif not quiet_rank() or not isinstance(e, (UsageError, TicketFileError, Interrupted)):
        console.error(f"(rank {rank}) {e}", e.hint)  # rank 0 reports the shared kinds identically, if it exists
    return e.exit_code


def exit_code(e: BaseException, *, debug: bool = False, streams: Streams | None = None) -> int:
    """The exit code for whatever ended the run, after printing its one line (none for a closed output, also when
    it is the line itself that finds stdout or stderr gone). `streams`: std_streams() from before the run, to tell
    our own closed pipe from any other."""
    try:
        if not closed_output(e, streams):
            return _reported(e, debug=debug)
    except OSError as late:
        if not closed_output(late, streams):
            raise
    return _quietly()


def _quietly() -> int:
    """A closed output's quiet ending; a run a signal stopped still exits 128 + that signal (130, 143), whether or
    not its line could be written: what stopped the run matters more than who was reading."""
    code = quiet_exit()
    signum = received()
    return code if signum is None else 128 + signum


def _reported(e: BaseException, *, debug: bool) -> int:
    """exit_code's work for a run whose outputs are still there: its one line, its code."""
    if isinstance(e, SystemExit) and isinstance(e.__context__, OSError) and e.__context__.errno == errno.EPIPE:
        e = e.__context__  # Typer's exit for a pipe that was not ours
    if isinstance(e, click.exceptions.NoArgsIsHelpError):
        if e.format_message():  # Typer's Rich help prints itself while the error is built; plain click's does not
            sys.stdout.write(e.format_message() + "\n")
        return e.exit_code
    if isinstance(e, click.ClickException):  # unknown option, a value outside the choices, not a number
        ctx = getattr(e, "ctx", None)
        console.error(
            click_line(e.format_message()).replace("Value error, ", ""),
            hint=f"see '{ctx.command_path} --help'" if ctx is not None else None,
        )
        return e.exit_code
    if isinstance(e, TicketCliError):
        return report_error(e)
    if isinstance(e, KeyboardInterrupt):  # where no handler of ours was set (e.g. not the main thread)
        console.error("interrupted by SIGINT")
        return 128 + signal.SIGINT
    if isinstance(e, SystemExit):
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        console.error(str(e.code))
        return 1
    if isinstance(e, typer.Abort) and e.__context__ is not None:  # Typer's wrapper of a stray EOFError
        e = e.__context__
    if isinstance(e, OSError) and e.errno == errno.ENAMETOOLONG:  # a path no check saw (they are all input)
        console.error(f"a file name is too long: {shown_path(str(e.filename))}")
        return 2
    return internal_error(e, debug=debug)


# Click and Typer lay their messages out for a terminal of many lines: "Choose from:\n\tmethods,\n\tmodels". A value
# the user typed is quoted with repr() in these messages, so a raw line break here is always their layout.
_CLICK_LAYOUT = re.compile(r"[ \t]*(?:\r?\n)+[ \t]*")


def click_line(message: str) -> str:
    """Click's message as one line: each of its line breaks, with the indentation around it, becomes one space
    (otherwise the one-line error would show the layout's tabs escaped, `Choose from: \\x09methods`)."""
    return _CLICK_LAYOUT.sub(" ", message).strip()


def internal_error(e: BaseException, *, debug: bool) -> int:
    """An exception nobody expected: a bug. One line (and the traceback before it with TICKET_DEBUG=1), exit 70."""
    if debug:
        traceback.print_exception(e, file=sys.stderr)
    console.internal_error(e, traceback_shown=debug)
    return EX_SOFTWARE


def _std_fds() -> list[int]:
    """The fds behind sys.stdout and sys.stderr (report.console.standard_streams may have given one a new fd), and
    1 and 2, which a child process or a C library writes to."""
    fds = [1, 2]
    for stream in (sys.stdout, sys.stderr):
        fd = _fileno(stream)
        if fd is not None and fd not in fds:
            fds.append(fd)
    return fds


def std_streams() -> Streams:
    """What the standard streams' fds are (device, inode): Rich points a broken stdout at /dev/null before it
    exits."""
    ids: list[tuple[int, int] | None] = []
    for fd in _std_fds():
        try:
            st = os.fstat(fd)
            ids.append((st.st_dev, st.st_ino))
        except OSError:
            ids.append(None)
    return tuple(ids)


def closed_output(e: BaseException, streams: Streams | None = None) -> bool:
    """Did the run end because its stdout or stderr is gone: its reader went away, or it was closed?

    A broken pipe (EPIPE), or a write to a closed fd (EBADF), must be in the exception's chain (Rich and Typer turn
    it into SystemExit(1)), and it must be ours: a standard stream's fd polls as a pipe without a reader or as
    closed, a standard stream is closed, or Rich has already swapped stdout's fd for /dev/null (`streams`
    changed). A broken pipe to some worker is a bug, not the user's `| head`."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    link: BaseException | None = e
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(link)
        link = link.__cause__ or link.__context__
    if not any(_is_gone(x) for x in chain):
        return False
    return _std_stream_closed() or (streams is not None and std_streams() != streams)


def _is_gone(e: BaseException | None) -> bool:
    """A write to a stream whose reader went away (EPIPE) or whose fd is closed (EBADF)."""
    return isinstance(e, OSError) and e.errno in (errno.EPIPE, errno.EBADF)


def _std_stream_closed() -> bool:
    """A pipe whose reading end is closed polls as POLLERR on the writing end; a closed fd as POLLNVAL; an fd open
    only for reading (`2<file`) is as closed to a write."""
    if any(s is None or getattr(s, "closed", False) for s in (sys.stdout, sys.stderr)):
        return True
    for fd in _std_fds():
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
                return True
        except OSError:
            return True
    try:
        poll = select.poll()
        for fd in _std_fds():
            poll.register(fd, select.POLLOUT)
        gone = select.POLLERR | select.POLLHUP | select.POLLNVAL
        return any(events & gone for _, events in poll.poll(0))
    except (OSError, AttributeError, ValueError):
        return False


def quiet_exit() -> int:
    """End without another word. A stream whose reader is gone now writes to /dev/null, so that the interpreter's
    final flush of what is still buffered cannot raise the pipe error again (Python's recipe for SIGPIPE); a stream
    that still works keeps what was written to it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        try:
            stream.flush()
        except (OSError, ValueError):
            try:
                os.dup2(devnull, fd if (own := _fileno(stream)) is None else own)
            except OSError:
                pass
        except AttributeError:  # no stream at all: nothing is buffered
            pass
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def _fileno(stream: object) -> int | None:
    """The stream's fd (report.console.standard_streams may have given it a new one); None where it has none
    (CliRunner's streams, a closed stream)."""
    try:
        fd = getattr(stream, "fileno", lambda: None)()
    except (OSError, ValueError):
        return None
    return fd if isinstance(fd, int) else None
