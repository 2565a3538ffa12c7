"""Masks put on ordinary modules (`tc.apply_masks`, `Ticket.build`) behave as the ticket: the same logits as the
network `ticket evaluate` measures, on every built-in model; they survive state_dict, torch.save and hooks; fine-
tuning trains the original weights and leaves masked entries at zero; a `prune` export loads into the built-in
network. Only public names (`import ticketcli as tc`) are used here."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest
import torch
import warm
from helpers import load_digits
from torch import nn

import ticketcli as tc

REPO = Path(__file__).resolve().parent.parent
QUICK = dict(method="augmented", sparsity=0.5, epochs=2, seed=0, progress=False, device="cpu")


class UserMLP(nn.Module):
    """A module a user writes, with the built-in mlp:64-16-10's parameter names (layers.0/1) and its own forward."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 16, bias=False), nn.Linear(16, 10, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](torch.relu(self.layers[0](x.reshape(len(x), -1))))


@pytest.fixture(scope="module")
def ticket() -> tc.Ticket:
    return tc.extract("mlp:64-16-10", "digits", **QUICK)


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return torch.tensor(load_digits().data[:200], dtype=torch.float32).reshape(-1, 1, 8, 8) / 16


def init_weights(ticket: tc.Ticket) -> dict[str, torch.Tensor]:
    """The ticket's frozen initial weights, read off the built network with its masks taken off."""
    return tc.remove_masks(ticket.build("cpu"), bake=False).state_dict()


def test_apply_masks_on_a_users_module_gives_the_logits_of_build(ticket, x):
    mine = UserMLP()
    mine.load_state_dict(init_weights(ticket))
    dense = mine(x)
    tc.apply_masks(mine, ticket.masks)
    built = ticket.build("cpu")
    assert torch.equal(mine(x), built(x))
    assert not torch.equal(mine(x), dense)  # the masks do change the network
    assert bool((mine.layers[0].weight[~ticket.masks["layers.0.weight"]] == 0).all())


def test_build_is_what_evaluate_measures(ticket):
    """The built module's plain forward on the test split counts exactly evaluate()'s correct answers."""
    d = load_digits()
    x, y = torch.tensor(d.data, dtype=torch.float32) / 16, torch.tensor(d.target)
    splits = {"extract": (x[:1000], y[:1000]), "val": (x[1000:1400], y[1000:1400]), "test": (x[1400:], y[1400:])}
    t = tc.extract("mlp:64-16-10", splits, **QUICK)
    net = t.build("cpu")
    with torch.no_grad():
        correct = int((net(x[1400:]).argmax(1) == y[1400:]).sum())
    assert correct == t.evaluate(splits, device="cpu")["metrics"]["test"]["correct"] == t.metrics.test.correct


