"""ticketcli: extract, share and re-evaluate strong lottery tickets.

`import ticketcli as tc` is cheap (torch is imported only when a public name is first used):

    t = tc.load("ticket.safetensors"); net = t.build(); print(t.evaluate().test.accuracy)

The public names are listed in __all__ and documented in docs/api.md."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from ticketcli.version import __version__

# public name -> the module that defines it; resolved on first use (PEP 562), so that `import ticketcli` (and the
# command line's --help) does not pay for importing torch
_PUBLIC = {
    "Ticket": "ticketcli.api.ticket",
    "load": "ticketcli.api.ticket",
    "extract": "ticketcli.api.extract",
    "compare": "ticketcli.api.compare",
    "inspect": "ticketcli.api.inspection",
    "train_weak": "ticketcli.api.weak",
    "sweep_k": "ticketcli.api.sweep",
    "drift": "ticketcli.api.drift",
    "schema_of": "ticketcli.api.schemas",
    "list_methods": "ticketcli.api.listing",
    "list_models": "ticketcli.api.listing",
    "list_datasets": "ticketcli.api.listing",
    "extract_options": "ticketcli.api.listing",
    "apply_masks": "ticketcli.api.masks",
    "remove_masks": "ticketcli.api.masks",
    "load_pruned": "ticketcli.api.masks",
    "load_sparse": "ticketcli.api.sparse",
    "sparse_module": "ticketcli.api.sparse",
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
    "inspect",
    "train_weak",
    "sweep_k",
    "drift",
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
    "schema_of",
    "TicketCliError",
    "UsageError",
    "TicketFileError",
    "RunFailed",
]

if TYPE_CHECKING:
    from ticketcli.api.compare import compare
    from ticketcli.api.drift import drift
    from ticketcli.api.extract import extract
    from ticketcli.api.inspection import inspect
    from ticketcli.api.listing import extract_options, list_datasets, list_methods, list_models
    from ticketcli.api.masks import apply_masks, load_pruned, remove_masks
    from ticketcli.api.schemas import schema_of
    from ticketcli.api.sparse import load_sparse, sparse_module
    from ticketcli.api.sweep import sweep_k
    from ticketcli.api.ticket import Ticket, load
    from ticketcli.api.weak import train_weak
    from ticketcli.errors import RunFailed, TicketCliError, TicketFileError, UsageError
    from ticketcli.export.sparse.net import SparseNet


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _PUBLIC:
        raise AttributeError(f"module 'ticketcli' has no attribute {name!r}")
    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


class _Package(types.ModuleType):
    """`ticketcli` itself, whose public `drift` is the API's function although a subpackage has the same name: the
    import system names each subpackage on its parent when it is first imported (`ticketcli.drift = <module>`),
    which would hide the function once anything imported the drift study. The subpackage stays reachable as
    modules are, through sys.modules: `from ticketcli.drift import run` (not `import ticketcli.drift.run as run`,
    which reads the attribute)."""

    @property
    def drift(self) -> Any:
        return globals()["drift"] if "drift" in globals() else __getattr__("drift")

    @drift.setter
    def drift(self, value: object) -> None:
        if not isinstance(value, types.ModuleType):  # the subpackage, named by the import system, is left out
            globals()["drift"] = value


sys.modules[__name__].__class__ = _Package
