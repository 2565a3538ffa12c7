"""`ticket compare`: whether tickets share their init, how far their masks overlap per layer, and how their stored
accuracy and sparsity differ; numpy only, without data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import declared
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import COMPARE_FLAGS


@declared(flags=COMPARE_FLAGS)
def compare(
    tickets: Annotated[
        list[Path],
        typer.Argument(
            help="Two or more ticket files (of one model); more than two: every pair is compared (beyond 8, each with "
            "the first)."
        ),
    ],
    aggregate: bool = False,
    plot: Optional[Path] = None,
    force: bool = False,
    json_out: bool = False,
    quiet: bool = False,  # no progress to silence here: accepted, as by every command, so scripts can pass it
) -> None:
    """Compare tickets: same init or not, mask overlap per layer (Jaccard), change in accuracy and sparsity."""
    from ticketcli.report import compare_tables  # rich tables; numpy only, never torch (nor --help)
    from ticketcli.runs import compare as runs_compare

    outputs = (plot,) if plot is not None else None
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs, unit=None):
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        result = runs_compare.compare_tickets(tickets)
        if aggregate:
            from ticketcli.runs.compare_aggregate import compared

            result = compared(result)
        bounded = result.bound_line()
        if bounded is not None:
            console.warn(bounded)
        for t in result.tickets:
            if t.integrity == "modified":
                console.warn(f"{t.ticket}: masks were modified after the ticket was written; compared as they are now")
            warn_unverified(t.to_dict())
        if plot is not None:
            from ticketcli.report import plots

            write_atomic(plot, plots.overlap_plot(result), overwrite=force, checked_at_start=True)
        console.print_json(result.to_document()) if json_out else compare_tables.compare_table(result)
