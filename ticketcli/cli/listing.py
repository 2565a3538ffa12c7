"""`ticket list`: what --method, --model, --dataset and --init take, one line each (from the catalog: no torch), and
every run setting with its flag, default, range and the methods that read it (from its declaration)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from ticketcli import catalog, report
from ticketcli.cli.declared import choices
from ticketcli.cli.options import Json, Quiet
from ticketcli.report.console import stdout
from ticketcli.settings.run import RUN

if TYPE_CHECKING:
    Kind = str
else:
    Kind = choices((*catalog.KINDS, "settings"))  # settings: from their declarations, settings/run.py

SCHEMA = "ticket.list/1"


def list_kind(
    kind: Annotated[
        Kind, typer.Argument(help="What to list: methods, models, datasets, inits or settings (extract's options).")
    ],
    json_out: Json = False,
    quiet: Quiet = False,  # nothing to silence: accepted, as by every command, so scripts can pass it
) -> None:
    """List the methods, models, datasets or init schemes ticketcli knows, with a one-line description each, or the
    run settings (extract's options, config keys and API keywords) with their defaults and ranges."""
    if kind == "settings":
        items = [s.describe() for s in RUN]
    else:
        items = [{"name": name, "description": text} for name, text in catalog.describe(kind).items()]
    if json_out:
        report.print_json({"schema": SCHEMA, "kind": kind, "items": items})
        return
    if kind == "settings":
        stdout().print(settings_table(items))
        return
    table = Table(title=f"{kind} ({len(items)})")
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for item in items:
        table.add_row(item["name"], item["description"])
    stdout().print(table)


def settings_table(items: list[dict[str, Any]]) -> Table:
    table = Table(title=f"settings ({len(items)}): flags, config keys and tc.extract keywords")
    for column in ("name", "default", "range", "read by", "description"):
        table.add_column(column, no_wrap=column == "name", overflow="fold")
    for item in items:
        readers = ", ".join(item["methods"]) or "every method"
        table.add_row(item["name"], item["default"], item["range"], readers, item["description"])
    return table
