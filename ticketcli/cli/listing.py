"""`ticket list`: what --method, --model, --dataset and --init take, one line each (from the registries, which import
no torch), and every run setting with its flag, default, range and the methods that read it (from its declaration)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ticketcli.cli.declared import choices
from ticketcli.cli.options import Json, Quiet
from ticketcli.report import console
from ticketcli.report.tables import list_table
from ticketcli.settings import listing
from ticketcli.settings.listing import ListResult
from ticketcli.settings.run import RUN

if TYPE_CHECKING:
    Kind = str
else:
    Kind = choices((*listing.KINDS, "settings"))  # settings: from their declarations, settings/run.py


def list_kind(
    kind: Annotated[
        Kind, typer.Argument(help="What to list: methods, models, datasets, inits or settings (extract's options).")
    ],
    json_out: Json = False,
    quiet: Quiet = False,  # nothing to silence: accepted, as by every command, so scripts can pass it
) -> None:
    """List the methods, models, datasets or init schemes ticketcli knows, with a one-line description each, or the
    run settings (extract's options, config keys and API keywords) with their defaults, ranges and readers."""
    result = ListResult(kind, tuple(s.list_item() for s in RUN)) if kind == "settings" else listing.listing(kind)
    console.print_json(result.to_document()) if json_out else list_table(result)
