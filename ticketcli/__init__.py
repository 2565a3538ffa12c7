"""ticketcli: extract, share and re-evaluate strong lottery tickets.

`import ticketcli as tc` is cheap (torch is imported only when a public name is first used):

    t = tc.load("ticket.safetensors"); net = t.build(); print(t.evaluate().test.accuracy)

The public names are listed in __all__ and documented in docs/api.md."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ticketcli.version import __version__

# public name -> the module that defines it; resolved on first use (PEP 562), so that `import ticketcli` (and the
# command line's --help) does not pay for importing torch
_PUBLIC = {
    "Ticket": "ticketcli.api.ticket",
    "load": "ticketcli.api.ticket",
    "extract": "ticketcli.api.extract",
    "compare": "ticketcli.api.compare",
    "list_methods": "ticketcli.api.listing",
    "list_models": "ticketcli.api.listing",
    "list_datasets": "ticketcli.api.listing",
    "extract_options": "ticketcli.api.listing",
    "apply_masks": "ticketcli.api.masks",
    "remove_masks": "ticketcli.api.masks",
    "load_pruned": "ticketcli.api.masks",
    "load_sparse": "ticketcli.export.sparse.load",
    "sparse_module": "ticketcli.export.sparse.net",
    "SparseNet": "ticketcli.export.sparse.net",
    "TicketCliError": "ticketcli.errors",
    "UsageError": "ticketcli.errors",
    "TicketFileError": "ticketcli.errors",
    "RunFailed": "ticketcli.errors",
}
__all__ = [
    "__version__",
    "Ticket",
    "load",
    "extract",
    "compare",
    "apply_masks",
    "remove_masks",
    "load_pruned",
    "load_sparse",
    "sparse_module",
    "SparseNet",
    "list_methods",
    "list_models",
    "list_datasets",
    "extract_options",
    "TicketCliError",
    "UsageError",
    "TicketFileError",
    "RunFailed",
]

if TYPE_CHECKING:
    from ticketcli.api.compare import compare
    from ticketcli.api.extract import extract
    from ticketcli.api.listing import extract_options, list_datasets, list_methods, list_models
    from ticketcli.api.masks import apply_masks, load_pruned, remove_masks
    from ticketcli.api.ticket import Ticket, load
    from ticketcli.errors import RunFailed, TicketCliError, TicketFileError, UsageError
    from ticketcli.export.sparse.load import load_sparse
    from ticketcli.export.sparse.net import SparseNet, sparse_module


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ticketcli' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
