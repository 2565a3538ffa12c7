"""Typer parameters derived from the settings' declarations (ticketcli/settings/): `option(setting)` is the
annotated type of one flag, and `@declared(table, flags=own)` gives a command one keyword parameter per setting of
the tables, which it takes as `**given`, and the flag of each of its own parameters from `own`'s setting of that
name (command-line-only options it reads as typed parameters). Only positional arguments are written by hand.

The values come back as Typer parsed them; `given_settings` turns them into the settings dict resolve.py merges:
None for what was not given (a switch that is off included), paths as text."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypeVar

import typer

from ticketcli.settings.setting import Setting, Table

F = TypeVar("F", bound=Callable[..., object])
Given = dict[str, Any]  # settings by name, as resolve.merge_settings takes them: None = not given
# the attribute `declared` leaves on a command: every setting it was given, its own flags included, so that the
# generated CLI reference (cli/reference.py) reads each flag's declaration rather than a copy of it
SETTINGS_ATTRIBUTE = "__ticket_settings__"


def choices(names: tuple[str, ...] | list[str]) -> object:
    """A Literal of a registry's names: Typer lists them in --help and refuses any other; the value is the str."""
    return Literal.__getitem__(tuple(names))


def option(s: Setting) -> object:
    """The annotated type of setting `s`'s flag: its type, help (with its default), panel."""
    decls: tuple[str, ...] = ()
    if s.kind == "negatable":
        kind: object = Optional[bool]
        decls = (f"{s.flag}/--no-{s.flag.removeprefix('--')}",)
    elif s.switch:
        kind, decls = bool, (s.flag,)
    elif isinstance(s.kind, tuple):
        kind = Optional[choices(s.kind)]
    elif s.kind is list:  # repeatable: --log-to A --log-to B
        kind = Optional[list[str]]
    else:
        kind = Optional[s.kind]
    if s.flag_name is not None and not decls:
        decls = (s.flag,)
    metavar = s.metavar or ("KIND:WHERE" if s.kind is list else None)  # not Typer's <list[str]>
    info = typer.Option(
        *decls, help=s.help_text(), rich_help_panel=s.panel, show_default=False, metavar=metavar, hidden=s.hidden
    )
    return Annotated[kind, info]


def parameter_default(s: Setting) -> object:
    """What Typer passes when the flag is not given: False for a switch, else None (a setting's default is applied
    when the settings are merged, so that 'not given' stays visible) or a command-line-only option's own default."""
    if s.required:
        return inspect.Parameter.empty
    if s.switch:
        return False
    return None if s.config else s.value


def own_flag(fn: Callable[..., object], p: inspect.Parameter, s: Setting) -> inspect.Parameter:
    """The command's own parameter `p` as the flag of setting `s`; its Python default must be the setting's."""
    expected = parameter_default(s)
    if p.default is not expected and p.default != expected:
        raise ValueError(f"{fn.__name__}'s {p.name} defaults to {p.default!r}, its setting to {expected!r}")
    return p.replace(annotation=option(s))


def declared(*tables: Table, flags: Table | None = None) -> Callable[[F], F]:
    """Give the decorated command one keyword parameter per setting of `tables`, after its own parameters (it
    receives them in `**given`), and each own parameter named in `flags` that setting's flag (every setting of
    `flags` must be one of its parameters)."""
    own_table = Table() if flags is None else flags

    def wrap(fn: F) -> F:
        own = inspect.signature(fn, eval_str=True)
        missing = [n for n in own_table.names() if n not in own.parameters]
        if missing:
            raise ValueError(f"{fn.__name__} has no parameter for its flags {missing}")
        mine = [
            own_flag(fn, p, own_table[p.name]) if p.name in own_table else p
            for p in own.parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        arguments = [p for p in mine if p.default is inspect.Parameter.empty]  # a command's arguments come first
        options = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in mine if p not in arguments]
        every = Table().plus(*tables)  # a setting in two tables is declared twice
        if twice := sorted({p.name for p in mine} & set(every.names())):
            raise ValueError(f"{fn.__name__} declares {twice[0]!r} itself and in a table")
        kind = inspect.Parameter.KEYWORD_ONLY
        settings = [inspect.Parameter(s.name, kind, annotation=option(s), default=parameter_default(s)) for s in every]
        params = [*arguments, *settings, *options]  # in --help, the settings before the command's own options
        fn.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]  # Typer reads it
        setattr(fn, SETTINGS_ATTRIBUTE, every.plus(own_table))
        return fn

    return wrap


def given_settings(table: Table, given: Mapping[str, object]) -> Given:
    """The values of `table`'s settings as resolve.merge_settings takes them: None = not given."""
    out: Given = {}
    for s in table:
        value = given[s.name]
        if s.switch and value is False:
            value = None
        elif s.kind is list and not value:  # a repeatable flag not given: Typer passes None or []
            value = None
        elif s.kind is list and isinstance(value, (list, tuple)):
            value = [str(v) for v in value]
        elif isinstance(value, Path):
            value = str(value)
        out[s.name] = value
    return out
