"""A text ticket's data (--dataset text, data/lm.py): where its text is found again (the file it recorded, the
fortunes files, or --text pointing at the same text elsewhere), and the refusal of another text, in one line that
names the difference. Its blocks are its model's context long."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ticketcli.data.datasets import Splits
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.specs.run import DataSpec
from ticketcli.ticketfile import ticket as ticket_io


def recorded_text(tk: ticket_io.Ticket, path: Path) -> dict[str, Any]:
    """The ticket's data.text record (data/lm.py's text_record), checked for what a reader uses."""
    rec = tk.data.stored.get("text")
    if not isinstance(rec, dict) or not isinstance(rec.get("context"), int) or not isinstance(rec.get("sha256"), str):
        raise TicketFileError(f"{path}: its text dataset records no text (data.text with sha256 and context)")
    sources = rec.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise TicketFileError(f"{path}: data.text.sources must be a list of file names")
    return rec


def text_location(tk: ticket_io.Ticket, path: Path, data: DataSpec) -> DataSpec:
    """The data spec that reads the ticket's text again: the reader's --text, else the one file the ticket was
    extracted from (a --text run), else the fortunes files in the search dirs; blocks of the recorded context."""
    rec = recorded_text(tk, path)
    text = data.text
    if text is None and len(rec["sources"]) == 1:
        text = rec["sources"][0]
    return replace(data, text=text, context=rec["context"])


def same_text(tk: ticket_io.Ticket, path: Path, splits: Splits, data: DataSpec) -> None:
    """Refuse a text other than the ticket's, naming what differs (its length, its characters, or its digest)."""
    rec, got = recorded_text(tk, path), splits.info["text"]
    if got["sha256"] == rec["sha256"]:
        return
    where = data.text or "the fortunes files"
    differs = next(
        (
            f"{got[k]} {what} where the ticket's has {rec[k]}"
            for k, what in (("characters", "characters"), ("vocab", "distinct characters"))
            if got[k] != rec.get(k)
        ),
        f"sha256 {got['sha256'][:12]} where the ticket's is {str(rec['sha256'])[:12]}",
    )
    raise UsageError(
        f"{where} is not the text {path} was extracted from: it has {differs}",
        hint="pass --text FILE naming the same text, wherever it is now",
    )
