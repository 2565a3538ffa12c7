"""The tickets an API call reads from their files: a path, or a `Ticket` that was loaded or saved. Torch-free, so
that `compare` and `inspect` stay numpy-only: a Ticket is recognised only when its module was imported (no Ticket can
exist otherwise)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ticketcli.errors import UsageError


def saved_path(t: object, what: str, call: str) -> Path:
    """A path argument, or the file of a Ticket that was loaded or saved (`what`: how the error names the argument,
    `call`: the call that reads the file); without importing torch when no Ticket exists."""
    if isinstance(t, (str, os.PathLike)):
        text = os.fspath(t)
        if isinstance(text, str):
            return Path(text)
    module = sys.modules.get("ticketcli.api.ticket")  # not imported: no Ticket exists, and torch stays unimported
    if module is not None and isinstance(t, module.Ticket):
        path = getattr(t, "path", None)
        if path is None:
            raise UsageError(
                f"{what} has no file: {call} reads saved tickets",
                hint=f"save it first (t.save('t.safetensors')), then {call} the file",
            )
        return Path(path)
    raise UsageError(f"{what} must be a path or a saved Ticket, got {type(t).__name__}")
