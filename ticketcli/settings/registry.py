"""Every setting's range by name, across commands: flags, config keys and API keywords of the same name are checked
against the same range (the manual's "Config files and value ranges", docs/guide/extract.md, lists them)."""

from __future__ import annotations

from typing import Any

from ticketcli.settings.ranges import Range
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Table, option_flag
from ticketcli.settings.sweep import OWN
from ticketcli.settings.weak import WEAK


def ranges(*tables: Table) -> dict[str, Range]:
    """Name -> range over several commands' tables; a name two commands share must have one range."""
    out: dict[str, Range] = {}
    for table in tables:
        for s in table:
            if s.range is None:
                continue
            if out.setdefault(s.name, s.range) != s.range:
                raise ValueError(f"setting {s.name!r} has two ranges: {out[s.name]} and {s.range}")
    return out


RANGES: dict[str, Range] = ranges(RUN, WEAK, OWN)


def check_setting(key: str, value: Any, what: str | None = None) -> Any:
    """`value` checked against RANGES[key] and normalised; `what` names it in the error (default: its flag)."""
    return RANGES[key].check(value, what or option_flag(key))


def check_threads(value: object, what: str = "--threads") -> int | None:
    """--threads as given (None: not given), checked: a whole number from 1 to 4096 (specs.RANGES)."""
    return None if value is None else int(check_setting("threads", value, what))
