"""`ticket list`: what --method, --model, --dataset and --init take, one line each (from the registries, which import
no torch), and every option of `ticket extract` with its flag, default, range, the methods that read it and whether
it is a config key (from its declaration)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ticketcli.cli.declared import choices, declared
from ticketcli.report import console
from ticketcli.report.tables import list_table
from ticketcli.settings import listing
from ticketcli.settings.flags import EXTRACT_FLAGS, OUTPUTS
from ticketcli.settings.listing import ListResult
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Setting
from ticketcli.settings.track import TRACK

if TYPE_CHECKING:
    Kind = str
else:
    Kind = choices((*listing.KINDS, "settings"))  # settings: from their declarations, settings/run.py


def extract_options() -> list[Setting]:
    """What `ticket list settings` lists: extract's run settings, --log-to and its command-line-only options (not a
    hidden spelling, nor --json and --quiet, which every command takes)."""
    return [s for s in RUN.plus(TRACK, EXTRACT_FLAGS) if not s.hidden and s.name not in OUTPUTS]


@declared(flags=OUTPUTS)
def list_kind(
    kind: Annotated[
        Kind, typer.Argument(help="What to list: methods, models, datasets, inits or settings (extract's options).")
    ],
    json_out: bool = False,
    quiet: bool = False,  # nothing to silence: accepted, as by every command, so scripts can pass it
) -> None:
    """List the methods, models, datasets or init schemes ticketcli knows, with a one-line description each, or the
    options of extract (its run settings, config keys and API keywords, and its command-line-only options) with their
    defaults, ranges and readers."""
    if kind == "settings":
        result = ListResult(kind, tuple(s.list_item() for s in extract_options()))
    else:
        result = listing.listing(kind)
    console.print_json(result.to_document()) if json_out else list_table(result)
