"""What every command does at its edge: its own errors as exit codes, and warnings several commands share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from ticketcli import exits, report, runs
from ticketcli.errors import TicketCliError


@contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """A command's own errors as exit codes (exits.report_error): 2 bad input, 1 failed gate or run, 130/143
    interrupted by SIGINT/SIGTERM (commands turn those into errors.Interrupted with interrupts.stop_on_signals).
    Anything else goes on to OneLineErrors, the last resort."""
    try:
        yield
    except TicketCliError as e:
        raise typer.Exit(exits.report_error(e)) from None
    except KeyboardInterrupt:
        report.error("interrupted by SIGINT; no output was written")
        raise typer.Exit(130) from None


def warn_unverified(result: dict) -> None:
    """A ticket written before masks_sha256 existed still works; say once that its masks were not checked."""
    if result.get("integrity") == "not recorded":
        report.warn(
            f"{result.get('ticket')} records no masks_sha256 (an older ticket): its masks could not be "
            "checked for changes since it was written"
        )


def warn_precision(precision: str, device: str) -> None:
    """bf16 autocast on the CPU works but is usually slower: say so once."""
    if precision == "bf16" and runs.resolve_device(device).type == "cpu":
        report.warn("--precision bf16 on the CPU: autocast is usually slower than fp32 there; it is meant for GPUs")
