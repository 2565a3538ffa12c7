"""`ticket inspect`: a ticket's metadata, per-layer density and file size, without data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ticketcli.cli.common import errors_to_exit_codes
from ticketcli.cli.options import Json, Quiet
from ticketcli.interrupts import stop_on_signals
from ticketcli.report import console
from ticketcli.report import tables as report_tables


def inspect(
    ticket: Annotated[Path, typer.Argument(help="A ticket file.")],
    json_out: Json = False,
    quiet: Quiet = False,  # no progress to silence here: accepted, as by every command, so scripts can pass it
) -> None:
    """Print a ticket's metadata, per-layer density and file size (needs no data)."""
    from ticketcli.runs import inspect as runs_inspect  # numpy and safetensors' header, never torch (nor --help)

    with errors_to_exit_codes(), stop_on_signals(outputs=None, unit=None):
        result = runs_inspect.inspect_ticket(ticket)  # numpy only: no torch
        console.print_json(result.to_document()) if json_out else report_tables.inspect_table(result)
