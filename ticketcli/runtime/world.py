"""This process's place in a torchrun job, read from the environment alone (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), and validated before anything initialises: the variables may be left
over in a shell, so they are input like any other.

Kept apart from distributed.py, which imports torch: the command line's edge (exits.py, the torchrun check of the
global callback) asks these questions before anything computes, and must stay fast.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ticketcli.errors import UsageError

MAX_WORLD_SIZE = 1024  # processes in one job; WORLD_SIZE=1000000000 is a typo, not a cluster
RENDEZVOUS_TIMEOUT_S = 30.0  # default --rendezvous-timeout: how long a process waits for the others to join
MAX_RENDEZVOUS_TIMEOUT_S = 86400.0
_NUMBER = re.compile(r"[0-9]{1,10}")  # ASCII digits only: int() would also take " 2", "+2", "2_0" and "٢"
_HOST = re.compile(r"[A-Za-z0-9._:%\[\]-]{1,253}")  # a host name, IPv4 or (bracketed) IPv6 address
_UNSET = "unset WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT"
UNSET = f"{_UNSET} to run one process"  # what a hint says of variables an earlier job may have left in a shell
_HINT = f"torchrun sets these; to run one process, {_UNSET}"


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


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:40] + "...")


def _number(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    if not _NUMBER.fullmatch(raw) or not low <= int(raw) <= high:
        raise UsageError(f"torchrun environment: {name}={_shown(raw)} is not an integer in [{low}, {high}]", _HINT)
    return int(raw)


TORCHRUN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def variables_set(env: Mapping[str, str] = os.environ) -> str:
    """The torchrun variables set in `env`, as NAME=value (a long or odd value shortened and quoted), so that a line
    refusing a command under them lets a stale shell's be recognised."""
    shown = [f"{n}={v if _NUMBER.fullmatch(v) else _shown(v)}" for n in TORCHRUN_VARIABLES if (v := env.get(n))]
    return " ".join(shown)


def from_environment(env: Mapping[str, str] = os.environ) -> World:
    """The World torchrun describes in RANK, WORLD_SIZE and LOCAL_RANK (a single process without them): integers
    of ASCII digits, 1 <= WORLD_SIZE <= MAX_WORLD_SIZE, 0 <= RANK < WORLD_SIZE, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE
    <= WORLD_SIZE; anything else is one UsageError line."""
    size = _number(env, "WORLD_SIZE", 1, 1, MAX_WORLD_SIZE)
    rank = _number(env, "RANK", 0, 0, 10**10)
    local_size = _number(env, "LOCAL_WORLD_SIZE", size, 1, 10**10)
    local = _number(env, "LOCAL_RANK", 0, 0, 10**10)
    if not (rank < size and local < local_size <= size):
        raise UsageError(
            f"inconsistent torchrun environment: RANK={rank} WORLD_SIZE={size} LOCAL_RANK={local}"
            + (f" LOCAL_WORLD_SIZE={local_size}" if "LOCAL_WORLD_SIZE" in env else "")
            + " (needs RANK < WORLD_SIZE and LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE)",
            _HINT,
        )
    return World(rank=rank, size=size, local_rank=local)


def rendezvous_address(env: Mapping[str, str] = os.environ) -> tuple[str, int]:
    """Where the job's processes meet (MASTER_ADDR, MASTER_PORT), checked before anything connects."""
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise UsageError(f"torchrun environment: WORLD_SIZE > 1 but {' and '.join(missing)} not set", _HINT)
    addr = env["MASTER_ADDR"]
    if not _HOST.fullmatch(addr):
        raise UsageError(f"torchrun environment: MASTER_ADDR={_shown(addr)} is not a host name or address", _HINT)
    return addr, _number(env, "MASTER_PORT", 0, 1, 65535)


def check_rendezvous_timeout(seconds: float | None) -> float:
    """--rendezvous-timeout: a number of seconds in (0, MAX_RENDEZVOUS_TIMEOUT_S]; None is the default."""
    if seconds is None:
        return RENDEZVOUS_TIMEOUT_S
    if not 0 < seconds <= MAX_RENDEZVOUS_TIMEOUT_S:  # NaN fails this too
        raise UsageError(f"--rendezvous-timeout must be in (0, {MAX_RENDEZVOUS_TIMEOUT_S:g}] seconds, got {seconds}")
    return seconds


_JOINED: list[bool] = []  # set by distributed.joined once every process of the job has met


def note_joined() -> None:
    """Record that this process met the job's other processes, rank 0 among them."""
    _JOINED[:] = [True]


def rank_zero_speaks(env: Mapping[str, str] = os.environ) -> bool:
    """Whether rank 0 of this job is known to exist and to report the errors every rank meets alike: the processes
    have met (distributed.joined), or torchrun's agent started this one (TORCHELASTIC_RUN_ID) along with rank 0.
    Otherwise (WORLD_SIZE=2 RANK=1 left in a shell) a rank that kept quiet would fail in silence."""
    return bool(_JOINED) or bool(env.get("TORCHELASTIC_RUN_ID"))


def own_rank() -> int:
    """This process's RANK (0 outside torchrun, and when the environment is invalid: that error must be seen)."""
    try:
        return from_environment().rank
    except UsageError:
        return 0


def quiet_rank() -> bool:
    """True in a torchrun worker other than rank 0 of a job whose rank 0 speaks: it prints no progress, tables or
    repeated warnings."""
    return own_rank() != 0 and rank_zero_speaks()
