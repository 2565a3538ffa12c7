"""The Python API's own arguments checked as the command line checks its flags: a path, a module, where a dataset
is found. Anything else is one UsageError line, never a traceback from deeper down."""

from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from ticketcli.errors import UsageError


def optional_path(p: str | Path | None, what: str = "path") -> str | None:
    """None, or the path argument as a string (path_arg)."""
    return None if p is None else path_arg(p, what)


def path_arg(p: object, what: str) -> str:
    """A path argument as a string; anything but a str or os.PathLike is one UsageError line, as in the CLI."""
    if not isinstance(p, (str, os.PathLike)):
        raise UsageError(f"{what} must be a path (str or pathlib.Path), got {type(p).__name__}")
    text = os.fspath(p)
    if not isinstance(text, str):
        raise UsageError(f"{what} must be a text path, got {type(text).__name__}")
    return text


def check_module_arg(module: object) -> None:
    """None or a torch.nn.Module (the caller's own architecture)."""
    if module is not None and not isinstance(module, nn.Module):
        raise UsageError(f"module must be a torch.nn.Module, got {type(module).__name__}")
