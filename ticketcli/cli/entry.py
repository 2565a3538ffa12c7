"""The `ticket` console script and `python -m ticketcli`: signal handlers first, then the command line.

Importing the command line takes a fraction of a second (Typer, Rich; torch only once a command computes), and
`ticket --version` alone skips even that. A SIGINT or SIGTERM in that time would otherwise end in a
KeyboardInterrupt traceback or a silent kill; here it is one line and exit 130/143. Only the standard library is
imported before the handlers are set. Once the CLI runs, its own handlers take over (cli.OneLineErrors and each
command's interrupts.stop_on_signals).
"""

import os
import signal
import sys
from types import FrameType


def _stopping() -> bool:
    """Whether the CLI already caught a signal and is ending by it (interrupts.received, if it was imported)."""
    interrupts = sys.modules.get("ticketcli.runtime.interrupts")
    return interrupts is not None and interrupts.received() is not None


def _ignore(signum: int, frame: FrameType | None) -> None:
    """After the run ended by a signal: the exit code is decided, a later signal must not kill the process."""


def _interrupted_at_start(signum: int, frame: FrameType | None) -> None:
    """Write with os.write and leave with os._exit: a signal can land inside any import, mid-way through anything.
    A signal after the CLI caught one is ignored: the run is already ending, with the first one's code."""
    if _stopping():
        return
    name = signal.Signals(signum).name
    os.write(2, f"error: interrupted by {name} during start-up; nothing was written\n".encode())
    os._exit(128 + signum)


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
    previous = {
        s: signal.signal(s, _interrupted_at_start)
        for s in (signal.SIGINT, signal.SIGTERM)
        if signal.getsignal(s) is not signal.SIG_IGN
    }
    try:
        if sys.argv[1:] == ["--version"] and _fast_version():
            return
        from ticketcli.cli.app import main as cli_main  # typer, rich: the slow part (torch comes later, if at all)

        cli_main()
    finally:
        ending = _stopping()  # the exit code is 128 + that signal: the interpreter's shutdown must not die by another
        for s, handler in previous.items():
            signal.signal(s, _ignore if ending else handler)


if __name__ == "__main__":
    main()
