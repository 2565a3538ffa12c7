"""`ticket evaluate`: rebuild a ticket's network, apply its masks and measure accuracy (a CI gate with
--min-accuracy, and with --max-drop on the drop from the stored accuracy)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import Given, declared, given_settings
from ticketcli.errors import GateFailed, UsageError
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.report import tables as report_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import EVALUATE_FLAGS
from ticketcli.settings.reader import READER, build_reader_spec


def warn_not_reproduced(path: Path) -> None:
    """Say that a CPU ticket did not reproduce exactly here, naming what differs between the machine and torch build
    it records and this one (manual: docs/reference/reliability.md, Determinism across machines)."""
    from ticketcli.runtime import machine
    from ticketcli.ticketfile import ticket as ticket_io

    differ = machine.differences(dict(ticket_io.scan(path).ticket.created_by.entries), machine.record())
    why = (
        "; it differs from this machine in " + ", ".join(differ)
        if differ
        else " although it records this torch build, CPU kind and BLAS"
    )
    console.warn(f"the ticket was extracted on the CPU but its accuracy did not reproduce exactly here{why}")


TicketsArgument = Annotated[
    list[Path],
    typer.Argument(
        help="A ticket file written by `ticket extract`; or a folder of tickets (its *.safetensors files, e.g. a "
        "sweep-k --out-dir), a quoted glob pattern or several files: each is evaluated and gated.",
        show_default=False,
    ),
]


@declared(READER, flags=EVALUATE_FLAGS)
def evaluate(
    tickets: TicketsArgument,
    min_accuracy: Optional[float] = None,
    max_drop: Optional[float] = None,
    aggregate: bool = False,
    max_bits_per_char: Optional[float] = None,
    csv_out: bool = False,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the reader settings of settings/reader.py (@declared): one flag each
) -> None:
    """Rebuild a ticket's network from its spec and seed, apply the masks and measure accuracy. For a folder of
    tickets: one row each and a summary; exit 1 when any ticket fails the gate or cannot be evaluated."""
    r = given_settings(READER, given)
    from ticketcli.runtime.threads import using
    from ticketcli.settings.registry import check_threads
    from ticketcli.ticketfile import ticket as ticket_io  # numpy: not needed for --help

    with errors_to_exit_codes(), stop_on_signals(outputs=None, unit=None):
        bounds = (("min_accuracy", min_accuracy), ("max_drop", max_drop), ("max_bits_per_char", max_bits_per_char))
        for name, bound in bounds:
            if bound is not None:
                EVALUATE_FLAGS[name].check(bound)
        check_threads(r["threads"])  # before the tickets are looked at, as every flag
        from ticketcli.runs import folder as runs_folder  # torch-free

        if not runs_folder.single_file(tickets):
            if json_out and csv_out:
                raise UsageError("choose one of --json and --csv")
            evaluate_many(
                tickets,
                r,
                min_accuracy=min_accuracy,
                max_drop=max_drop,
                max_bits_per_char=max_bits_per_char,
                aggregate=aggregate,
                csv_out=csv_out,
                json_out=json_out,
                quiet=quiet,
            )
            return
        if aggregate or csv_out:
            flag = "--aggregate groups" if aggregate else "--csv lists"
            raise UsageError(f"{flag} the tickets of a folder; give a folder (a glob, several files)")
        ticket = tickets[0]
        ticket_io.check_header(ticket)  # a bad file is refused before torch is imported (seconds)
        from ticketcli.runs import evaluate as runs_evaluate  # torch: imported once there is work to do

        reader = build_reader_spec(**r)
        with (
            using(reader.threads) as result_threads,
            report_progress.display(None, quiet=quiet, label="evaluate", lines=True) as shown,
        ):
            result = runs_evaluate.evaluate_ticket(ticket, reader, chunks=report_progress.phases_of(shown))
        result = replace(result, threads=result_threads)
        warn_unverified(result)
        failures: list[str] = []
        if min_accuracy is not None or max_drop is not None or max_bits_per_char is not None:
            gate, failures = runs_evaluate.evaluation_gate(
                result, min_accuracy=min_accuracy, max_drop=max_drop, max_bits_per_char=max_bits_per_char
            )
            result = replace(result, gate=gate)
        console.print_json(result.to_document()) if json_out else report_tables.evaluate_table(result)
        if not result.reproduced and result.device == "cpu" and result.stored.device == "cpu":
            warn_not_reproduced(ticket)
        if failures:
            raise GateFailed("; ".join(failures))


def evaluate_many(
    tickets: list[Path],
    r: Given,
    *,
    min_accuracy: float | None,
    max_drop: float | None,
    max_bits_per_char: float | None,
    aggregate: bool,
    csv_out: bool,
    json_out: bool,
    quiet: bool,
) -> None:
    """`ticket evaluate DIR`: every ticket evaluated and gated, one progress bar over them, a table (or one JSON
    document) of them all; exit 1 when any failed the gate or could not be evaluated."""
    from ticketcli.runs import folder as runs_folder
    from ticketcli.runtime.threads import using

    paths = runs_folder.ticket_paths(tickets)  # no ticket at all: one line, exit 2, before torch is imported
    from ticketcli.runs import evaluate_folder as runs_folder_eval  # torch

    reader = build_reader_spec(**r)
    with (
        using(reader.threads) as result_threads,
        report_progress.display(len(paths), quiet=quiet, label="evaluate", unit="ticket", items=True) as progress,
    ):
        result = runs_folder_eval.evaluate_folder(
            paths,
            reader,
            min_accuracy=min_accuracy,
            max_drop=max_drop,
            max_bits_per_char=max_bits_per_char,
            progress=progress,
        )
    result = runs_folder_eval.with_threads(result, result_threads)
    if aggregate:
        result = runs_folder_eval.aggregated(result)
    from ticketcli.report.aggregate_tables import evaluate_folder_csv, evaluate_folder_table

    if json_out:
        console.print_json(result.to_document())
    elif csv_out:
        evaluate_folder_csv(result)
    else:
        evaluate_folder_table(result)
    failed = result.failure_line()
    if failed is not None:
        raise GateFailed(failed)
