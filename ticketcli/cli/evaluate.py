"""`ticket evaluate`: rebuild a ticket's network, apply its masks and measure accuracy (a CI gate with
--min-accuracy)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from ticketcli import report, runs
from ticketcli.cli.common import errors_to_exit_codes, reader_inputs, warn_unverified
from ticketcli.cli.options import (
    CheckpointWeights,
    DataDir,
    Device,
    Download,
    Json,
    MaxParams,
    Quiet,
    TicketFile,
    TicketModel,
    TrustModelCode,
)
from ticketcli.errors import GateFailed, UsageError
from ticketcli.interrupts import stop_on_signals


def evaluate(
    ticket: TicketFile,
    min_accuracy: Annotated[
        Optional[float],
        typer.Option(help="Exit with code 1 if the test accuracy is below this (a fraction, e.g. 0.8)."),
    ] = None,
    weights: CheckpointWeights = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    json_out: Json = False,
    quiet: Quiet = False,  # no progress to silence here: accepted, as by every command, so scripts can pass it
) -> None:
    """Rebuild a ticket's network from its spec and seed, apply the masks and measure accuracy."""
    with errors_to_exit_codes(), stop_on_signals(outputs=None, unit=None):
        if min_accuracy is not None and not 0 <= min_accuracy <= 1:
            raise UsageError(f"--min-accuracy must lie in [0, 1] (a fraction), got {min_accuracy}")
        policy, data = reader_inputs(
            trust_model_code=trust_model_code, model=model, max_params=max_params, data_dir=data_dir, download=download
        )
        result = runs.evaluate_ticket(
            ticket, data=data, device=device or "auto", weights=None if weights is None else str(weights), policy=policy
        )
        warn_unverified(result)
        if min_accuracy is not None:
            result["gate"] = {"min_accuracy": min_accuracy, "passed": result["test"]["accuracy"] >= min_accuracy}
        report.print_json(result) if json_out else report.evaluate_table(result)
        if not result["reproduced"] and result["device"] == "cpu" and result["stored"]["device"] == "cpu":
            report.warn("the ticket was extracted on the CPU but its accuracy did not reproduce exactly here")
        if min_accuracy is not None and not result["gate"]["passed"]:
            raise GateFailed(f"test accuracy {result['test']['accuracy']:.4f} is below --min-accuracy {min_accuracy}")
