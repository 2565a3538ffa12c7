"""Shared fixtures: tiny models and data so the suite runs in minutes on 2 cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ticketcli.data import load_splits
from ticketcli.init import init_weights
from ticketcli.models import MaskedNet, build_model, parse_model
from ticketcli.specs import DataSpec, InitSpec, MethodSpec

FASHION_DIRS = ("/usr/share/datasets",)


def fashion_available() -> bool:
    from ticketcli.data import find_idx_dir

    dirs = tuple(d for d in (os.environ.get("TICKET_DATA"), *FASHION_DIRS) if d)
    return find_idx_dir(dirs, ("", "fashion-mnist", "FashionMNIST/raw")) is not None


def require_fashion() -> None:
    """Skip without FashionMNIST, unless TICKET_REQUIRE_FASHION=1 (CI), where its absence is a failure."""
    if fashion_available():
        return
    if os.environ.get("TICKET_REQUIRE_FASHION") == "1":
        pytest.fail("FashionMNIST is required (TICKET_REQUIRE_FASHION=1) but not installed")
    pytest.skip("FashionMNIST not installed (apt-get install dataset-fashion-mnist)")


@pytest.fixture(scope="session")
def digits():
    return load_splits(DataSpec(name="digits", n_extract=600, n_val=200, split_seed=0))


def make_net(spec: str = "mlp:64-32-32-10", seed: int = 0) -> MaskedNet:
    m = parse_model(spec)
    module = build_model(m)
    net = MaskedNet(module, m)
    net.load_weights(init_weights(module, InitSpec(seed=seed)))
    return net


@pytest.fixture
def tiny_net() -> MaskedNet:
    return make_net()


def quick_method(name: str, **kw) -> MethodSpec:
    from ticketcli.resolve import method_reads

    small = dict(imp_rounds=2, synflow_rounds=10, regrow_every=2)  # small enough for 2 epochs of 5 steps
    base = dict(
        name=name, sparsity=0.8, epochs=2, batch_size=128, **{k: v for k, v in small.items() if method_reads(name, k)}
    )
    base.update(kw)
    return MethodSpec(**base)


@pytest.fixture
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user cache or $TICKET_DATA leaking in from the machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("TICKET_DATA", raising=False)
    return tmp_path


torch.set_num_threads(min(2, torch.get_num_threads()))
