"""`compare`: two or more saved tickets compared as `ticket compare` compares them (init, mask overlap per layer,
accuracy and sparsity), returning its typed result. Numpy only: comparing ticket files does not import torch."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.saved import saved_path
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
