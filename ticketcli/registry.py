"""The one registry idiom: a dict, a `register(name)` decorator that raises on duplicates, sorted names; and
`load`, which imports what a registered entry names ("module:attribute") only when it is used."""

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ticketcli.errors import UsageError

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> object; used for methods, models, datasets, init schemes, activations and losses."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"duplicate {self.kind} {name!r}")
            self._items[name] = obj
            return obj

        return deco

    def names(self) -> list[str]:
        return sorted(self._items)

    def registered(self) -> list[T]:
        """The objects in the order they were registered."""
        return list(self._items.values())

    def get(self, name: str) -> T:
        if name not in self._items:
            raise UsageError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._items[name]

    def __contains__(self, name: str) -> bool:
        return name in self._items


def load(ref: str) -> Any:
    """The attribute a "package.module:attribute" reference names, its module imported now (a registry entry's
    implementation, which may import torch, is loaded only when the entry is used)."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)
