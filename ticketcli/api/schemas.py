"""`schema_of`: the JSON Schema a command's `--json` document validates against, by the command's name, read from
the package (torch-free)."""

from __future__ import annotations

from ticketcli.api.keywords import speaks_keywords
from ticketcli.contract import schema
from ticketcli.contract.schema import SCHEMAS, JsonObject
from ticketcli.errors import UsageError
from ticketcli.specs.ranges import show


@speaks_keywords("schema_of")
def schema_of(command: str) -> JsonObject:
    """The JSON Schema (draft 2020-12) that the document `ticket COMMAND --json` prints validates against (and so
    the typed result's `to_document()` of the matching API call): "extract", "evaluate", "inspect", "compare",
    "export", "train-weak", "sweep-k", "drift", ... (a folder's documents: "inspect-folder", "evaluate-folder")."""
    if not isinstance(command, str) or command not in SCHEMAS:
        raise UsageError(
            f"no command prints a --json document named {show(command)}", hint=f"choose from {', '.join(SCHEMAS)}"
        )
    return schema.schema_of(command)
