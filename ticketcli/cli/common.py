"""What every command does at its edge: its own errors as exit codes, and warnings several commands share."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import typer

from ticketcli.cli import exits
from ticketcli.errors import TicketCliError
from ticketcli.report import console


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
        console.error("interrupted by SIGINT; no output was written")
        raise typer.Exit(130) from None


def warn_unverified(result: Mapping[str, object]) -> None:
    """A ticket written before masks_sha256 existed still works; say once that its masks were not checked."""
    if result.get("integrity") == "not recorded":
        console.warn(
            f"{result.get('ticket')} records no masks_sha256 (an older ticket): its masks could not be "
            "checked for changes since it was written"
        )


def warn_low_space(needs: dict[Path, int]) -> None:
    """Before the work: warn once per folder whose file system has less free space than the outputs written
    there will take (bytes per output path, estimated); a full or read-only target is refused by
    atomic.check_destination."""
    from ticketcli.files.atomic import probe_writable, space_shortfall

    folders: dict[Path, int] = {}
    for path, need in needs.items():
        folders[path.parent] = folders.get(path.parent, 0) + need
    for folder, need in folders.items():
        if folder.is_dir():
            probe_writable(folder)  # a full or read-only file system is an error, not a warning
        message = space_shortfall(folder, need)
        if message is not None:
            console.warn(message)


def model_size(model: object) -> int:
    """Parameters of a built-in model, worked out from its spec alone (registry.estimate); 0 for a user's."""
    from ticketcli.models import registry
    from ticketcli.specs.run import ModelSpec

    est = registry.estimate(model) if isinstance(model, ModelSpec) and model.arch != "user" else None
    return 0 if est is None else est.params


def warn_precision(precision: str, device: str) -> None:
    """bf16 autocast on the CPU works but is usually slower: say so once."""
    from ticketcli.runs import inputs as runs_inputs  # torch: imported when a command computes, not at start-up

    if precision == "bf16" and runs_inputs.resolve_device(device).type == "cpu":
        console.warn("--precision bf16 on the CPU: autocast is usually slower than fp32 there; it is meant for GPUs")


def warn_missed_sparsity(requested: float, achieved: float, rounds: object, tolerance: float) -> None:
    """A method with a stopping tolerance (iterated) that ran out of rounds short of the request says so once; the
    ticket is written all the same and the command exits 0 (docs/method.md, "The iterated variant")."""
    if rounds and requested - achieved > tolerance:
        console.warn(
            f"stopped at {achieved:.2%} sparsity, short of the requested {requested:.2%} by more than "
            f"--iter-tolerance {tolerance:g}: more --epochs per round or more --max-rounds get closer"
        )
