"""The Python API without traps: masks go only onto the weights they were chosen on (`apply_masks` refuses other
weights, `Ticket.apply` puts the ticket's own into a module); the API and the command line accept and refuse the
same options for a user's own architecture; `Ticket.splits` gives the data exactly as evaluation uses it; a ticket
of in-memory data says what it needs and takes it. Public names only (`import ticketcli as tc`), except for the
command line, run in-process through Typer's CliRunner."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import torch
from helpers import in_keywords, load_digits
from torch import nn
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app

QUICK = dict(method="augmented", sparsity=0.5, epochs=1, seed=0, progress=False, device="cpu")
runner = CliRunner()


class UserMLP(nn.Module):
    """A user's module with the built-in mlp:64-16-10's parameter names (layers.0/1) and its own forward."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 16, bias=False), nn.Linear(16, 10, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](torch.relu(self.layers[0](x.reshape(len(x), -1))))


class OwnNet(nn.Module):
    """A user's own architecture (no built-in has its names), with biases and a BatchNorm between its layers."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.BatchNorm1d(12, affine=False), nn.ReLU())
        self.out = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


@pytest.fixture(scope="module")
def ticket() -> tc.Ticket:
    return tc.extract("mlp:64-16-10", "digits", **QUICK)


@pytest.fixture(scope="module")
def own() -> tc.Ticket:
    return tc.extract(OwnNet(), "digits", **QUICK)


def digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    d = load_digits()
    return torch.tensor(d.data, dtype=torch.float32) / 16, torch.tensor(d.target)


def correct(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    with torch.no_grad():
        return int((net(x).argmax(1) == y).sum())


# 1. masks and the weights they belong to


def test_apply_masks_refuses_a_module_whose_weights_are_not_the_tickets(ticket):
    fresh = UserMLP()  # the same parameter names, its own random weights: masking them is not the ticket
    with pytest.raises(tc.UsageError, match="weights are not the ticket's") as caught:
        tc.apply_masks(fresh, ticket.masks)
    assert "ticket.apply(module)" in str(caught.value.hint) and "check_weights=False" in str(caught.value.hint)
    assert not hasattr(fresh.layers[0], "weight_mask")  # refused before anything was put on it
    own_weights = fresh.layers[0].weight.detach().clone()
    tc.apply_masks(fresh, ticket.masks, check_weights=False)  # asked for: the module's own weights, masked
    assert torch.equal(fresh.layers[0].weight, own_weights * ticket.masks["layers.0.weight"])


def test_apply_masks_accepts_a_module_holding_the_tickets_weights(ticket):
    weights = tc.remove_masks(ticket.build("cpu"), bake=False).state_dict()
    mine = UserMLP()
    mine.load_state_dict(weights)
    x = ticket.splits().x_test
    assert torch.equal(tc.apply_masks(mine, ticket.masks)(x), ticket.build("cpu")(x))
    perturbed = UserMLP()
    perturbed.load_state_dict(weights)
    with torch.no_grad():
        perturbed.layers[1].weight[0, 0] += 1e-6  # one weight off: no longer the ticket's
    with pytest.raises(tc.UsageError, match="weights are not the ticket's"):
        tc.apply_masks(perturbed, ticket.masks)


def test_apply_puts_the_tickets_network_into_a_users_module(ticket):
    x = ticket.splits().x_test
    mine = UserMLP()
    assert ticket.apply(mine) is mine
    assert torch.equal(mine(x), ticket.build("cpu")(x))
    assert bool((mine.layers[0].weight[~ticket.masks["layers.0.weight"]] == 0).all())
    assert all(p.requires_grad for p in mine.parameters())  # still the caller's to fine-tune


def test_apply_on_a_users_own_architecture_with_batchnorm(own):
    """The module is also the architecture: a copy is rebuilt from the seed, BatchNorm statistics recomputed."""
    x, y = own.splits().test
    # one thread count for both: BatchNorm statistics are sums, whose last bits move with it (--threads auto
    # chooses from the load at each call)
    mine = own.apply(OwnNet(), threads=1)
    assert torch.equal(mine(x), own.build("cpu", module=OwnNet(), threads=1)(x))
    assert correct(mine, x, y) == own.metrics.test.correct


def test_apply_refuses_another_architecture_and_leaves_it_alone(ticket, own):
    other = OwnNet()
    before = {n: t.clone() for n, t in other.state_dict().items()}
    with pytest.raises(tc.UsageError, match="not the ticket's architecture mlp:64-16-10: missing: layers.0.weight"):
        ticket.apply(other)
    assert all(torch.equal(before[n], t) for n, t in other.state_dict().items())
    narrow = UserMLP()
    narrow.layers[1] = nn.Linear(8, 10, bias=False)
    with pytest.raises(tc.UsageError, match=r"layers.1.weight \[10, 16\] vs \[10, 8\]"):
        ticket.apply(narrow)
    with pytest.raises(tc.TicketFileError, match="no longer matches the ticket"):
        own.apply(UserMLP())  # the module is this ticket's architecture too: checked against its record


# 2. the API and the command line accept and refuse the same options


FACTORY = """
import torch
from torch import nn


class ParityNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 12), nn.ReLU())
        self.out = nn.Linear(12, 10)

    def forward(self, x):
        return self.out(self.body(x))


