"""The methods registry (kept apart from __init__ so method modules can import it)."""

from ticketcli.registry import Registry

METHODS: Registry = Registry("method")
