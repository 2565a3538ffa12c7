"""`inspect`: what `ticket inspect` reports of a ticket file (its metadata, per-layer density, file size and
integrity), or of a folder, glob or several files (one row per ticket), returning its typed result. Numpy and the
ticket file's header only: inspecting does not import torch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.saved import saved_path
from ticketcli.runs import folder as runs_folder
from ticketcli.runs import inspect as runs_inspect

if TYPE_CHECKING:
    from ticketcli.api.ticket import Ticket


@speaks_keywords("inspect")
def inspect(
    ticket: str | os.PathLike[str] | Ticket, *more: str | os.PathLike[str] | Ticket
) -> runs_inspect.InspectResult | runs_folder.InspectFolderResult:
    """What `ticket inspect --json` prints, without data or weights: for one ticket file (a path, or a Ticket that
    was loaded or saved) an `InspectResult` (`.record`, its metadata as read; `.masks`, per layer with its density;
    `.density`, `.file_bytes`); for a folder (its *.safetensors files, e.g. a sweep-k `out_dir`), a glob pattern or
    several tickets an `InspectFolderResult`, one row per ticket in `.tickets`, a ticket that fails validation
    listed with its error (`.failed`) rather than raised. Either reads as its `--json` document
    (`result.to_document()`, `result["sparsity"]`)."""
    paths = [
        saved_path(t, "the ticket" if not i else f"ticket {i + 1}", "inspect") for i, t in enumerate((ticket, *more))
    ]
    if runs_folder.single_file(paths):
        return runs_inspect.inspect_ticket(paths[0])
    return runs_folder.inspect_folder(paths)