def build():
    return ParityNet()
"""

OPTION_CASES = {
    "defaults": {},
    "init module": {"init": "module"},
    "init kaiming-normal": {"init": "kaiming-normal"},
    "init signed-kaiming-constant": {"init": "signed-kaiming-constant"},
    "init-k": {"init_k": 2.0},
    "init module with init-k": {"init": "module", "init_k": 2.0},
    "bias": {"bias": True},
    "no bias": {"bias": False},
    "bias with init module": {"bias": True, "init": "module"},
}


def flags(options: dict) -> list[str]:
    out = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else [f"--no-{flag[2:]}"] if v is False else [flag, str(v)]
    return out


@pytest.fixture(scope="module")
def parity(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("parity")
    (d / "parity_net.py").write_text(FACTORY)
    sys.path.insert(0, str(d))
    yield d
    sys.path.remove(str(d))
    sys.modules.pop("parity_net", None)


@pytest.mark.parametrize("case", list(OPTION_CASES))
def test_a_module_and_its_factory_accept_and_refuse_the_same_options(case, parity):
    options = OPTION_CASES[case]
    quick = dict(method="random", sparsity=0.5, seed=0, n_extract=200, n_val=100)
    out = parity / f"{case}.safetensors"
    cli_args = ["extract", "--model", "parity_net:build", "--dataset", "digits", "--quiet", "--force"]
    r = runner.invoke(app, [*cli_args, *flags(quick), *flags(options), "--out", str(out)])
    net = importlib.import_module("parity_net").ParityNet()
    try:
        t = tc.extract(net, "digits", progress=False, device="cpu", **quick, **options)
        api = None
    except tc.UsageError as e:
        api = f"error: {e}" + (f" (hint: {e.hint})" if e.hint else "")
    if api is not None:  # refused: by both, with the same line
        assert r.exit_code == 2, (r.exit_code, r.output, api)
        assert in_keywords(r.stderr.strip()) == api  # the API names keywords where the CLI names flags
        return
    assert r.exit_code == 0, r.output
    cli_ticket = tc.load(out)
    assert t.metadata["init"] == cli_ticket.metadata["init"] and not t.metadata["model"].get("bias")
    if options.get("init") == "module":  # the module's own weights: only a module holding them rebuilds it
        assert t.evaluate(module=net, device="cpu")["reproduced"]
        with pytest.raises(tc.UsageError, match="keeps the weights of the module it was extracted from"):
            t.build("cpu", module=importlib.import_module("parity_net").ParityNet())
    else:  # drawn from the seed: the same network, the same ticket
        assert t.metadata["weights_sha256"] == cli_ticket.metadata["weights_sha256"]
        assert all(torch.equal(m, cli_ticket.masks[n]) for n, m in t.masks.items())


def test_the_cases_cover_acceptance_and_refusal():
    """The parity test above is only worth something if some options are refused and some accepted."""
    refused = {"init module with init-k", "bias", "bias with init module"}
    for case in refused:
        with pytest.raises(tc.UsageError):
            tc.extract(UserMLP(), "digits", method="random", sparsity=0.5, progress=False, **OPTION_CASES[case])
    assert set(OPTION_CASES) - refused


# 3. the ticket's data splits


def test_splits_are_the_data_evaluation_measures(ticket):
    s = ticket.splits()
    net = ticket.build("cpu")
    assert correct(net, *s.test) == ticket.metrics.test.correct
    assert correct(net, *s.test) / len(s.y_test) == ticket.metrics.test.accuracy
    assert correct(net, *s.val) == ticket.metrics.val.correct
    data = ticket.metadata["data"]
    assert (len(s.y_extract), len(s.y_val), s.info["split_seed"]) == (
        data["n_extract"],
        data["n_val"],
        data["split_seed"],
    )
    x = torch.tensor(load_digits().data, dtype=torch.float32).reshape(-1, 1, 8, 8)
    assert not torch.equal(s.x_test[:1], x[:1])  # normalised, as the dataset is, not the raw pixels


# 4. a ticket of in-memory data


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory) -> tuple[Path, tc.Ticket]:
    x, y = digits_tensors()
    t = tc.extract("mlp:64-16-10", (x, y), **QUICK)
    return t.save(tmp_path_factory.mktemp("mem") / "mem.safetensors"), t


def test_the_cli_says_an_in_memory_ticket_is_evaluated_from_python(in_memory):
    path, _ = in_memory
    r = runner.invoke(app, ["evaluate", str(path)])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in r.output
    assert err.startswith(f"error: {path} was extracted from in-memory data") and "evaluate(data=...)" in err


def test_an_in_memory_ticket_takes_its_data_and_names_the_parameter_without_it(in_memory):
    path, t = in_memory
    loaded = tc.load(path)
    for call in (loaded.evaluate, loaded.splits):
        with pytest.raises(tc.UsageError, match=r"in-memory data.*data=") as caught:
            call()
        assert not isinstance(caught.value, tc.TicketFileError)
    x, y = digits_tensors()
    result = loaded.evaluate(data=(x, y), device="cpu")
    assert result["reproduced"] and result.test.correct == t.metrics.test.correct
    s = loaded.splits(data=(x, y))
    assert correct(loaded.build("cpu"), *s.test) == t.metrics.test.correct
