"""`ticket train-weak`: rewind a ticket to its init and train only its surviving weights (a weak ticket)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli import distributed, report, runs, weak
from ticketcli.atomic import check_destination, write_atomic
from ticketcli.cli.common import errors_to_exit_codes, reader_inputs, warn_precision, warn_unverified
from ticketcli.cli.options import (
    CheckpointWeights,
    DataDir,
    Device,
    Download,
    Json,
    MaxParams,
    Precision,
    Quiet,
    TicketFile,
    TicketModel,
    TrustModelCode,
    with_default,
)
from ticketcli.contract import document
from ticketcli.interrupts import stop_on_signals

WEAK = weak.WeakSpec()  # the paper's weak-ticket protocol: the defaults of the options below


def train_weak(
    ticket: TicketFile,
    epochs: Annotated[
        Optional[int], typer.Option(help=with_default("Weight-training epochs (Appendix B).", WEAK.epochs))
    ] = None,
    lr: Annotated[
        Optional[float], typer.Option(help=with_default("Adam learning rate for the weights.", WEAK.optim.lr))
    ] = None,
    batch_size: Annotated[Optional[int], typer.Option(help=with_default("Minibatch size.", WEAK.batch_size))] = None,
    dense_baseline: Annotated[
        bool,
        typer.Option(
            "--dense-baseline",
            help="Also train the unmasked network from the same init with the same optimiser "
            "and batch order, and report it beside.",
        ),
    ] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the trained weights here as a plain safetensors state dict (masked entries zero), "
            "with metadata linking it to the ticket. Default: not written."
        ),
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a PNG of validation accuracy and training loss per epoch (masked vs dense). Default: no plot."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out and --plot if they exist.")] = False,
    weights: CheckpointWeights = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    precision: Precision = None,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Rewind a ticket to its init and train only its surviving weights with the mask fixed (a weak ticket)."""
    outputs = tuple(p for p in (out, plot) if p is not None)
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs) as position:
        spec = weak.build_weak_spec(epochs=epochs, batch_size=batch_size, lr=lr, precision=precision)
        policy, data = reader_inputs(
            trust_model_code=trust_model_code, model=model, max_params=max_params, data_dir=data_dir, download=download
        )
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        with (
            distributed.joined(lambda: runs.resolve_device(device or "auto")) as world,
            report.runs_progress(spec.epochs, quiet=quiet or not world.main) as progress,
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
            )
        if not world.main:
            return
        warn_unverified(result)
        if plot is not None:
            write_atomic(plot, report.weak_plot(result), overwrite=force)
            result["plot"] = str(plot)
        report.print_json(document("train-weak", result)) if json_out else report.weak_table(result)
