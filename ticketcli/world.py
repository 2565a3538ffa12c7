"""This process's place in a torchrun job, read from the environment alone (RANK, WORLD_SIZE, LOCAL_RANK).

Kept apart from distributed.py, which imports torch: the command line's edge (exits.py, the torchrun check of the
global callback) asks these questions before anything computes, and must stay fast.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ticketcli.errors import UsageError


@dataclass(frozen=True)
class World:
    """This process's place in the job: rank, number of processes, rank on this node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def active(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def from_environment(env: Mapping[str, str] | None = None) -> World:
    """The World torchrun describes in RANK, WORLD_SIZE and LOCAL_RANK (a single process without them)."""
    if env is None:
        env = os.environ
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        rank, local = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
    except ValueError:
        raise UsageError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (they are set by torchrun)") from None
    if size < 1 or not 0 <= rank < size or local < 0:
        raise UsageError(f"inconsistent torchrun environment: RANK={rank} WORLD_SIZE={size} LOCAL_RANK={local}")
    return World(rank=rank, size=size, local_rank=local)


def quiet_rank() -> bool:
    """True in a torchrun worker other than rank 0: it prints no progress, tables or repeated warnings."""
    try:
        return from_environment().rank != 0
    except UsageError:
        return False
