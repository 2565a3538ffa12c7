"""Sections that a SIGINT or SIGTERM does not split: a signal arriving inside one is held until the section ends.

The handlers of runtime/interrupts.py raise an exception wherever the main thread happens to be, between any two
bytecodes. Most code does not mind: every file is written to a temporary name first and removed by a `finally`.
But there are a few instructions in which a file exists and nothing yet names it for clean-up: between
`tempfile.mkstemp` creating the file and its name being assigned, between an exclusive create and the write that
fills it, between opening a descriptor and handing it to an object that closes it. An exception raised there
leaves a stray temporary file (or an empty placeholder at an output's name) behind. Each such window is wrapped in
`uninterrupted()`; the handler calls `hold(deliver)` first, and a held signal is delivered (its exception raised)
as the outermost section ends, after the clean-up is registered.

A section must be short and must not wait on anything another process controls (a lock, a pipe): the user's
Ctrl-C waits for it. Only the standard library is imported, so every layer can use it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO, cast

_OPEN = [0]  # how many sections the main thread is inside now (they nest)
_HELD: list[Callable[[], None]] = []  # what the handler asked to do, in the order the signals came


def hold(deliver: Callable[[], None]) -> bool:
    """For a signal handler: inside a section, keep `deliver` (which raises the handler's exception) for the end
    of the outermost one and return True; outside any, return False (the handler raises at once)."""
    if _OPEN[0] == 0:
        return False
    _HELD.append(deliver)
    return True


def holding() -> bool:
    """Whether a signal is held now, waiting for the sections to end."""
    return bool(_HELD)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """A section no SIGINT/SIGTERM of ours interrupts part-way: the first one held meanwhile is delivered as the
    outermost section ends (replacing whatever exception the section raised: the run is stopping). In any thread
    but the main one it does nothing: Python runs signal handlers in the main thread alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _OPEN[0] += 1
    try:
        yield
    finally:
        _OPEN[0] -= 1
        if _OPEN[0] == 0 and _HELD:
            deliver = _HELD[0]
            _HELD.clear()
            deliver()


def open_descriptor(path: str | os.PathLike[str], flags: int, mode: str) -> BinaryIO:
    """`os.open(path, flags)` handed to a binary file object (`mode`: "rb", "r+b", ...) in one section: no signal
    can land between the two and leave the descriptor open. OSError from the open is the caller's to translate."""
    assert "b" in mode
    with uninterrupted():
        return cast(BinaryIO, os.fdopen(os.open(path, flags), mode))
