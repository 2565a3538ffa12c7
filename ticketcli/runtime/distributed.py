"""Data parallelism under torchrun, on torch.distributed: gloo on the CPU, NCCL on CUDA.

    torchrun --standalone --nproc-per-node 2 -m ticketcli extract ...

Every rank builds the same network, scores and batch order from the seed (nothing random is drawn per rank).
Each optimisation step takes the global minibatch the single-process run would take, gives every rank one
contiguous shard of it, and DistributedDataParallel all-reduces the gradients of the trained tensors (scores, or
a weak ticket's weights). Each rank backpropagates sum(loss on its shard) * world_size / global batch, and DDP
divides the all-reduced gradient by world_size, so the gradient is the single-process mean over the global batch
up to floating-point reduction order. Every rank then applies the same Adam step to the same gradient, so
scores and masks stay identical on all ranks; `check_identical` verifies that once per epoch and on the final
masks. Only rank 0 writes files and prints.

Outside torchrun (WORLD_SIZE unset or 1) `world()` is a single process and everything here is a no-op.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import hashlib
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ticketcli.errors import RunFailed, UsageError

# defined torch-free in world.py (the command line asks them before importing torch); re-exported here
from ticketcli.runtime.world import RENDEZVOUS_TIMEOUT_S, UNSET, note_joined, rendezvous_address
from ticketcli.runtime.world import World as World
from ticketcli.runtime.world import from_environment as from_environment

if TYPE_CHECKING:  # torch.distributed re-exports Store without naming it public; its home module does
    from torch.distributed.distributed_c10d import Store

_WORLD = World()


def world() -> World:
    return _WORLD


@contextmanager
def joined(
    resolve: Callable[[], torch.device], timeout_s: float = 1800.0, rendezvous_s: float = RENDEZVOUS_TIMEOUT_S
) -> Iterator[World]:
    """Join torchrun's process group for the duration (a no-op single process outside torchrun).

    The environment is validated first (world.py). The processes meet within `rendezvous_s` seconds (else one
    UsageError line: WORLD_SIZE left in a shell must not block for half an hour), and a SIGINT/SIGTERM ends the
    wait at once; `timeout_s` bounds each collective afterwards. `resolve` picks this rank's device once the rank
    is known (cuda:LOCAL_RANK for cuda); the backend follows: NCCL for CUDA, gloo for the CPU. MPS has no
    distributed backend."""
    global _WORLD
    w = from_environment()
    if not w.active:
        yield w
        return
    addr, port = rendezvous_address()
    _WORLD = w
    try:
        device = resolve()
        if device.type == "mps":
            raise UsageError("mps has no torch.distributed backend; run without torchrun")
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        store = _meet(w, addr, port, rendezvous_s)
        dist.init_process_group(
            backend, store=store, rank=w.rank, world_size=w.size, timeout=datetime.timedelta(seconds=timeout_s)
        )
        note_joined()
        _WORLD = World(rank=dist.get_rank(), size=dist.get_world_size(), local_rank=w.local_rank, backend=backend)
        try:
            yield _WORLD
        finally:
            dist.destroy_process_group()
    finally:
        _WORLD = World()


def _meet(w: World, addr: str, port: int, seconds: float) -> Store:
    """torch's env:// rendezvous and a barrier of every rank, bounded by `seconds` as a whole, run in a helper
    thread: the main thread waits in short slices, so the signal handlers of interrupts.stop_on_signals run
    (torch's own wait would defer them until its timeout), and gives up at the deadline whatever the helper is
    stuck in (a name lookup, or torch's store handshake with something at MASTER_PORT that never answers, which
    torch's own timeout does not cover). A process that is not the store's host first waits for the store to
    listen, with plain sockets; what torch's C++ store logs meanwhile (its retries, a failed handshake with
    something that is not a store) is dropped."""
    # imported from their home modules (torch.distributed re-exports them without naming them public); loaded by
    # now, as torch.distributed imports them when it is available
    from torch.distributed.distributed_c10d import Store
    from torch.distributed.rendezvous import rendezvous

    deadline = time.monotonic() + seconds
    result: dict[str, object] = {}

    def attempt() -> None:
        try:
            hosts_store = w.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            if hosts_store:
                _resolve(addr, port)  # the store's own client connects to MASTER_ADDR: a name that is none fails now
            else:
                _wait_for_listener(addr, port, deadline)
            left = datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))
            store = next(rendezvous("env://", timeout=left))[0]
            _all_arrived(store, w.size, deadline)
            result["store"] = store
        except BaseException as e:  # handed to the main thread, which raises it as one line
            result["error"] = e

    helper = threading.Thread(target=attempt, name="ticket-rendezvous", daemon=True)
    try:
        with _native_logs_dropped():
            helper.start()
            # a little grace past the deadline lets torch's own timeout, which says more, win when it fires
            while helper.is_alive() and time.monotonic() < deadline + _GRACE_S:
                helper.join(0.05)
    finally:
        if helper.is_alive():
            _LEFT_BEHIND.append(helper)
    if "store" in result:
        store = result["store"]
        assert isinstance(store, Store)
        return store
    e = result.get("error", TimeoutError())  # none yet: the helper is still stuck, left behind as a daemon
    where = f"the torchrun job at {_variables(w, addr, port)}"
    hint = f"start every process of the job (torchrun does), raise --rendezvous-timeout, or {UNSET}"
    if isinstance(e, (TimeoutError, dist.DistStoreError, dist.DistNetworkError)) or "timed out" in str(e).lower():
        raise UsageError(f"no one else joined {where} within {seconds:g} s", hint=hint)
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    raise UsageError(f"cannot join {where}: {first}", hint=hint)


def left_behind() -> bool:
    """Whether a rendezvous was given up on while its helper thread is still inside torch's store code. When that
    code returns during the interpreter's teardown, the thread cannot take the GIL back and the C++ runtime aborts
    the process (SIGABRT, exit 134, after the error line): the command line therefore ends without the teardown
    once its outcome is final (cli/entry.py)."""
    return any(t.is_alive() for t in _LEFT_BEHIND)


@contextmanager
def _native_logs_dropped() -> Iterator[None]:
    """File descriptor 2 to /dev/null for the duration. Torch's C++ store logs every failed connection and every
    failed handshake there, with a C++ stack each, whatever sits at MASTER_ADDR:MASTER_PORT (another machine that
    is gone, a web server or proxy answering in another protocol); the one line this module raises says what
    went wrong and what to do. Nothing of ours writes in the window: the main thread only waits, and a signal's
    message is written after the wait has unwound."""
    for stream in (sys.stdout, sys.stderr):  # what Python buffered before goes where it was meant to
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


_LEFT_BEHIND: list[threading.Thread] = []
_GRACE_S = 2.0
# the barrier's counter, one per torchrun restart (torchrun's agent store may outlive a restart); torch's process
# group keeps its own keys under its own prefix
_ARRIVED = "ticket/arrived/"


def _variables(w: World, addr: str, port: int) -> str:
    """The torchrun variables this process read, by name, so that a stale shell's can be recognised and unset."""
    ranks = f"WORLD_SIZE={w.size}, this is RANK={w.rank}, LOCAL_RANK={w.local_rank}"
    return f"MASTER_ADDR={addr} MASTER_PORT={port} ({ranks})"


def _all_arrived(store: Store, size: int, deadline: float) -> None:
    """Wait until all `size` ranks have reached the store, by the deadline (TimeoutError after it). Without this a
    rank other than 0 that found the store would wait for the missing ranks inside init_process_group, under the
    collectives' 30-minute timeout instead of the rendezvous's."""
    store.set_timeout(datetime.timedelta(seconds=max(1.0, deadline - time.monotonic())))
    key = _ARRIVED + os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    arrived = store.add(key, 1)
    while arrived < size:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{arrived} of {size} processes joined")
        time.sleep(0.05)
        arrived = store.add(key, 0)


def _resolve(addr: str, port: int) -> str:
    """The host part of MASTER_ADDR (an IPv6 address loses its brackets), once it is known to resolve (OSError,
    such as "Name or service not known", otherwise: now, not at the deadline)."""
    host = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
    socket.getaddrinfo(host, port)
    return host


def _wait_for_listener(addr: str, port: int, deadline: float) -> None:
    """Return once something listens at addr:port; TimeoutError at the deadline, OSError if addr never resolves."""
    host = _resolve(addr, port)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"nothing listens at {addr}:{port}")
        try:
            socket.create_connection((host, port), timeout=min(1.0, left)).close()
            return
        except OSError:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if _WORLD.backend == "nccl" else torch.device("cpu")


