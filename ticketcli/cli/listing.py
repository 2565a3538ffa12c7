"""`ticket list`: what --method, --model, --dataset and --init take, one line each (from the catalog: no torch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from ticketcli import catalog, report
from ticketcli.cli.options import Json, Quiet, choices
from ticketcli.report.console import stdout

if TYPE_CHECKING:
    Kind = str
else:
    Kind = choices(catalog.KINDS)

SCHEMA = "ticket.list/1"


def list_kind(
    kind: Annotated[Kind, typer.Argument(help="What to list: methods, models, datasets or inits.")],
    json_out: Json = False,
    quiet: Quiet = False,  # nothing to silence: accepted, as by every command, so scripts can pass it
) -> None:
    """List the methods, models, datasets or init schemes ticketcli knows, with a one-line description each."""
    items = [{"name": name, "description": text} for name, text in catalog.describe(kind).items()]
    if json_out:
        report.print_json({"schema": SCHEMA, "kind": kind, "items": items})
        return
    table = Table(title=f"{kind} ({len(items)})")
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for item in items:
        table.add_row(item["name"], item["description"])
    stdout().print(table)
