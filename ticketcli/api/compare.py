"""`compare`: two or more saved tickets compared as `ticket compare` compares them (init, mask overlap per layer,
accuracy and sparsity), returning its typed result. Numpy only: comparing ticket files does not import torch."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ticketcli.api.keywords import speaks_keywords
from ticketcli.errors import UsageError
from ticketcli.runs.compare import CompareResult, compare_tickets

if TYPE_CHECKING:
    from ticketcli.api.ticket import Ticket


@speaks_keywords("compare")
def compare(
    a: str | os.PathLike[str] | Ticket, b: str | os.PathLike[str] | Ticket, *more: str | os.PathLike[str] | Ticket
) -> CompareResult:
    """Compare ticket files (paths, or Tickets that were loaded or saved, read from their file): whether they share
    their init, their masks' overlap per layer and over all masked weights (Jaccard, and the share of each one's
    kept weights the other keeps), and the change of stored accuracy and sparsity; every pair of them when more
    than two are given. Returns what `ticket compare --json` prints (`CompareResult`, readable as that document)."""
    return compare_tickets(
        [saved_path(t, f"ticket {i + 1} of compare()", "compare") for i, t in enumerate((a, b, *more))]
    )


def saved_path(t: object, what: str, call: str) -> Path:
    """A path argument, or the file of a Ticket that was loaded or saved (`what`: how the error names the argument,
    `call`: the call that reads the file); without importing torch when no Ticket exists."""
    if isinstance(t, (str, os.PathLike)):
        text = os.fspath(t)
        if isinstance(text, str):
            return Path(text)
    module = sys.modules.get("ticketcli.api.ticket")  # not imported: no Ticket exists, and torch stays unimported
    if module is not None and isinstance(t, module.Ticket):
        path = getattr(t, "path", None)
        if path is None:
            raise UsageError(
                f"{what} has no file: {call} reads saved tickets",
                hint=f"save it first (t.save('t.safetensors')), then {call} the file",
            )
        return Path(path)
    raise UsageError(f"{what} must be a path or a saved Ticket, got {type(t).__name__}")
