"""WeightTrainer: masked entries stay exactly zero, kept ones train, dense gradients are the true gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers import make_net

from ticketcli.seeding import generator
from ticketcli.train import WeightOptim, WeightTrainer, train_weights


def random_masks(net, density=0.3, seed=12345):
    # not seed 0: the weights come from a generator seeded 0, and equal streams would correlate mask and sign
    g = torch.Generator().manual_seed(seed)
    return {n: torch.rand(w.shape, generator=g) < density for n, w in net.weights.items()}


def test_masked_weights_stay_zero_and_kept_ones_move(digits):
    net = make_net()
    before = {n: w.clone() for n, w in net.weights.items()}
    masks = random_masks(net)
    tr = WeightTrainer(net, masks, WeightOptim())
    train_weights(tr, digits.x_extract, digits.y_extract, epochs=2, batch_size=128, generator=generator(0, "t"))
    for n, w in tr.weights().items():
        assert torch.all(w[~masks[n]] == 0)
        assert not torch.equal(w[masks[n]], before[n][masks[n]])
        assert torch.equal(net.weights[n], before[n])  # the network's own weights are untouched


def test_mask_change_zeroes_dropped_entries_despite_optimiser_state(digits):
    net = make_net()
    tr = WeightTrainer(net, None, WeightOptim())  # dense: every entry has Adam momentum
    x, y = digits.x_extract[:128], digits.y_extract[:128]
    tr.step(x, y)
    masks = random_masks(net, 0.5, seed=54321)
    tr.set_masks(masks)
    for _ in range(3):
        tr.step(x, y)
    for n, w in tr.weights().items():
        assert torch.all(w[~masks[n]] == 0)


def test_dense_grads_equal_autograd_on_effective_weights(digits):
    net = make_net()
    masks = random_masks(net)
    tr = WeightTrainer(net, masks, WeightOptim(name="sgd", lr=0.0))
    x, y = digits.x_extract[:64], digits.y_extract[:64]
    eff = {n: (net.weights[n] * masks[n]).requires_grad_(True) for n in net.names}
    F.cross_entropy(net.forward_with(x, eff), y).backward()
    grads = tr.dense_gradient(x, y)
    for n in net.names:
        torch.testing.assert_close(grads[n], eff[n].grad)
        assert grads[n][~masks[n]].abs().sum() > 0  # masked entries get a (nonzero) dense gradient


def test_training_is_deterministic_under_the_seed(digits):
    out = []
    for _ in range(2):
        net = make_net()
        tr = WeightTrainer(net, random_masks(net), WeightOptim())
        hist = train_weights(
            tr, digits.x_extract, digits.y_extract, epochs=1, batch_size=100, generator=generator(3, "t")
        )
        out.append((hist, tr.weights()))
    assert out[0][0] == out[1][0]
    assert all(torch.equal(out[0][1][n], out[1][1][n]) for n in out[0][1])
