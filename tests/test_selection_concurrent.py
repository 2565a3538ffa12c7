"""Per-parameter selections run at the same time in a thread pool (Selection.workers) give the very same masks as
one after the other: each parameter's top-k reads only its own scores and its own warm state."""

from __future__ import annotations

import pytest
import torch
from helpers import make_net, quick_method

from ticketcli.methods.score_training import ScoreTrainer, init_scores
from ticketcli.methods.scores import Augmented, EdgePopup
from ticketcli.methods.selection import CONCURRENT_MIN, Selection
from ticketcli.specs import MethodSpec


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("signed", [False, True])
def test_concurrent_selection_equals_serial_over_many_steps(seed, parts, signed):
    """Drifting scores (rounded onto few levels every other step: ties at the thresholds; a jump at step 4),
    with and without fixed auxiliary parts and active sets: serial and 4-way concurrent selectors agree bit for
    bit at every step, warm or cold."""
    g = torch.Generator().manual_seed(seed)
    net = make_net("mlp:64-32-32-10", seed=seed)
    active = {n: torch.rand(net.weights[n].shape, generator=g) > 0.3 for n in net.names} if seed % 3 == 0 else None
    densities = {n: float(d) for n, d in zip(net.names, torch.rand(len(net.names), generator=g) * 0.9 + 0.05)}
    spec = MethodSpec(signed_scores=signed)
    serial = Selection(net, spec, parts=parts, densities=densities, active=active)
    concurrent = Selection(net, spec, parts=parts, densities=densities, active=active)
    serial.concurrent, concurrent.concurrent = 1, 4
    assert concurrent.workers({n: [net.weights[n]] for n in net.names}) == min(4, len(net.names)) > 1
    scores = {n: [torch.randn(net.weights[n].shape, generator=g) for _ in range(parts)] for n in net.names}
    for step in range(8):
        for n in net.names:
            s = scores[n][0] + 0.01 * torch.randn(scores[n][0].shape, generator=g)
            scores[n][0] = 5 * s if step == 4 else s
        shown = {n: [(p * 4).round() / 4 if step % 2 else p for p in ps] for n, ps in scores.items()}
        for dtype in (torch.bool, torch.float32):
            a = serial.select(shown, dtype, aux_fixed=True)
            b = concurrent.select(shown, dtype, aux_fixed=True)
            assert list(a) == list(b) == net.names
            for n in net.names:
                assert b[n].dtype == dtype
                assert torch.equal(a[n], b[n]), (step, n)
    assert serial.topk.searches == concurrent.topk.searches
    assert serial.topk.misses == concurrent.topk.misses


@pytest.mark.parametrize("method", [EdgePopup, Augmented])
def test_concurrent_training_keeps_every_mask(method):
    """Score training with the per-parameter selections in a pool: the same masks at every step as serially."""
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(64, 64, generator=g), torch.randint(0, 10, (64,), generator=g)
    trainers = []
    for workers in (1, 3):
        net = make_net("mlp:64-32-32-10", seed=1)
        spec = quick_method(method.name)
        sel = method().selection(net, spec)
        sel.concurrent = workers
        trainers.append(ScoreTrainer(net, sel, spec, init_scores(net, sel.parts, torch.Generator().manual_seed(2))))
    for _ in range(15):
        (la, _, a), (lb, _, b) = (t.step(x, y) for t in trainers)
        assert la == lb
        assert all(torch.equal(a[n], b[n]) for n in a)


def test_workers_by_default_follow_torchs_threads_and_the_large_parameters():
    """By default a pool runs only with several torch threads and at least two parameters worth a thread."""
    net = make_net("mlp:64-32-32-10")
    sel = EdgePopup().selection(net, quick_method("edge-popup"))
    small = {n: [net.weights[n]] for n in net.names}
    large = {n: [torch.zeros(CONCURRENT_MIN)] for n in ("a", "b", "c")}
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert sel.workers(large) == 1
        torch.set_num_threads(2)
        assert sel.workers(large) == 2
        assert sel.workers(small) == 1
        assert sel.workers({**small, "a": large["a"]}) == 1
    finally:
        torch.set_num_threads(threads)
    sel.concurrent = 1
    assert sel.workers(large) == 1
