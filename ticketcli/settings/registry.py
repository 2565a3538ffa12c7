"""The check of --threads, which every command that computes takes (extract's setting, settings/run.py)."""

from __future__ import annotations

from ticketcli.settings.run import RUN


def check_threads(value: object, what: str = "--threads") -> int | None:
    """--threads as given, checked: a whole number from 1 to 4096, or None for auto (or not given: the default)."""
    checked = RUN["threads"].check(value, what)
    return None if checked is None else int(checked)
