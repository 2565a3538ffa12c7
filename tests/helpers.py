"""Helpers shared by the tests (`from helpers import make_net`): tiny networks, quick method settings, and the
FashionMNIST check. Fixtures live in conftest.py; a test module never imports conftest."""

from __future__ import annotations

import os

import pytest

from ticketcli.data.datasets import find_idx_dir
from ticketcli.methods import METHODS
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.settings.resolve import method_reads, read_by
from ticketcli.settings.run import METHOD_OPTIONS
from ticketcli.settings.setting import option_flag
from ticketcli.specs.run import InitSpec, MethodSpec

FASHION_DIRS = ("/usr/share/datasets",)


def fashion_available() -> bool:
    """Whether FashionMNIST's IDX files are in $TICKET_DATA or the system copy."""
    dirs = tuple(d for d in (os.environ.get("TICKET_DATA"), *FASHION_DIRS) if d)
    return find_idx_dir(dirs, ("", "fashion-mnist", "FashionMNIST/raw")) is not None


def require_fashion() -> None:
    """Skip without FashionMNIST, unless TICKET_REQUIRE_FASHION=1 (CI), where its absence is a failure."""
    if fashion_available():
        return
    if os.environ.get("TICKET_REQUIRE_FASHION") == "1":
        pytest.fail("FashionMNIST is required (TICKET_REQUIRE_FASHION=1) but not installed")
    pytest.skip("FashionMNIST not installed (apt-get install dataset-fashion-mnist)")


def make_net(spec: str = "mlp:64-32-32-10", seed: int = 0) -> MaskedNet:
    """A MaskedNet of `spec` with its weights drawn from `seed`."""
    m = parse_model(spec)
    module = build_model(m)
    net = MaskedNet(module, m)
    net.load_weights(init_weights(module, InitSpec(seed=seed)))
    return net


def quick_method(name: str, **kw) -> MethodSpec:
    """A MethodSpec small enough for a test (2 epochs), with `kw` overriding; of the small settings only those the
    method reads (the others would be refused)."""
    small = dict(epochs=2, batch_size=128, imp_rounds=2, synflow_rounds=10, regrow_every=2)  # 2 epochs of 5 steps
    base = dict(name=name, sparsity=0.8, **{k: v for k, v in small.items() if method_reads(name, k)})
    base.update(kw)
    return MethodSpec(**base)


def flags_for(name: str, args: list[str]) -> list[str]:
    """Command-line `args` less each `--option VALUE` pair of a method option that method `name` does not read."""
    if name not in METHODS:  # an unknown method, for a test of its refusal
        return list(args)
    unread = {option_flag(o) for o in METHOD_OPTIONS if not method_reads(name, o)}
    out: list[str] = []
    rest = iter(args)
    for a in rest:
        if a in unread:
            next(rest, None)  # its value goes too
        else:
            out.append(a)
    return out


def for_method(name: str, settings: dict) -> dict:
    """`settings` without the method options that method `name` does not read (setting those is refused)."""
    return read_by(name, settings)