@pytest.mark.parametrize("spec", ["conv2", "vgg:8-M-16-16-M", "resnet20", "wrn:10-1", "vit:p4-d16-l1-h2"])
def test_every_built_in_forward_goes_through_its_layers(spec):
    """A plain module(x) of every image architecture counts what evaluate() counts (BatchNorm statistics
    recomputed for the masks included), and differs once the masks are taken off."""
    d = load_digits()
    x, y = torch.tensor(d.data, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16, torch.tensor(d.target)
    splits = {"extract": (x[:600], y[:600]), "val": (x[600:800], y[600:800]), "test": (x[800:1100], y[800:1100])}
    t = tc.extract(spec, splits, **{**QUICK, "method": "random", "epochs": None})
    net = t.build("cpu", data=splits)
    with torch.no_grad():
        logits = net(x[800:1100])
        correct = int((logits.argmax(1) == y[800:1100]).sum())
        assert correct == t.evaluate(splits, device="cpu")["metrics"]["test"]["correct"]
        assert not torch.allclose(tc.remove_masks(net, bake=False)(x[800:1100]), logits)


def test_state_dict_loads_into_a_fresh_masked_module(ticket, x):
    built = ticket.build("cpu")
    fresh = UserMLP()
    tc.apply_masks(fresh, {n: torch.ones_like(m) for n, m in ticket.masks.items()})  # masks of the right shapes
    fresh.load_state_dict(built.state_dict())  # weights and mask buffers both come from the state dict
    assert torch.equal(fresh(x), built(x))
    assert {"layers.0.weight_orig", "layers.0.weight_mask"} <= set(built.state_dict())  # prune's layout


def test_torch_save_and_load_keep_the_masks(ticket, x):
    built = ticket.build("cpu")
    buf = io.BytesIO()
    torch.save(built, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert torch.equal(again(x), built(x))


def test_fine_tuning_trains_the_weights_and_keeps_masked_entries_zero(ticket, x):
    net = ticket.build("cpu").requires_grad_(True)
    y = torch.tensor(load_digits().target[:200])
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    first = None
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        first = first if first is not None else float(loss.detach())
        grad = net.layers[0].weight_orig.grad
        assert grad is not None and bool((grad[~ticket.masks["layers.0.weight"]] == 0).all())
        opt.step()
    assert float(nn.functional.cross_entropy(net(x), y).detach()) < first
    kept = ticket.masks["layers.0.weight"]
    assert bool((net.layers[0].weight[~kept] == 0).all())  # what the forward pass reads
    assert not torch.equal(net.layers[0].weight[kept], init_weights(ticket)["layers.0.weight"][kept])


def test_forward_hooks_see_the_masked_layer(ticket, x):
    net = ticket.build("cpu")
    seen = []
    net.layers[0].register_forward_hook(lambda m, inputs, out: seen.append(out))
    net(x)
    masked = net.layers[0].weight_orig * ticket.masks["layers.0.weight"]
    assert torch.equal(seen[0], nn.functional.linear(x.flatten(1), masked))


def test_apply_masks_refuses_missing_extra_and_misshapen_names(ticket):
    masks = ticket.masks
    with pytest.raises(tc.UsageError, match="no parameter layers.9.weight"):
        tc.apply_masks(UserMLP(), {**masks, "layers.9.weight": masks["layers.0.weight"]})
    with pytest.raises(tc.UsageError, match="no mask for the module's Linear/Conv2d parameter layers.1.weight"):
        tc.apply_masks(UserMLP(), {"layers.0.weight": masks["layers.0.weight"]})
    with pytest.raises(tc.UsageError, match=r"layers.0.weight \[16, 64\] vs \[16, 32\]"):
        module = UserMLP()
        module.layers[0] = nn.Linear(32, 16, bias=False)
        tc.apply_masks(module, masks)
    partial = tc.apply_masks(UserMLP(), {"layers.0.weight": masks["layers.0.weight"]}, strict=False)
    with pytest.raises(tc.UsageError, match="remove_masks"):
        tc.apply_masks(partial, masks)
    assert torch.equal(tc.remove_masks(partial).layers[0].weight == 0, ~masks["layers.0.weight"])  # baked in


@pytest.mark.slow
def test_a_prune_export_loads_into_the_built_in_mlp(ticket, tmp_path, x):
    """The issue's failure: torch's load_state_dict refuses the prune layout on a plain MLP; load_pruned loads it."""
    path = ticket.save(tmp_path / "t.safetensors")
    out = tmp_path / "prune.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [*warm.client(env), "-m", "ticketcli", "export", str(path), "--format", "prune", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    state = torch.load(out, weights_only=True)
    plain = tc.remove_masks(ticket.build("cpu"), bake=False)  # the built-in MLP, no masks
    with pytest.raises(RuntimeError, match="layers.0.weight"):
        plain.load_state_dict(state)
    tc.load_pruned(plain, out)
    assert torch.equal(plain(x), ticket.build("cpu")(x))
    mine = tc.apply_masks(UserMLP(), {n: torch.ones_like(m) for n, m in ticket.masks.items()})
    mine.load_state_dict(state)  # apply_masks leaves a module in the same layout: torch loads it as it is
    assert torch.equal(mine(x), plain(x))
    with pytest.raises(tc.UsageError, match="no parameter layers.0.weight for the export's layers.0.weight_orig"):
        tc.load_pruned(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), state)
    wide = UserMLP()
    wide.layers[1] = nn.Linear(16, 12, bias=False)
    with pytest.raises(tc.UsageError, match="does not fit this module"):
        tc.load_pruned(wide, state)
