"""Options shared by several commands, as reusable annotated types. Those that are run settings are derived from
their one declaration (ticketcli/settings/: help with its default, panel, type) by cli.declared.option; the rest
(--json, --quiet, a ticket argument, reader options) are written here once for every command that takes them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ticketcli import catalog
from ticketcli.cli.declared import choices, option
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel
from ticketcli.world import RENDEZVOUS_TIMEOUT_S

# Built at run time from the catalog (the registries' names without importing torch; tests/test_catalog.py keeps
# them equal), so mypy cannot read them: to mypy each is the str its value is.
if TYPE_CHECKING:
    DatasetName = str
else:
    DatasetName = choices(sorted(catalog.DATASETS))

# The run settings other commands share with extract, from their declarations in settings/run.py. Built at run time,
# so to mypy each is the type its value has (the one exception to strict typing in cli/).
if TYPE_CHECKING:
    Device = Optional[str]
    Threads = Optional[int]
    Precision = Optional[str]
    DataDir = Optional[Path]
    Download = bool
    MaxParams = Optional[int]
    MaxMemory = Optional[str]
else:
    Device = option(RUN["device"])
    Threads = option(RUN["threads"])
    Precision = option(RUN["precision"].but(methods=()))  # train-weak's too: it reads no method's readers
    DataDir = option(RUN["data_dir"])
    Download = option(RUN["download"])
    MaxParams = option(RUN["max_params"])
    MaxMemory = option(RUN["max_memory"])

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
CheckpointWeights = Annotated[
    Optional[Path],
    typer.Option(
        help="The checkpoint the ticket was extracted from (checked against its sha256).", rich_help_panel=Panel.MODEL
    ),
]
TrustModelCode = Annotated[
    bool,
    typer.Option(
        "--trust-model-code",
        help=(
            "Allow importing and running the model factory (pkg.module:function) the ticket names. A ticket alone "
            "never runs code: without this (or --model naming the same factory) such a ticket is refused."
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
TicketModel = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "The ticket's own model factory pkg.module:function: confirms that it may be imported (like "
            "--trust-model-code, for that factory only). Any other model is refused."
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
TicketFile = Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")]
