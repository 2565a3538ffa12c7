"""One exception family; the CLI maps it to exit codes in one place."""


class TicketCliError(Exception):
    """A user-facing error: one line, with an exit code."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


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
