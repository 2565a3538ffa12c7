"""ticketcli: extract, share and re-evaluate strong lottery tickets."""

__version__ = "0.1.0"
