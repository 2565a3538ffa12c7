"""The positional argument several commands share: the ticket file (export, train-weak). Options, the
command-line-only ones included, are declared as settings in ticketcli/settings/ and become flags through
cli.declared; a positional argument has no flag, default, config key or API keyword to declare."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TicketFile = Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")]
