"""--init module: a user factory's own weights are kept (built under its fixed seed, so evaluate rebuilds the same
network and the fingerprint check passes), while the default init redraws every masked weight from --seed; a
built-in model, which has no init of its own, is refused."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.runs.build import open_ticket
from ticketcli.specs.run import FACTORY_SEED, DataSpec, ModelPolicy, ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io

FACTORY = """
import torch
from torch import nn


def build_net():
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16, bias=False), nn.ReLU(), nn.Linear(16, 10, bias=False))
    with torch.no_grad():
        net[1].weight.copy_(torch.linspace(-0.3, 0.3, 64 * 16).reshape(16, 64))  # an even ramp: no init draws this
        nn.init.normal_(net[3].weight, std=0.3)  # from the global RNG, which the factory's fixed seed fixes
    return net
"""
QUICK = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--epochs", "2", "--batch-size", "64"]
runner = CliRunner()


@pytest.fixture
def factory(tmp_path, monkeypatch):
    name = f"constnet_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield f"{name}:build_net"
    sys.modules.pop(name, None)


def extract(tmp_path, factory, name, *extra) -> dict:
    out = tmp_path / name
    r = runner.invoke(app, ["extract", "--model", factory, *QUICK, "--out", str(out), "--quiet", "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def rebuilt_weights(path, factory) -> dict[str, torch.Tensor]:
    return open_ticket(path, ReaderSpec(data=DataSpec(), device="cpu", policy=ModelPolicy(model=factory))).weights


def ramp() -> torch.Tensor:
    return torch.linspace(-0.3, 0.3, 64 * 16).reshape(16, 64)


@pytest.mark.slow
def test_module_init_keeps_the_factory_weights_and_the_default_redraws_them(tmp_path, factory):
    extract(tmp_path, factory, "module.safetensors", "--init", "module")
    extract(tmp_path, factory, "default.safetensors")
    kept, drawn = (
        rebuilt_weights(tmp_path / "module.safetensors", factory),
        rebuilt_weights(tmp_path / "default.safetensors", factory),
    )
    assert torch.equal(kept["1.weight"], ramp())
    with torch.random.fork_rng(devices=[]):  # what the factory creates under its fixed seed, called here directly
        torch.manual_seed(FACTORY_SEED)
        module, fn = factory.split(":")
        expected = getattr(importlib.import_module(module), fn)()[3].weight.detach()
    assert torch.equal(kept["3.weight"], expected)
    assert not torch.equal(drawn["1.weight"], ramp()) and not torch.equal(drawn["3.weight"], expected)
    bound = (2.0 / (0.5 * 64)) ** 0.5  # the default scaled-kaiming-uniform: U[-gain/sqrt(k fan_in), ...], k = 1/2
    assert drawn["1.weight"].abs().max() <= bound and drawn["1.weight"].std() > 0.1


@pytest.mark.slow
def test_the_ticket_records_the_factory_init_and_evaluate_reproduces_it(tmp_path, factory):
    summary = extract(tmp_path, factory, "t.safetensors", "--init", "module", "--seed", "3")
    tk = ticket_io.load(tmp_path / "t.safetensors")
    recorded = {"scheme": "module", "factory_seed": FACTORY_SEED, "seed": 3}
    assert tk.init.to_json() == recorded  # no k: none shaped the weights
    r = runner.invoke(app, ["evaluate", str(tmp_path / "t.safetensors"), "--model", factory, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["reproduced"] and doc["metrics"]["test"] == summary["metrics"]["test"]
    r = runner.invoke(app, ["inspect", str(tmp_path / "t.safetensors"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["init"]["scheme"] == "module"


@pytest.mark.slow
def test_module_weights_do_not_depend_on_the_seed(tmp_path, factory):
    """The factory runs under its fixed seed: --seed still draws the split, scores and batch order."""
    extract(tmp_path, factory, "s0.safetensors", "--init", "module", "--seed", "0")
    extract(tmp_path, factory, "s1.safetensors", "--init", "module", "--seed", "1")
    a, b = ticket_io.load(tmp_path / "s0.safetensors"), ticket_io.load(tmp_path / "s1.safetensors")
    assert a.weights_sha256 == b.weights_sha256 and a.data.split_seed != b.data.split_seed


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "mlp:64-16-10"], "--init module keeps the weights a model factory"),
        ([], "built-in model"),  # the default model is the paper's MLP
        (["--model", "{factory}", "--init-k", "2"], "--init-k scales a drawn init"),
    ],
)
def test_module_init_is_refused_where_it_means_nothing(tmp_path, factory, args, needle):
    args = [a.format(factory=factory) for a in args]
    r = runner.invoke(app, ["extract", *QUICK, "--init", "module", "--out", str(tmp_path / "t.safetensors"), *args])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "t.safetensors").exists()
