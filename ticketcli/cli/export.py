"""`ticket export`: a ticket's network for plain PyTorch (masked weights, prune layout, CSR or bool masks) or
ONNX."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import declared, given_settings
from ticketcli.cli.options import TicketFile
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.report import tables as report_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import EXPORT_FLAGS
from ticketcli.settings.reader import EXPORT_READER, build_reader_spec


@declared(EXPORT_READER, flags=EXPORT_FLAGS)
def export(
    ticket: TicketFile,
    format: str,  # one of the setting's choices: Typer refuses any other
    out: Path,
    with_preprocessing: bool = False,
    layout: Optional[str] = None,  # one of the setting's choices; None: auto
    force: bool = False,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the reader settings of settings/reader.py (@declared): one flag each
) -> None:
    """Write a ticket's network for plain PyTorch (masked weights, prune layout, CSR or bool masks) or as an ONNX
    model. BatchNorm statistics are recalibrated on the ticket's extraction split first (so BatchNorm models need
    their data)."""
    r = given_settings(EXPORT_READER, given)
    from ticketcli.export.request import check_format
    from ticketcli.files.atomic import check_destination, make_parents

    with errors_to_exit_codes():  # every refusal that needs no torch, before torch is imported
        reader = build_reader_spec(**r)
        check_format(format, out, with_preprocessing=with_preprocessing, load=False, layout=layout or "auto")
        make_parents(out)  # as every --out: its folders are made
        check_destination(out, overwrite=force)

    from ticketcli.export import run as export_core  # torch: imported once the command line is accepted
    from ticketcli.runtime.threads import using

    with errors_to_exit_codes(), stop_on_signals(outputs=(out,), unit=None):  # write_atomic: all of --out or none
        with (
            using(reader.threads) as used,
            report_progress.display(None, quiet=quiet, label="export", lines=True) as shown,
        ):
            result = export_core.export_ticket(
                ticket,
                fmt=format,
                out=out,
                reader=reader,
                overwrite=force,
                chunks=report_progress.phases_of(shown),
                with_preprocessing=with_preprocessing,
                layout=layout or "auto",
            )
        result = replace(result, threads=used)
        warn_unverified(result)
        console.print_json(result.to_document()) if json_out else report_tables.export_table(result)
