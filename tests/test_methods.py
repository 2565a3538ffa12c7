"""Registry-driven method tests, and double-scoring == edge-popup on the zero-padded network (Theorem H.6)."""

from __future__ import annotations

import pytest
import torch
from helpers import for_method, make_net, method_extract, method_masks, quick_method
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.methods.registry import METHODS
from ticketcli.methods.score_training import ScoreTrainer, init_scores
from ticketcli.methods.scores import Augmented, EdgePopup
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.exact import keep_count
from ticketcli.train import evaluate


@pytest.mark.parametrize("name", METHODS.names())
@pytest.mark.slow
def test_masks_are_bool_full_shape_and_deterministic(name, digits):
    net = make_net()
    before = {n: w.clone() for n, w in net.weights.items()}
    a = method_masks(name, digits, net=net)
    b = method_masks(name, digits)
    assert list(a) == net.names
    for n in net.names:
        assert a[n].dtype == torch.bool and a[n].shape == net.weights[n].shape
        assert torch.equal(a[n], b[n]), f"{name}: same seed gave different mask bits for {n}"
        assert torch.equal(net.weights[n], before[n]), f"{name} changed the frozen weights"
    c = method_masks(name, digits, seed=1)
    if METHODS.get(name).load().seeded:  # synflow is data-free and draws nothing at random
        assert any(not torch.equal(a[n], c[n]) for n in net.names), "the seed must matter"
    else:
        assert all(torch.equal(a[n], c[n]) for n in net.names)


@pytest.mark.parametrize("name", METHODS.names())
def test_kept_counts(name, digits):
    result = method_extract(name, digits, sparsity=0.8)
    masks = result.masks
    # trained weights come back exactly from the methods that declare they train weights
    assert (result.trained_weights is not None) == ("weights" in METHODS.get(name).load().trains)
    if name == "iterated":  # the cumulative mask is what the last round reports
        kept = sum(int(m.sum()) for m in masks.values())
        total = sum(m.numel() for m in masks.values())
        assert result.details["rounds"][-1]["achieved_sparsity"] == 1 - kept / total
        return
    for _n, m in masks.items():
        total = m.numel()
        if name == "augmented":  # floor(0.2 * 2n) kept in the augmented space; at most n of them auxiliary
            k_aug = keep_count(0.2, 2 * total)
            assert k_aug - total <= int(m.sum()) <= min(k_aug, total)
        elif METHODS.get(name).load().default_scope == "layer":
            assert int(m.sum()) == keep_count(0.2, total)
    if METHODS.get(name).load().default_scope == "global":  # one top-k over all parameters together
        assert sum(int(m.sum()) for m in masks.values()) == keep_count(0.2, sum(m.numel() for m in masks.values()))


@pytest.mark.parametrize("name", ["edge-popup", "random"])
def test_layer_densities(name, digits):
    masks = method_masks(name, digits, layer_densities=(0.1, 0.5, 1.0))
    for (_n, m), d in zip(masks.items(), (0.1, 0.5, 1.0)):
        assert int(m.sum()) == keep_count(d, m.numel())
    with pytest.raises(UsageError, match="3 layers"):
        method_masks(name, digits, layer_densities=(0.1, 0.5))


def test_augmented_rejects_layer_densities_and_others_reject_aug_density(digits):
    with pytest.raises(UsageError):
        method_masks("augmented", digits, layer_densities=(0.1, 0.5, 1.0))
    for name in ("edge-popup", "random"):
        with pytest.raises(UsageError):
            method_masks(name, digits, aug_density=0.5)


@pytest.mark.slow
def test_biases_get_their_own_masks(digits):
    net = make_net("mlp:64-32-10+bias")
    masks = method_masks("augmented", digits, net=net, aug_density=0.5)
    assert set(masks) == {"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"}
    for _n, m in masks.items():
        assert int(m.sum()) <= m.numel()
    ep = method_masks("edge-popup", digits, net=make_net("mlp:64-32-10+bias"), sparsity=0.5)
    assert int(ep["layers.0.bias"].sum()) == 16


@pytest.mark.slow
def test_progress_reports_every_epoch(digits):
    seen = []
    method_masks("augmented", digits, progress=seen.append, epochs=3)
    assert [s["epoch"] for s in seen] == [1, 2, 3]
    assert all(0 <= s["sparsity"] < 1 and s["loss"] > 0 for s in seen)


