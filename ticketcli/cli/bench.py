"""`ticket bench`: a ticket's network in every form that runs on this device (dense W * M, the sparse runtime form,
ONNX Runtime, block-sparse and 2:4 where the masks allow), each checked against the ticket's network, then timed
interleaved; a verdict names the fastest form at each batch size."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli.cli.common import errors_to_exit_codes
from ticketcli.cli.declared import declared, given_settings
from ticketcli.errors import RunFailed
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.flags import BENCH_FLAGS
from ticketcli.settings.reader import READER, build_reader_spec

TicketsArgument = Annotated[
    list[Path],
    typer.Argument(
        help="A ticket file; or a folder of tickets (its *.safetensors files), a quoted glob pattern or several "
        "files: each is benched, one row each.",
        show_default=False,
    ),
]


@declared(READER, flags=BENCH_FLAGS)
def bench(
    tickets: TicketsArgument,
    batch: Optional[str] = None,
    repeats: Optional[int] = None,
    forms: Optional[str] = None,
    clock: Optional[str] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the reader settings of settings/reader.py (@declared): one flag each
) -> None:
    """Run a ticket's network in every form that can run here, check each form's outputs against the ticket's
    network on the test split, then time them interleaved: latency, throughput, memory, load time, bytes on disk
    and speed-up over dense at each batch size, and a verdict naming the fastest form. Results depend on the
    device, the torch threads and the machine's load."""
    r = given_settings(READER, given)
    from ticketcli.files.atomic import check_destination, write_atomic
    from ticketcli.runtime.threads import using
    from ticketcli.settings.registry import check_threads
    from ticketcli.specs.bench import bench_spec

    outputs = () if plot is None else (plot,)
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs, unit=None):
        spec = bench_spec(batch, repeats, forms, clock)
        check_threads(r["threads"])
        from ticketcli.runs import folder as runs_folder  # torch-free

        paths = runs_folder.ticket_paths(tickets)  # no ticket at all: one line, exit 2, before torch is imported
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        from ticketcli.bench import run as bench_run  # torch: imported once there is work to do
        from ticketcli.report import bench_views

        reader = build_reader_spec(**r)
        many = len(paths) > 1
        with (
            using(reader.threads),
            report_progress.display(
                len(paths), quiet=quiet or not many, label="bench", unit="ticket", items=True
            ) as progress,
        ):
            result = bench_run.bench_paths(paths, reader, spec, progress=progress)
        if plot is not None:
            write_atomic(plot, bench_views.bench_plot(result), overwrite=force)
            result = replace(result, plot=str(plot))
        console.print_json(result.to_document()) if json_out else bench_views.bench_tables(result)
        if result.failed:
            raise RunFailed(f"{len(result.failed)} of {len(result.tickets)} tickets could not be benched")
