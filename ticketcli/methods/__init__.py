"""Methods registry; every method module is imported here explicitly."""

from ticketcli.methods import iterated as _iterated  # noqa: F401  (registers "iterated")
from ticketcli.methods import movement as _movement  # noqa: F401  (registers "movement")
from ticketcli.methods import random as _random  # noqa: F401  (registers "random")
from ticketcli.methods import saliency as _saliency  # noqa: F401  (registers "snip", "grasp", "synflow")
from ticketcli.methods import scores as _scores  # noqa: F401  (registers "edge-popup", "augmented")
from ticketcli.methods import sparse as _sparse  # noqa: F401  (registers "imp", "set", "rigl")
from ticketcli.methods.base import ExtractResult, Method, Progress
from ticketcli.methods.registry import METHODS

__all__ = ["METHODS", "ExtractResult", "Method", "Progress"]