@pytest.mark.slow
def test_score_methods_learn(digits):
    """A sanity check that scores are trained: a few epochs beat a random mask by a wide margin."""
    net = make_net("mlp:64-128-128-10")
    accs = {}
    for name in ("augmented", "edge-popup", "random"):
        masks = method_masks(name, digits, net=net, sparsity=0.5, **for_method(name, {"epochs": 8}))
        accs[name] = evaluate(net, masks, digits.x_val, digits.y_val)["accuracy"]
    assert accs["augmented"] > accs["random"] + 0.2
    assert accs["edge-popup"] > accs["random"] + 0.2


def test_auxiliary_scores_never_change_and_get_no_gradient(digits):
    net = make_net()
    spec = quick_method("augmented")
    sel = Augmented().selection(net, spec)
    scores = init_scores(net, 2, torch.Generator().manual_seed(0))
    aux0 = {n: p[1].clone() for n, p in scores.items()}
    trainer = ScoreTrainer(net, sel, spec, scores)
    for i in range(5):
        trainer.step(digits.x_extract[i * 64 : (i + 1) * 64], digits.y_extract[i * 64 : (i + 1) * 64])
    for n, parts in trainer.scores.items():
        assert parts[1].grad is None or torch.count_nonzero(parts[1].grad) == 0
        assert torch.equal(parts[1], aux0[n])
        assert not torch.equal(parts[0].detach(), scores[n][0])  # the original scores did train


# ---- Theorem H.6: double-scoring at density 1/2 == edge-popup at 1/2 on the zero-padded network ----


class PaddedMLP(nn.Module):
    """Each layer W (out, in) becomes [W, 0] (out, 2 in) applied to [h, h]: the same function."""

    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(2 * a, b, bias=False) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        h = x.flatten(1)
        for i, layer in enumerate(self.layers):
            h = layer(torch.cat([h, h], 1))
            if i < len(self.layers) - 1:
                h = torch.relu(h)
        return h


def test_double_scoring_equals_edge_popup_on_zero_padded_network(digits):
    widths = (64, 24, 16, 10)
    net = make_net("mlp:" + "-".join(map(str, widths)))
    net.module.double()
    net = MaskedNet(net.module, net.spec)
    padded_module = PaddedMLP(widths).double().requires_grad_(False)
    with torch.no_grad():
        for w, p in zip(net.weights.values(), padded_module.parameters()):
            p.copy_(torch.cat([w, torch.zeros_like(w)], 1))
    padded = MaskedNet(padded_module)

    spec_aug = quick_method("augmented", aug_density=0.5)
    spec_ep = quick_method("edge-popup", sparsity=0.5)
    s_t = init_scores(net, 2, torch.Generator().manual_seed(3))
    aug = ScoreTrainer(net, Augmented().selection(net, spec_aug), spec_aug, s_t)
    ep = ScoreTrainer(
        padded,
        EdgePopup().selection(padded, spec_ep),
        spec_ep,
        {n: [torch.cat([s, t], 1)] for n, (s, t) in s_t.items()},
    )

    x, y = digits.x_extract.double(), digits.y_extract
    for step in range(8):
        xb, yb = x[step * 64 : (step + 1) * 64], y[step * 64 : (step + 1) * 64]
        loss_a, _, hard_a = aug.step(xb, yb)
        loss_e, _, hard_e = ep.step(xb, yb)
        assert loss_a == pytest.approx(loss_e, rel=1e-12, abs=1e-12), step
        for n in net.names:
            n_in = net.weights[n].shape[1]
            s, t = aug.scores[n]
            s_hat = ep.scores[n][0]
            assert torch.equal(hard_a[n], hard_e[n][:, :n_in]), (step, n)  # same masks
            torch.testing.assert_close(s.detach(), s_hat.detach()[:, :n_in], rtol=0, atol=1e-12)
            assert torch.equal(t, s_hat.detach()[:, n_in:])  # auxiliary iterates identical (never move)
            assert torch.count_nonzero(s_hat.grad[:, n_in:]) == 0  # auxiliary coordinates: exactly zero grad
