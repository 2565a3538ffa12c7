"""The score-training step's memory savings change no bit: effective weights recomputed in the backward pass
(masking.MaskedWeights) against the plain autograd path, and fixed auxiliary scores released by ScoreTrainer."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from helpers import make_net, quick_method

from ticketcli.masking import MaskedWeights, masked_weight
from ticketcli.methods.score_training import ScoreTrainer, init_scores, seeded_scores
from ticketcli.methods.scores import Augmented, EdgePopup


def _layer(kind: str, g: torch.Generator):
    """A weight, a bias and an input, and the layer's function with its geometry (stride, padding, 3-D input)."""
    if kind == "linear":
        w, x = torch.randn(7, 5, generator=g), torch.randn(4, 5, generator=g)
        return w, x, F.linear
    if kind == "linear-3d":  # a transformer's (batch, tokens, features) input
        w, x = torch.randn(6, 5, generator=g), torch.randn(2, 3, 5, generator=g)
        return w, x, F.linear
    w, x = torch.randn(6, 3, 3, 3, generator=g), torch.randn(2, 3, 9, 9, generator=g)
    stride, padding = {"conv": (1, 0), "conv-strided": (2, 1)}[kind]
    return w, x, lambda a, wt, b: F.conv2d(a, wt, b, stride=stride, padding=padding)


def _grads(kind: str, path: str, signed: bool, bias: bool, seed: int = 0, device: str = "cpu"):
    """dL/dS, dL/dS_bias, dL/dx and the output of one masked layer, by the plain path or MaskedWeights."""
    g = torch.Generator().manual_seed(seed)
    w, x, layer = _layer(kind, g)
    b = torch.randn(w.shape[0], generator=g)
    s, sb = torch.randn(w.shape, generator=g), torch.randn(b.shape, generator=g)
    m, mb = torch.rand(w.shape, generator=g) > 0.4, torch.rand(b.shape, generator=g) > 0.4
    w, x, b, s, sb, m, mb = (t.to(device) for t in (w, x, b, s, sb, m, mb))
    for t in (s, sb, x):
        t.requires_grad_()
    if path == "plain":
        z = layer(x, masked_weight(s, w, m, signed), masked_weight(sb, b, mb, signed) if bias else None)
    else:
        eff = MaskedWeights(
            {"w": s, "b": sb}, {"w": w, "b": b}, {"w": m, "b": mb}, signed=signed, owned=path == "owned"
        )
        with eff.recomputing():
            z = layer(x, eff["w"], eff["b"] if bias else None)
    up = torch.randn(z.shape, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    (z.tanh() * up).sum().backward()
    return s.grad, sb.grad, x.grad, z.detach()


@pytest.mark.parametrize("kind", ["linear", "linear-3d", "conv", "conv-strided"])
@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("path", ["recomputed", "owned"])
def test_recomputed_effective_weights_give_the_plain_paths_gradients_bit_for_bit(kind, signed, bias, path):
    want = _grads(kind, "plain", signed, bias)
    got = _grads(kind, path, signed, bias)
    for name, a, b in zip(("dL/dS", "dL/dS of the bias", "dL/dx", "output"), want, got):
        if a is None:
            assert b is None, name
        else:
            assert torch.equal(a, b), name
    assert want[0] is not None and torch.count_nonzero(want[0]) > 0  # the comparison compared something


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run it on a CUDA machine)")
@pytest.mark.parametrize("kind", ["linear", "conv-strided"])
def test_recomputed_effective_weights_on_the_gpu_give_the_plain_paths_gradients(kind):
    want = _grads(kind, "plain", False, True, device="cuda")
    got = _grads(kind, "owned", False, True, device="cuda")
    assert all(torch.equal(a, b) for a, b in zip(want, got))


@pytest.mark.slow
def test_effective_weights_are_not_kept_for_the_backward_pass():
    g = torch.Generator().manual_seed(0)
    w, s = torch.randn(8, 6, generator=g), torch.randn(8, 6).requires_grad_()
    x = torch.randn(5, 6, generator=g).requires_grad_()  # dL/dx needs W * H: the layer saves it
    m = torch.rand(8, 6, generator=g) > 0.5
    refs = {}
    for recompute in (False, True):
        eff = MaskedWeights({"w": s}, {"w": w}, {"w": m})
        packed = []
        with eff.recomputing() if recompute else torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            wh = eff["w"]
            refs[recompute] = weakref.ref(wh)
            z = F.linear(x, wh).relu().sum()
            del wh
        gc.collect()
        packed.append(refs[recompute]() is not None)
        z.backward()
        assert packed == [not recompute]  # the plain path keeps W * H until the backward pass; recomputing does not
        assert torch.count_nonzero(s.grad) > 0


