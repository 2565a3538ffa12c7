"""Methods registry; every method module is imported here explicitly."""

from ticketcli.methods.base import Method, Progress, param_densities
from ticketcli.methods.registry import METHODS
from ticketcli.methods import random as _random  # noqa: F401  (registers "random")
from ticketcli.methods import scores as _scores  # noqa: F401  (registers "edge-popup", "augmented")

__all__ = ["METHODS", "Method", "Progress", "param_densities"]
