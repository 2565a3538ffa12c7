"""The methods registry (kept apart from __init__ so method modules can import it)."""

from ticketcli.methods.base import Method
from ticketcli.registry import Registry

METHODS: Registry[type[Method]] = Registry("method")
