"""`ticket list`: what --method, --model, --dataset and --init take, one line each (from the catalog: no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ticketcli import catalog, report
from ticketcli.cli.options import Json, Quiet, choices
from ticketcli.report.tables import list_table

if TYPE_CHECKING:
    Kind = str
else:
    Kind = choices(catalog.KINDS)


def list_kind(
    kind: Annotated[Kind, typer.Argument(help="What to list: methods, models, datasets or inits.")],
    json_out: Json = False,
    quiet: Quiet = False,  # nothing to silence: accepted, as by every command, so scripts can pass it
) -> None:
    """List the methods, models, datasets or init schemes ticketcli knows, with a one-line description each."""
    result = catalog.listing(kind)
    report.print_json(result.to_document()) if json_out else list_table(result)