def test_a_mask_changed_in_place_before_the_backward_pass_is_refused():
    s = torch.randn(4, 3).requires_grad_()
    w, m, x = torch.randn(4, 3), torch.ones(4, 3, dtype=torch.bool), torch.randn(2, 3).requires_grad_()
    eff = MaskedWeights({"w": s}, {"w": w}, {"w": m})
    with eff.recomputing():
        z = F.linear(x, eff["w"]).sum()
    m[0, 0] = False  # the recomputed W * H would differ from the one the forward pass used
    with pytest.raises(RuntimeError, match="modified in place"):
        z.backward()


def test_effective_weights_are_a_mapping_of_the_masked_names():
    s, w, m = {"a": torch.zeros(2)}, {"a": torch.ones(2), "frozen": torch.ones(1)}, {"a": torch.ones(2).bool()}
    eff = MaskedWeights(s, w, m)
    assert list(eff) == ["a"] and len(eff) == 1 and eff.get("frozen") is None
    assert torch.equal(eff["a"].detach(), torch.ones(2))
    with pytest.raises(KeyError):
        eff["frozen"]


@pytest.mark.parametrize(
    ("model", "method", "kw"),
    [
        ("mlp:64-32-32-10+bias", EdgePopup, {}),
        ("mlp:64-32-32-10", EdgePopup, {"signed_scores": True}),
        ("conv2@1x8x8-10", Augmented, {}),
        ("resnet20@1x8x8-10", EdgePopup, {}),
    ],
)
@pytest.mark.parametrize("recompute_min", [0, 500])  # every layer's W * H recomputed; only the larger ones
def test_a_training_step_has_the_plain_paths_score_gradients(digits, model, method, kw, recompute_min):
    """ScoreTrainer's step (effective weights made per layer, recomputed, dL/dS formed in place) against the
    plain autograd path on the same masks: the score gradients agree bit for bit."""
    net = make_net(model)
    spec = quick_method(method.name, **kw)
    sel = method().selection(net, spec)
    trainer = ScoreTrainer(net, sel, spec, init_scores(net, sel.parts, torch.Generator().manual_seed(0)))
    assert trainer.builtin
    trainer.recompute_min = recompute_min
    x, y = digits.x_extract[:32], digits.y_extract[:32]
    if model.startswith("mlp"):
        x = x.flatten(1)
    _, _, hard = trainer.step(x, y)  # one step, so that the second one starts from trained scores
    with torch.no_grad():
        hard = trainer.selection.select(trainer.scores, aux_fixed=True)
    scores = {n: parts[0] for n, parts in trainer.scores.items()}
    trainer.opt.zero_grad(set_to_none=True)  # the step's own gradients
    plain = {n: masked_weight(scores[n], net.weights[n], hard[n], spec.signed_scores) for n in scores}
    F.cross_entropy(net.forward_with(x, plain), y).backward()
    want = {n: s.grad.clone() for n, s in scores.items()}
    trainer.opt.zero_grad(set_to_none=True)
    F.cross_entropy(trainer.forward(x, hard), y).backward()
    for n, s in scores.items():
        assert torch.equal(s.grad, want[n]), n
    assert any(torch.count_nonzero(g) for g in want.values())


