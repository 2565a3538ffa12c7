"""The extraction methods: METHODS (registry.py: each method's name, description, class and options, torch-free),
the Method contract (base.py) and one module per method family, imported when a method is used."""

from ticketcli.methods.registry import METHODS

__all__ = ["METHODS"]
