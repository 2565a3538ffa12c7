"""The check of --threads, which every command that computes takes (extract's setting, settings/run.py)."""

from __future__ import annotations

from ticketcli.settings.run import RUN


def check_threads(value: object, what: str = "--threads") -> int | None:
    """--threads as given (None: not given), checked: a whole number from 1 to 4096."""
    return None if value is None else int(RUN["threads"].check(value, what))