def shard(batch: torch.Tensor) -> torch.Tensor:
    """This rank's contiguous share of a global minibatch (sizes differ by at most one; may be empty)."""
    return batch.tensor_split(_WORLD.size)[_WORLD.rank] if _WORLD.active else batch


class _Replica(nn.Module):
    """The trained tensors as one module, so DDP can hook their gradients; forward is the trainer's own."""

    def __init__(self, params: list[nn.Parameter], forward: Callable[..., torch.Tensor]):
        super().__init__()
        self.params = nn.ParameterList(params)
        self.call = forward

    def forward(self, *args: Any) -> torch.Tensor:
        return self.call(*args)


def replicate(params: list[nn.Parameter], forward: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`forward`, with the gradients of `params` all-reduced across ranks by DistributedDataParallel when running
    under torchrun (unchanged otherwise). `forward` must compute its output from exactly these Parameter objects."""
    if not _WORLD.active:
        return forward
    from torch.nn.parallel import DistributedDataParallel

    device = params[0].device
    module = _Replica(params, forward)
    replica = DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)
    _REPLICAS.add(replica)
    return replica


def _release_replicas() -> None:
    """At exit, free the replicas that are no longer reachable, while the interpreter is still whole. A replica
    outlives the trainer that dropped it until the cycle collector runs (DistributedDataParallel sits in a
    reference cycle, through a frame of its own __init__, in torch 2.14), and what it holds of the gloo process
    group, freed during the interpreter's finalization, aborts the process now and then after a run that did
    everything right ("terminate called without an active exception", SIGABRT: from 1 in 25 to 1 in 4
    two-process runs on 2 cores, depending on what the ranks did). A replica that something still refers to at
    exit is its holder's to release."""
    if _REPLICAS:
        gc.collect()


# every DistributedDataParallel made by `replicate`, weakly: whether any is left for _release_replicas to free
_REPLICAS: weakref.WeakSet[nn.Module] = weakref.WeakSet()
atexit.register(_release_replicas)  # registered after the entry point's own handlers, so it runs before them


def cross_entropy_step(
    forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> tuple[torch.Tensor, float, int]:
    """Forward this rank's shard of the global batch (x, y). Returns the tensor to backpropagate, the global mean
    cross-entropy and the global number of correct predictions (identical on every rank)."""
    if not _WORLD.active:
        logits = forward(x)
        loss = F.cross_entropy(logits, y)
        return loss, float(loss.detach()), int((logits.argmax(1) == y).sum())
    xs, ys = shard(x), shard(y)
    logits = forward(xs)
    local = F.cross_entropy(logits, ys, reduction="sum")
    stats = torch.stack([local.detach().double(), (logits.argmax(1) == ys).sum().double()]).to(_comm_device())
    dist.all_reduce(stats)
    n = y.numel()
    return local * (_WORLD.size / n), float(stats[0]) / n, int(stats[1])


def check_identical(tensors: dict[str, torch.Tensor], what: str) -> None:
    """Raise RunFailed unless every rank holds the same values (a hash of the bytes, compared on all ranks)."""
    if not _WORLD.active:
        return
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().cpu().contiguous().numpy().tobytes())
    mine = torch.tensor(
        [int.from_bytes(h.digest()[:8], "little", signed=True)], dtype=torch.int64, device=_comm_device()
    )
    everyone = [torch.empty_like(mine) for _ in range(_WORLD.size)]
    dist.all_gather(everyone, mine)
    differ = [r for r, t in enumerate(everyone) if int(t) != int(everyone[0])]
    if differ:
        raise RunFailed(
            f"{what} differ between ranks (ranks {', '.join(map(str, differ))} disagree with rank 0)",
            hint="a rank diverged; this is a bug, please report it with the command",
        )
