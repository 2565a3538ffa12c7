"""`ticket train-weak`: rewind a ticket to its init and train only its surviving weights (a weak ticket)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli import report
from ticketcli.atomic import check_destination, write_atomic
from ticketcli.cli.common import errors_to_exit_codes, reader_inputs, warn_precision, warn_unverified
from ticketcli.cli.options import (
    CheckpointWeights,
    DataDir,
    Device,
    Download,
    Json,
    MaxMemory,
    MaxParams,
    Precision,
    Quiet,
    RendezvousTimeout,
    Threads,
    TicketFile,
    TicketModel,
    TrustModelCode,
)
from ticketcli.contract import document
from ticketcli.interrupts import stop_on_signals
from ticketcli.settings.setting import Panel, with_default
from ticketcli.weak_spec import WeakSpec, build_weak_spec
from ticketcli.world import check_rendezvous_timeout

WEAK = WeakSpec()  # the help texts show its fields' defaults


def train_weak(
    ticket: TicketFile,
    epochs: Annotated[
        Optional[int],
        typer.Option(
            help=with_default("Weight-training epochs (Appendix B).", WEAK.epochs),
            rich_help_panel=Panel.TRAINING,
        ),
    ] = None,
    lr: Annotated[
        Optional[float],
        typer.Option(
            help=with_default("Adam learning rate for the weights.", WEAK.optim.lr), rich_help_panel=Panel.TRAINING
        ),
    ] = None,
    batch_size: Annotated[
        Optional[int],
        typer.Option(help=with_default("Minibatch size.", WEAK.batch_size), rich_help_panel=Panel.TRAINING),
    ] = None,
    dense_baseline: Annotated[
        bool,
        typer.Option(
            "--dense-baseline",
            help="Also train the unmasked network from the same init with the same optimiser "
            "and batch order, and report it beside.",
            rich_help_panel=Panel.TRAINING,
        ),
    ] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the trained weights here as a plain safetensors state dict (masked entries zero), "
            "with metadata linking it to the ticket. Default: not written.",
            rich_help_panel=Panel.OUTPUT,
        ),
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a PNG of validation accuracy and training loss per epoch (masked vs dense). Default: no plot.",
            rich_help_panel=Panel.OUTPUT,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite --out and --plot if they exist.", rich_help_panel=Panel.OUTPUT)
    ] = False,
    weights: CheckpointWeights = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    max_memory: MaxMemory = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    rendezvous_timeout: RendezvousTimeout = None,
    precision: Precision = None,
    threads: Threads = None,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Rewind a ticket to its init and train only its surviving weights with the mask fixed (a weak ticket)."""
    from ticketcli import distributed, weak  # torch: imported when the command runs, not for --help
    from ticketcli.runs import inputs as runs_inputs
    from ticketcli.threads import check_threads, using

    outputs = tuple(p for p in (out, plot) if p is not None)
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs) as position:
        spec = build_weak_spec(epochs=epochs, batch_size=batch_size, lr=lr, precision=precision)
        n_threads = check_threads(threads)
        rendezvous_s = check_rendezvous_timeout(rendezvous_timeout)
        policy, data = reader_inputs(
            trust_model_code=trust_model_code,
            model=model,
            max_params=max_params,
            max_memory=max_memory,
            data_dir=data_dir,
            download=download,
        )
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        with (
            distributed.joined(
                lambda: runs_inputs.resolve_device(device or "auto"), rendezvous_s=rendezvous_s
            ) as world,
            report.runs_progress(spec.epochs, quiet=quiet or not world.main) as progress,
            using(n_threads) as used,
        ):
            warn_precision(spec.precision, device or "auto")
            result = weak.train_weak(
                ticket,
                data=data,
                spec=spec,
                device=device or "auto",
                weights=None if weights is None else str(weights),
                dense_baseline=dense_baseline,
                out=out,
                overwrite=force,
                progress=position.track(progress),
                policy=policy,
                chunks=report.phases_of(progress),
            )
            result["threads"] = used
        if not world.main:
            return
        warn_unverified(result)
        if plot is not None:
            write_atomic(plot, report.weak_plot(result), overwrite=force)
            result["plot"] = str(plot)
        report.print_json(document("train-weak", result)) if json_out else report.weak_table(result)
