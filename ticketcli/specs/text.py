"""A text corpus's spec (TextSpec): the plain UTF-8 text a character-level model trains on, torch-free like every
spec; data/text.py reads it."""

from __future__ import annotations

from dataclasses import dataclass

from ticketcli.contract.schema import JsonObject


@dataclass(frozen=True)
class TextSpec:
    path: str | None = None  # --text FILE; None: the fortunes files, found in search_dirs
    search_dirs: tuple[str, ...] = ()  # data_search_dirs(): --data-dir, $TICKET_DATA, the cache, system dirs
    val_fraction: float = 0.1  # share of blocks held out for validation (at least one block)

    def to_dict(self) -> JsonObject:
        return {"path": self.path, "val_fraction": self.val_fraction}
