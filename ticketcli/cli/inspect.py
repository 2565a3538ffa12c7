"""`ticket inspect`: a ticket's metadata, per-layer density and file size, without data; a folder of tickets (or a
glob, or several files) as one row per ticket; the command or TOML that reproduces a ticket."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli.cli.common import errors_to_exit_codes
from ticketcli.cli.declared import declared
from ticketcli.errors import GateFailed, UsageError
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.report import tables as report_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import INSPECT_FLAGS


@declared(flags=INSPECT_FLAGS)
def inspect(
    tickets: Annotated[
        list[Path],
        typer.Argument(
            help="A ticket file; or a folder of tickets (its *.safetensors files, e.g. a sweep-k --out-dir), a "
            "quoted glob pattern or several files: one row per ticket.",
            show_default=False,
        ),
    ],
    json_out: bool = False,
    aggregate: bool = False,
    plot: Optional[Path] = None,
    force: bool = False,
    csv_out: bool = False,
    command: bool = False,
    toml: bool = False,
    quiet: bool = False,  # no progress to silence here: accepted, as by every command, so scripts can pass it
) -> None:
    """Print a ticket's metadata, per-layer density and file size (needs no data); for a folder of tickets, one row
    each. Exit 1 when any ticket of a folder fails validation (all are still listed), 2 when none is found."""
    # numpy and safetensors' header, never torch (nor --help)
    from ticketcli.runs import folder as runs_folder
    from ticketcli.runs import inspect as runs_inspect

    with errors_to_exit_codes(), stop_on_signals(outputs=None if plot is None else (plot,), unit=None):
        if sum((json_out, csv_out, command or toml)) > 1:
            raise UsageError("choose one of --json, --csv and --command/--toml")
        single = runs_folder.single_file(tickets)
        if aggregate and (single or command or toml):
            raise UsageError("--aggregate groups the tickets of a folder over their seeds; give a folder")
        if plot is not None:
            if not single or command or toml or csv_out:
                raise UsageError("--plot draws one ticket; give a single ticket file, without --csv, --command, --toml")
            check_destination(plot, overwrite=force)  # before the work, not after
        if command or toml:
            if not single:
                raise UsageError("--command and --toml reproduce one ticket; give a single ticket file")
            reproduce(tickets[0], command=command, toml=toml)
            return
        if single and not csv_out:
            result = runs_inspect.inspect_ticket(tickets[0])  # numpy only: no torch
            if plot is not None:
                from ticketcli.report import plots  # matplotlib, when a figure is drawn

                png = plots.inspect_plot(result, runs_inspect.filter_maps(tickets[0]))
                write_atomic(plot, png, overwrite=force, checked_at_start=True)
            console.print_json(result.to_document()) if json_out else report_tables.inspect_table(result)
            return
        listing = runs_folder.inspect_folder(tickets, aggregate=aggregate)
        if json_out:
            console.print_json(listing.to_document())
        elif csv_out:
            report_tables.inspect_folder_csv(listing)
        else:
            report_tables.inspect_folder_table(listing)
        failed = listing.failure_line()
        if failed is not None:
            raise GateFailed(failed)


def reproduce(ticket: Path, *, command: bool, toml: bool) -> None:
    """--command / --toml: what reproduces `ticket`, on stdout; what it cannot promise, on stderr."""
    from ticketcli.runs import reproduce as runs_reproduce

    how = runs_reproduce.reproduction(ticket)  # every recorded setting checked as extract checks it
    parts = ([how.command()] if command else []) + ([how.toml()] if toml else [])
    text = "\n".join(p if p.endswith("\n") else p + "\n" for p in parts)
    lines = [line for p in parts for line in p.removesuffix("\n").split("\n")]
    # a last guard: the command is one line, and no line holds a character a terminal or shell would act on
    if (command and "\n" in parts[0]) or any(console.literal(line) != line for line in (*lines, *how.notes)):
        raise UsageError(
            f"{console.literal(ticket)}: its settings or name hold control or format characters, "
            "which a command line shown here would have to escape",
            hint="rename the file; a ticket made by ticket extract records none",
        )
    console.results().write(text)
    for note in how.notes:
        console.warn(note)
