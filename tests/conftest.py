"""Shared fixtures: tiny models and data so the suite runs in minutes on 2 cores. Shared helpers (make_net, ...)
are in helpers.py: test modules import them from there, never from conftest."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import torch
from helpers import make_net, write_user_module

from ticketcli.data.datasets import load_splits
from ticketcli.models.masked import MaskedNet
from ticketcli.specs.run import DataSpec

# A CI runner may start the suite with SIGINT ignored (any background job of a non-interactive shell is), and an
# ignored signal stays ignored in every child: the tests that interrupt a `ticket` child with SIGINT would then
# wait for a run that never stops. A Python handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def digits():
    return load_splits(DataSpec(name="digits", n_extract=600, n_val=200, split_seed=0))


@pytest.fixture
def tiny_net() -> MaskedNet:
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
    name = f"usernet_{tmp_path.name.replace('-', '_')}"
    write_user_module(tmp_path, name)
    yield name
    sys.modules.pop(name, None)


torch.set_num_threads(min(2, torch.get_num_threads()))
