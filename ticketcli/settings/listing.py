"""`ticket list`'s result: every name --method, --model, --dataset and --init take, with its one-line description,
read from the registries themselves (each torch-free: methods/registry.py, models/registry.py, data/registry.py,
models/init.py), and the run settings' rows (Setting.list_item)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject
from ticketcli.data.registry import DATASETS
from ticketcli.methods.registry import METHODS
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.registry import MODELS
from ticketcli.registry import Registry

# the registries `ticket list` lists (and the settings)
REGISTRIES: dict[str, Registry[Any]] = {
    "methods": METHODS,
    "models": MODELS,
    "datasets": DATASETS,
    "inits": INIT_SCHEMES,
}
KINDS = tuple(REGISTRIES)


def describe(kind: str) -> dict[str, str]:
    """Name -> one-line description of one kind of registry entry (a name in KINDS), sorted by name."""
    registry = REGISTRIES[kind]
    return {name: registry.get(name).description for name in registry.names()}


@dataclass(frozen=True)
class ListItem:
    """One entry of `ticket list`: a name the option takes and its one-line description; a run setting (`ticket
    list settings`, settings/setting.py's Setting.list_item) also has its flag, default and range as help shows
    them, the methods that read it (none: every method, or it is no method option), its help panel, and whether it
    is a config key and API keyword."""

    name: str
    description: str
    flag: str | None = None
    default: str = ""
    range: str = ""
    methods: tuple[str, ...] = ()
    panel: str = ""
    config: bool = False

    def to_dict(self) -> JsonObject:
        d: JsonObject = {"name": self.name, "description": self.description}
        if self.flag is not None:
            d.update(flag=self.flag, default=self.default, range=self.range, methods=list(self.methods))
            d.update(panel=self.panel, config=self.config)
        return d


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class ListResult(Result):
    """What `ticket list <kind>` reports: every name of one kind (a name in KINDS), sorted, with its description; or
    every run setting, in declaration order (kind "settings")."""

    COMMAND: ClassVar[str] = "list"

    kind: str
    entries: tuple[ListItem, ...]  # the document's `items` (a Mapping's items() keeps its meaning here)

    def body(self) -> JsonObject:
        return {"kind": self.kind, "items": [e.to_dict() for e in self.entries]}


def listing(kind: str) -> ListResult:
    """`ticket list`'s result for one kind of registry entry (a name in KINDS)."""
    return ListResult(kind, tuple(ListItem(name, text) for name, text in describe(kind).items()))