def test_released_auxiliary_scores_change_no_mask_and_are_checkpointed_as_drawn(digits):
    net = make_net()
    spec = quick_method("augmented")
    sel_kept, sel_released = Augmented().selection(net, spec), Augmented().selection(net, spec)
    kept = ScoreTrainer(net, sel_kept, spec, init_scores(net, 2, torch.Generator().manual_seed(4)))
    released = ScoreTrainer(net, sel_released, spec, *seeded_scores(net, 2, torch.Generator().manual_seed(4)))
    drawn = init_scores(net, 2, torch.Generator().manual_seed(4))
    for i in range(4):
        xb, yb = digits.x_extract[i * 64 : (i + 1) * 64], digits.y_extract[i * 64 : (i + 1) * 64]
        a, b = kept.step(xb, yb), released.step(xb, yb)
        assert a[0] == b[0] and all(torch.equal(a[2][n], b[2][n]) for n in net.names)
    assert released.released and all(len(p) == 1 for p in released.scores.values())
    assert not kept.released and all(len(p) == 2 for p in kept.scores.values())
    saved_kept, saved_released = kept.state_dict()["scores"], released.state_dict()["scores"]
    for n in net.names:
        assert torch.equal(saved_released[n][1], drawn[n][1])  # the auxiliary scores as they were drawn
        assert all(torch.equal(a, b) for a, b in zip(saved_kept[n], saved_released[n], strict=True))
    assert sel_kept.aux_report(kept.scores) == sel_released.aux_report(released.scores)


def test_auxiliary_scores_that_are_not_the_seeds_draw_are_never_released(digits):
    net = make_net()
    spec = quick_method("augmented")
    scores, redraw = seeded_scores(net, 2, torch.Generator().manual_seed(4))
    trainer = ScoreTrainer(net, Augmented().selection(net, spec), spec, scores, redraw)
    state = trainer.state_dict()
    state["scores"]["layers.0.weight"][1][0, 0] += 1.0  # a checkpoint whose T the seed does not give
    trainer.load_state_dict(state)
    trainer.step(digits.x_extract[:64], digits.y_extract[:64])
    assert not trainer.released
    assert torch.equal(trainer.state_dict()["scores"]["layers.0.weight"][1], state["scores"]["layers.0.weight"][1])


@pytest.mark.slow
def test_windowed_auxiliary_ranking_changes_no_mask_nor_the_aux_report(digits):
    """Once the fixed auxiliary scores are released, the selection holds their ranking only as windows around
    each layer's threshold; with windows of one value a side (rebuilt from the seed's redraw whenever the
    threshold leaves them) every step's masks and the auxiliary share stay those of the kept scores."""
    net = make_net()
    spec = quick_method("augmented")
    sel_kept, sel_win = Augmented().selection(net, spec), Augmented().selection(net, spec)
    sel_win.topk.window_share, sel_win.topk.window_min = 0.0, 1
    kept = ScoreTrainer(net, sel_kept, spec, init_scores(net, 2, torch.Generator().manual_seed(5)))
    win = ScoreTrainer(net, sel_win, spec, *seeded_scores(net, 2, torch.Generator().manual_seed(5)))
    for i in range(12):
        xb, yb = digits.x_extract[i * 32 : (i + 1) * 32], digits.y_extract[i * 32 : (i + 1) * 32]
        a, b = kept.step(xb, yb), win.step(xb, yb)
        assert a[0] == b[0] and all(torch.equal(a[2][n], b[2][n]) for n in net.names), i
    assert sel_win.windowed == set(net.names) and not sel_win.frozen  # no sorted copy of all of T left
    assert all(w.s.size <= 2 for n in net.names for w in sel_win.topk.sorted[n])
    assert sel_win.topk.rebuilds > 0  # the thresholds left the tiny windows and they were rebuilt
    assert all(torch.equal(kept.masks()[n], win.masks()[n]) for n in net.names)
    assert sel_kept.aux_report(kept.scores) == sel_win.aux_report(win.scores)
    saved = win.state_dict()["scores"]
    assert all(torch.equal(a, b) for n in net.names for a, b in zip(kept.state_dict()["scores"][n], saved[n]))


def test_redrawing_one_parameter_gives_the_bits_of_redrawing_them_all():
    """redraw(name) (what a window rebuild draws) is redraw()[name] and init_scores' auxiliary parts, bit for bit,
    for every parameter, with one and with several auxiliary parts."""
    net = make_net()
    for parts in (2, 3):
        drawn = init_scores(net, parts, torch.Generator().manual_seed(6))
        _, redraw = seeded_scores(net, parts, torch.Generator().manual_seed(6))
        everything = redraw()
        for n in net.names:
            one = redraw(n)
            assert list(one) == [n] and len(one[n]) == parts - 1
            for a, b, c in zip(one[n], everything[n], drawn[n][1:], strict=True):
                assert torch.equal(a, b) and torch.equal(a, c), n
