"""Which ticket a result is about: `TicketHeader` (its path, method record, model spec and seed), derived from the
Ticket once, and `OfTicket`, the attributes it gives the results that carry one (extract, evaluate, train-weak,
compare, inspect's folder rows). Torch-free: `ticket inspect` and `compare` import it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ticketcli.contract.schema import JsonObject
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MethodRecord

HEADER_KEYS = ("ticket", "method", "model", "seed")


@dataclass(frozen=True)
class TicketHeader:
    """The entries every result over one ticket begins with, as the ticket records them."""

    ticket: str  # the path, as given
    method: MethodRecord
    model: str  # the model spec string
    seed: int  # the weights' seed

    @classmethod
    def of(cls, path: str | Path, tk: ticket_io.Ticket) -> TicketHeader:
        """The header of the ticket `tk` read from (or written to) `path`."""
        return cls(ticket=str(path), method=tk.method, model=tk.model.spec, seed=tk.init.seed)

    def to_dict(self, *keys: str) -> JsonObject:
        """The header's document entries named by `keys` (of HEADER_KEYS), in that order; all four by default. A
        document places them where its schema has them (extract: the size of the file after `ticket`)."""
        values = {"ticket": self.ticket, "method": self.method.to_json(), "model": self.model, "seed": self.seed}
        return {k: values[k] for k in keys or HEADER_KEYS}


class OfTicket:
    """A result about one ticket: its `header`, and the header's entries as the result's own attributes."""

    header: TicketHeader

    @property
    def ticket(self) -> str:
        return self.header.ticket

    @property
    def method(self) -> MethodRecord:
        """The ticket's method record (its name at `.name`, a hyper-parameter at `.option(key)`)."""
        return self.header.method

    @property
    def model(self) -> str:
        return self.header.model

    @property
    def seed(self) -> int:
        return self.header.seed
