"""The command-line-only options every command (or several) takes, as reusable annotated types: --json, --quiet,
--rendezvous-timeout and the ticket argument. The run settings are declared in ticketcli/settings/ and become
flags through cli.declared."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli.runtime.world import RENDEZVOUS_TIMEOUT_S
from ticketcli.settings.setting import Panel

Json = Annotated[
    bool,
    typer.Option(
        "--json", help="Print exactly one JSON document on stdout instead of tables.", rich_help_panel=Panel.OUTPUT
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", help="No progress bar.", rich_help_panel=Panel.OUTPUT)]
RendezvousTimeout = Annotated[
    Optional[float],
    typer.Option(
        metavar="SECONDS",
        help="Under torchrun: how long each process waits for all the others to join before giving up with one "
        f"error line (exit 2); a signal ends the wait at once. Default: {RENDEZVOUS_TIMEOUT_S:g}.",
        rich_help_panel=Panel.SCALE_OUT,
    ),
]
TicketFile = Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")]
