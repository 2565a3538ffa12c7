"""One exception family; the CLI maps it to exit codes in one place."""

_HINT = "hint: "


class TicketCliError(Exception):
    """A user-facing error: one line, with an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    @property
    def hint(self) -> str | None:
        """What to do about it; the command line prints it in its one line, after the message."""
        return self._hint

    @hint.setter
    def hint(self, value: str | None) -> None:
        self._hint = value
        # A Python caller who does not catch the error sees the hint under the message: Python 3.11 prints an
        # exception's notes in a traceback. Kept in step with the hint when it is rewritten (the API rewrites CLI
        # option names as keywords); notes added by others are kept.
        notes = [n for n in getattr(self, "__notes__", []) if not n.startswith(_HINT)]
        if value:
            notes.append(_HINT + value)
        if notes:
            self.__notes__ = notes
        elif hasattr(self, "__notes__"):
            del self.__notes__


class UsageError(TicketCliError):
    """Bad flags, config, spec or data location (exit 2)."""


class TicketFileError(TicketCliError):
    """A ticket file that is unreadable, corrupt, foreign or inconsistent (exit 2)."""


class OutputFailed(TicketCliError):
    """stdout could not be written: a full disk, /dev/full, an I/O error (exit 2; a closed pipe is not this)."""


class GateFailed(TicketCliError):
    """A requested gate such as --min-accuracy was not met (exit 1)."""

    exit_code = 1


class RunFailed(TicketCliError):
    """A run that started but could not finish sensibly, e.g. a non-finite loss (exit 1)."""

    exit_code = 1


class Interrupted(TicketCliError):
    """A run stopped by SIGINT or SIGTERM (exit 128 + the signal number: 130, 143)."""

    def __init__(self, message: str, signum: int, hint: str | None = None):
        super().__init__(message, hint)
        self.exit_code = 128 + signum
