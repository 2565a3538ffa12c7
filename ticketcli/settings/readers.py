"""Which methods read which options: what their registry entries declare (methods/registry.py), the options a
method reads (what its tickets record), and the one-line refusal of an option the chosen method would ignore, with
the sibling option it reads (methods.registry.SIBLINGS) as the hint."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TypeVar

from ticketcli.errors import UsageError
from ticketcli.methods.registry import METHODS, SIBLINGS, option
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Table, option_flag
from ticketcli.specs.run import MethodSpec

T = TypeVar("T")


def method_reads(name: str, field: str, table: Table = RUN) -> bool:
    """Whether method `name` reads setting `field`: its registry entry names it, or no method's does."""
    return field in METHODS.get(name).read() or not (field in table and table[field].methods)


def method_options(name: str, table: Table = RUN) -> frozenset[str]:
    """The method options (settings only some methods read) that method `name` reads: what its tickets record."""
    return frozenset(f for f in table.method_options() if method_reads(name, f, table))


def read_by(name: str, settings: Mapping[str, T]) -> dict[str, T]:
    """`settings` less the method options that method `name` does not read (setting those would be refused): for
    callers that give several methods the same settings."""
    return {k: v for k, v in settings.items() if method_reads(name, k)}


def check_method_options(method: MethodSpec, given: Collection[str] | None = None, table: Table = RUN) -> None:
    """Refuse an option that `method` would ignore: one of `given` (the settings a user set, by flag or config file),
    or without `given` one that differs from its default (`method.options` may hold any method's)."""
    for field in table.method_options():
        was_set = field in given if given is not None else _value(method, field) != table[field].value
        if was_set and not method_reads(method.name, field, table):
            raise unused_option(field, method.name, table)


def _value(method: MethodSpec, field: str) -> object:
    return getattr(method, field) if hasattr(method, field) else option(method, field)


def unused_option(field: str, name: str, table: Table = RUN) -> UsageError:
    """'--lr applies to augmented, edge-popup, ... only, not rigl', with the sibling option rigl reads as the hint."""
    users = [n for n in METHODS.names() if method_reads(n, field, table)]
    kin = [s for group in SIBLINGS if field in group for s in group if s != field]
    siblings = [option_flag(s) for s in kin if method_reads(name, s, table)]
    hint = f"use {' or '.join(siblings)}" if siblings else f"drop {option_flag(field)}; {name} does not read it"
    return UsageError(f"{option_flag(field)} applies to {', '.join(users) or 'no method'} only, not {name}", hint=hint)
