"""The `ticket` console script and `python -m ticketcli`: signal handlers first, then the command line.

Importing the command line takes a fraction of a second (Typer, Rich; torch only once a command computes), and
`ticket --version` alone skips even that. A SIGINT or SIGTERM in that time would otherwise end in a
KeyboardInterrupt traceback or a silent kill; here it is one line and exit 130/143. Only the standard library is
imported before the handlers are set. Once the CLI runs, its own handlers take over (cli.OneLineErrors and each
command's interrupts.stop_on_signals).

After the CLI returns, the outcome is final: every file is complete or removed and the exit code is decided. A
signal from then on cannot change it: it ends the process at once with that code, skipping what is left of the
shutdown (exit handlers, the interpreter's teardown), which writes nothing of ours; a run that ended by a signal
and received another one meanwhile (hurried) skips it straight away, and so does one that gave up a torchrun
rendezvous whose helper thread is still inside torch's C++ code (the teardown would abort the process). During the
interpreter's teardown no Python handler can run (the interpreter resets them to the default, which would kill the
process), so the signals are ignored from the last exit handler on.
"""

import atexit
import fcntl
import os
import signal
import sys
from types import FrameType, ModuleType

_OUTCOME: list[int] = []  # the exit code, once the CLI has returned
_HANDLED: list[signal.Signals] = []  # the signals main() handles (not those the parent set to be ignored)


def _interrupts() -> ModuleType | None:
    """runtime.interrupts if the CLI imported it (importing it here would slow down --version)."""
    return sys.modules.get("ticketcli.runtime.interrupts")


def _hurried() -> bool:
    """Whether a second signal came while the run was stopping (interrupts.hurried)."""
    interrupts = _interrupts()
    return interrupts is not None and bool(interrupts.hurried())


def _interrupted_at_start(signum: int, frame: FrameType | None) -> None:
    """Write with os.write and leave with os._exit: a signal can land inside any import, mid-way through anything.
    A signal after the CLI caught one is only noted: the run is already ending, with the first one's code."""
    interrupts = _interrupts()
    if interrupts is not None and interrupts.received() is not None:
        interrupts.again(signum)
        return
    name = signal.Signals(signum).name
    try:
        os.write(2, f"error: interrupted by {name} during start-up; nothing was written\n".encode())
    except OSError:  # no stderr (2>&-) or no reader: the exit code still says it
        pass
    os._exit(128 + signum)


def _leave_now() -> None:
    """End with the decided exit code without the rest of the shutdown: what is buffered for stdout and stderr is
    written first (or dropped, for a stream that is gone)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(_OUTCOME[0])


def _left_behind() -> bool:
    """Whether a torchrun rendezvous was given up on with its helper still inside torch's C++ store code
    (runtime.distributed.left_behind): the interpreter's teardown would abort the process when that code returns."""
    distributed = sys.modules.get("ticketcli.runtime.distributed")
    return distributed is not None and bool(distributed.left_behind())


def _hasten(signum: int, frame: FrameType | None) -> None:
    """A signal after the outcome is final: leave at once, with the outcome's code."""
    _leave_now()


def _ignore_in_teardown() -> None:
    """The last exit handler of ours (registered first): SIG_IGN is the one disposition the teardown keeps."""
    if _OUTCOME:
        for s in _HANDLED:
            signal.signal(s, signal.SIG_IGN)


def _outcome(e: BaseException | None) -> int:
    """The exit code the process is about to end with."""
    if e is None:
        return 0
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    return 128 + signal.SIGINT if isinstance(e, KeyboardInterrupt) else 1


def _usable(fd: int, write: bool) -> bool:
    """Whether fd is open, and open for writing if `write` (`2<file` or a shell's own read-only fd is not)."""
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return not write or mode != os.O_RDONLY


def _claim_std_fds() -> None:
    """A closed fd 0, 1 or 2 (`<&-`, `>&-`, `2>&-`) is taken before any file can be opened under its number (a
    ticket's temp file opened as fd 1 would receive what anything, a C library or a child process included, writes
    to stdout): stdin becomes /dev/null, stdout and stderr a pipe whose reader has gone, so that writing to them is
    the closed-pipe case (exits.closed_output: exit 141, quietly). So does a stdout or stderr open only for
    reading, which no write can use either. Python gave a closed fd no stream (None); it gets one here, as it
    would have had the fd been open."""
    closed = [fd for fd in (0, 1, 2) if not _usable(fd, write=fd > 0)]
    for fd in closed:  # ascending: a closed fd's number is the lowest free one, nothing else can take it first
        taken = os.open(os.devnull, os.O_RDWR)
        if taken != fd:
            os.dup2(taken, fd)
            os.close(taken)
    for fd in closed:
        if fd == 0:
            sys.stdin = open(0, closefd=False)  # the process's own stream, never closed
            continue
        read, write = os.pipe()
        os.close(read)
        os.dup2(write, fd)
        os.close(write)
        stream = open(fd, "w", closefd=False, errors="backslashreplace", buffering=1 if fd == 2 else -1)
        if fd == 1:
            sys.stdout = stream
        else:
            sys.stderr = stream


def _fast_version() -> bool:
    """`ticket --version` without importing Typer or Rich; False (so the full CLI answers, and ends a closed stdout
    as it ends every other) when the line cannot be written."""
    import ticketcli

    try:
        os.write(1, f"ticketcli {ticketcli.__version__}\n".encode())
    except OSError:
        return False
    return True


def main() -> None:
    """Run `ticket` with start-up signals handled (ticketcli.cli.app:main stays callable on its own)."""
    # a signal the parent set to be ignored (SIGINT of a background job in a script) stays ignored
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _interrupted_at_start)
            _HANDLED.append(s)
    _claim_std_fds()
    atexit.register(_ignore_in_teardown)  # first registered, so the last to run
    ended: BaseException | None = None
    try:
        if sys.argv[1:] == ["--version"] and _fast_version():
            return
        from ticketcli.cli.app import main as cli_main  # typer, rich: the slow part (torch comes later, if at all)

        cli_main()
    except BaseException as e:
        ended = e
        raise
    finally:
        _OUTCOME[:] = [_outcome(ended)]
        for s in _HANDLED:
            signal.signal(s, _hasten)
        if _hurried() or _left_behind():
            _leave_now()


if __name__ == "__main__":
    main()
