"""Shared fixtures: tiny models and data so the suite runs in minutes on 2 cores. Shared helpers (make_net, ...)
are in helpers.py: test modules import them from there, never from conftest. Also how the suite shares the cores:
torch's threads per pytest-xdist worker (and in every child process), and which tests run together on one worker,
longest first (CONTRIBUTING.md, "Tests")."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ticketcli.models.masked import MaskedNet

# torch, ticketcli and helpers (which imports both) are imported where used, not here: pytest-xdist's controller
# loads this file before it starts the workers and runs no test itself, so each second of import here would be a
# second of the run with one core idle.

# A CI runner may start the suite with SIGINT ignored (any background job of a non-interactive shell is), and an
# ignored signal stays ignored in every child: the tests that interrupt a `ticket` child with SIGINT would then
# wait for a run that never stops. A Python handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def digits():
    from ticketcli.data.datasets import load_splits
    from ticketcli.specs.run import DataSpec

    return load_splits(DataSpec(name="digits", n_extract=600, n_val=200, split_seed=0))


@pytest.fixture
def tiny_net() -> MaskedNet:
    from helpers import make_net

    return make_net()


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user cache or $TICKET_DATA leaking in from the machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TICKET_DATA", raising=False)
    return tmp_path


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The name of a user's model module (helpers.USER_NET) importable from tmp_path, forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    from helpers import write_user_module

    name = f"usernet_{tmp_path.name.replace('-', '_')}"
    write_user_module(tmp_path, name)
    yield name
    sys.modules.pop(name, None)


def _threads_per_worker() -> int:
    """Torch's intra-op threads for this process: the cores shared out among pytest-xdist's workers (one each when
    there are as many workers as cores; two at most, as before xdist, on a machine with cores to spare)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, min(2, cores // max(1, workers)))


# Two workers each running torch on every core would oversubscribe them and run slower than one: each worker
# computes with its share. Child processes (`python -m ticketcli`, torchrun ranks, sweep-k's pool) start with the
# same share through OpenMP's and MKL's variables, which torch reads at start-up. Tests of --threads set their own.
THREADS = _threads_per_worker()
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = str(THREADS)


def pytest_configure(config: pytest.Config) -> None:
    """Torch's threads in a process that runs tests: a worker, or the one process without pytest-xdist (`-n0`).
    The controller of workers runs none and never imports torch."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        import torch

        torch.set_num_threads(THREADS)


# How the suite shares the workers (pytest-xdist, --dist loadgroup in pyproject.toml). Each test module is one
# group, run whole on one worker: its module-scoped fixtures (an extracted ticket, a sweep, torchrun launches) are
# built once, not once per worker, and its tests keep their order. The docs' blocks run file by file in one child
# per file, on the first block's test (tests/test_docs_run.py): each docs file is a group of its own, so that the
# README (the longest group) runs once, on one worker, while the other works through the rest. A docs file's run
# takes minutes on a loaded machine, far past the per-test timeout: its blocks get the time of all its commands.
DOCS_TEST = "test_docs_run.py::test_doc_block_runs["
DOCS_TIMEOUT = 1800


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests (above), and hand the groups out longest first: a long group started last would keep one
    worker busy while the other idles. A group's length is guessed from its slow tests, the docs first."""
    for item in items:
        if DOCS_TEST in item.nodeid:
            doc = item.nodeid.split(DOCS_TEST, 1)[1].rsplit(":", 1)[0]
            item.add_marker(pytest.mark.xdist_group(f"docs-{doc}"), append=False)
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.timeout(DOCS_TIMEOUT))
        elif item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        group = _group(item)
        first.setdefault(group, i)
        slow[group] = slow.get(group, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda it: (not _group(it).startswith("docs-"), -slow[_group(it)], first[_group(it)]))  # stable


def _group(item: pytest.Item) -> str:
    """The name of the item's xdist_group (every item has one after the hook's first loop)."""
    mark = item.get_closest_marker("xdist_group")
    assert mark is not None
    return str(mark.args[0] if mark.args else mark.kwargs["name"])
