"""The Python API's own arguments checked as the command line checks its flags: a path, a module, where a dataset is
found, the reader keywords of every call that rebuilds a ticket (reader_spec); its `progress` argument, the command
line's display or the caller's callable; its `log_to` trackers; and what differs between a module and a ticket's
network. Anything else is one UsageError line, never a traceback from deeper down."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from torch import nn

from ticketcli.errors import UsageError
from ticketcli.methods.base import Progress
from ticketcli.report import progress as report_progress
from ticketcli.settings.reader import build_reader_spec
from ticketcli.settings.registry import check_threads
from ticketcli.settings.track import LOG_TO, Destination
from ticketcli.specs.ranges import show
from ticketcli.specs.run import ReaderSpec
from ticketcli.track import base as track


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


def progress_display(
    progress: bool | Progress,
    total: int | None,
    label: str,
    *,
    quiet: bool = False,
    unit: str = "epoch",
    items: bool = False,
) -> AbstractContextManager[Progress | None]:
    """The caller's callable (told each progress record), or the command line's display on stderr (progress=True,
    unless `quiet`), or nothing (progress=False)."""
    if callable(progress):
        return nullcontext(progress)
    return report_progress.display(total, quiet=quiet or not progress, label=label, unit=unit, items=items)


def reader_spec(
    device: str,
    weights: str | Path | None,
    trust_model_code: bool,
    data_dir: str | Path | None,
    threads: int | None,
) -> ReaderSpec:
    """The keywords of every call that rebuilds a ticket (Ticket's, train_weak) as one ReaderSpec, checked as the
    command line checks the same flags (settings.reader.build_reader_spec), each error naming the keyword."""
    check_threads(threads, "threads")  # the keywords in the order they were always checked: threads first
    where = optional_path(data_dir, "data_dir")
    return build_reader_spec(
        weights=optional_path(weights, "weights"),
        trust_model_code=trust_model_code,
        data_dir=where,
        device=device,
        threads=threads,
    )


def parameter_difference(ours: dict[str, list[int]], theirs: dict[str, list[int]]) -> str:
    """What differs between a ticket's parameters and a module's, for a one-line error."""
    missing, extra = [n for n in ours if n not in theirs], [n for n in theirs if n not in ours]
    wrong = [f"{n} {ours[n]} vs {theirs[n]}" for n in ours if n in theirs and ours[n] != theirs[n]]
    parts = (("missing", missing), ("unexpected", extra), ("shapes (ticket vs module)", wrong))
    return "; ".join(
        f"{k}: {', '.join(v[:5])}" + (f" and {len(v) - 5} more" if len(v) > 5 else "") for k, v in parts if v
    )


def optional_text(value: object, what: str, kind: str) -> str | None:
    """None or a text argument (a model spec, a dataset's name); anything else is one UsageError naming `what`."""
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{what} must be {kind}, got {type(value).__name__}")
    return value


def listed(value: object, what: str, sep: str = ",") -> str | None:
    """A sequence argument as the command line's text, which then checks it as it checks the flag (seeds (0, 1) ->
    "0,1", band (0.85, 0.95) -> "0.85-0.95"); text as it is; None: not given."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
    ):
        raise UsageError(f"{what}= must be a list or tuple of numbers (or the command line's text), got {show(value)}")
    return sep.join(str(v) for v in value)


def trackers(log_to: object) -> tuple[Destination, ...]:
    """`log_to=` (a destination, a list of them, or None) checked as `--log-to` is, before the work: its trackers."""
    return track.check(None if log_to is None else LOG_TO.check(log_to, "--log-to"))
