"""The warm-started top-k search (selection/warm.py) against the plain definition of a top-k mask: exactly k kept,
ties to the lowest index of the concatenation, the same bits as exact.joint_topk_masks, cold or warm."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.selection.band import Live, Sorted, band_kth
from ticketcli.selection.exact import joint_topk_masks, topk_mask
from ticketcli.selection.warm import TopKSelector


def torch_oracle(parts: list[torch.Tensor], k: int) -> torch.Tensor:
    """The first part's mask by definition: a stable descending sort of the concatenation keeps the k first (equal
    values stay in index order, so ties go to the lowest concatenated index)."""
    flat = torch.cat([p.reshape(-1) for p in parts])
    keep = torch.zeros(flat.numel(), dtype=torch.bool)
    keep[torch.sort(flat, descending=True, stable=True).indices[:k]] = True
    return keep[: parts[0].numel()].view(parts[0].shape)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(0, 200),
    st.integers(0, 2**31 - 1),
    st.sampled_from([0.0, 1e-3, 0.05, 1.0]),
    st.integers(0, 4),
    st.booleans(),
    st.data(),
)
def test_selector_over_many_steps_equals_a_torch_topk_oracle(n, m, seed, drift, levels, frozen, data):
    """Random scores that drift step after step (sometimes jumping, sometimes rounded onto a few levels to make
    ties), with and without an auxiliary part: the warm selector's mask is always the oracle's."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(3, n, generator=g)
    aux = [torch.rand(m, generator=g)] if m else []
    sel = TopKSelector()
    for step in range(8):
        s = s + drift * torch.randn(3, n, generator=g)
        if step == 5:
            s = 4 * s  # a jump no band around the last threshold covers
        x = s.round() if levels and step % 2 else s  # many exact ties at and around the threshold
        parts = [x.abs(), *aux]
        k = data.draw(st.integers(0, 3 * n + m), label=f"k at step {step}")
        expected = torch_oracle(parts, k)
        assert torch.equal(joint_topk_masks(parts, k)[0], expected)
        assert torch.equal(sel("p", parts, k, frozen=frozen), expected), step
        assert torch.equal(sel("f", parts, k, torch.float32, frozen=frozen), expected.float()), step


def test_selector_with_warm_start_equals_full_selection():
    """The warm-started search must return the same bits as a full selection, step after step, ties included."""
    g = torch.Generator().manual_seed(1)
    s = torch.randn(3000, generator=g).abs()
    t = torch.rand(3000, generator=g)  # a fixed auxiliary part
    sel, sel_frozen = TopKSelector(), TopKSelector()
    for step in range(60):
        s = (s + 0.02 * torch.randn(3000, generator=g)).abs()
        if step % 10 == 3:  # inject exact ties around the threshold
            s[:50] = s[1000]
        if step % 17 == 5:  # a big jump that the band cannot cover
            s = s * 3
        for k in (1, 700, 2999, 3000, 4000):
            expected = joint_topk_masks([s, t], k)[0]
            got = sel("p", [s, t], k)
            assert torch.equal(got, expected), (step, k)
            assert torch.equal(sel("f", [s, t], k, torch.float32), expected.float())
            assert torch.equal(sel_frozen(f"k{k}", [s, t], k, frozen=True), expected)  # t is sorted once
            assert torch.equal(sel(f"single{k}", [s], min(k, 3000)), topk_mask(s, min(k, 3000)))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=40),
    st.lists(st.integers(0, 6), max_size=40),
    st.integers(0, 6),
    st.sampled_from([0.0, 0.5, 1.0, 2.5, 10.0]),
    st.booleans(),
    st.data(),
)
@pytest.mark.slow
def test_band_search_finds_the_kth_largest_or_declines(a, b, t, w, frozen, data):
    """The warm-start search returns exactly the k-th largest value whenever it answers (ties at both band ends)."""
    arrays = [np.array(a, np.float32)] + ([np.array(b, np.float32)] if b else [])
    values = np.concatenate(arrays)
    k = data.draw(st.integers(1, values.size))
    views = [Live(arrays[0])] + [(Sorted if frozen else Live)(x) for x in arrays[1:]]
    got = band_kth(views, k, float(t), w)
    expected = float(np.sort(values)[::-1][k - 1])
    if w >= 10.0:  # the band covers every value: it must answer
        assert got == expected
    else:
        assert got is None or got == expected


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 200), st.integers(1, 3), st.integers(0, 2**31 - 1), st.booleans(), st.data())
def test_selection_holding_the_sorted_frozen_values_gives_the_masks_of_the_originals(n, aux, seed, ties, data):
    """Selection hands the selector its sorted copy of fixed auxiliary |T| back instead of keeping an unsorted one:
    over drifting steps (ties included) the masks equal a fresh full selection on the original parts."""
    from ticketcli.models.build import build_model
    from ticketcli.models.masked import MaskedNet
    from ticketcli.models.registry import parse_model
    from ticketcli.selection.groups import Group
    from ticketcli.selection.scored import Selection

    net = MaskedNet(build_model(parse_model(f"mlp:{n}-2")))
    sel = Selection(net, [Group(("layers.0.weight",), data.draw(st.floats(0.05, 0.95)))], parts=1 + aux)
    ((_, k),) = sel.budgets
    g = torch.Generator().manual_seed(seed)
    t = [torch.randn(2, n, generator=g) for _ in range(aux)]
    if ties:
        t = [x.round() for x in t]
    s = torch.randn(2, n, generator=g)
    for step in range(6):
        s = s + 0.05 * torch.randn(2, n, generator=g)
        x = s.round() if ties and step % 2 else s
        got = sel.select({"layers.0.weight": [x, *t]}, aux_fixed=True)["layers.0.weight"]
        expected = joint_topk_masks([x.abs(), *(a.abs() for a in t)], k)[0]
        assert torch.equal(got, expected), step
    if 0 < k < (1 + aux) * 2 * n:  # (keeping none or all needs no search)
        assert sel.frozen["layers.0.weight"][0].dim() == 1  # the selector's sorted copy, not a second one


def _windowed_run(sel: TopKSelector, s: torch.Tensor, aux: list[torch.Tensor], ks: list[int], g, drift, levels):
    """Steps of drifting scores against a selector holding `aux` as windows; every mask is the oracle's."""
    x = s.abs()
    k0 = ks[0]
    assert torch.equal(sel("w", [x, *aux], k0, frozen=True), torch_oracle([x, *aux], k0))
    drawn = []
    assert sel.window("w", lambda: drawn.append(1) or [a.clone() for a in aux])  # fresh copies: sorted in place
    assert not sel.window("w", lambda: [])  # once
    for step, k in enumerate(ks[1:]):
        s = s + drift * torch.randn(s.shape, generator=g)
        if step == 7:
            s = 3 * s  # the threshold jumps out of any window
        x = s.abs()
        if levels:
            x = (x * levels).round() / levels  # ties, also with the auxiliary values on the same levels
        assert torch.equal(sel("w", [x], k), torch_oracle([x, *aux], k)), step
        assert torch.equal(sel("w", [x], k, torch.float32), torch_oracle([x, *aux], k).float()), step
    return len(drawn)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 400),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
    st.sampled_from([1e-3, 0.02, 0.3]),
    st.sampled_from([0, 4, 16]),
    st.sampled_from([(0.0, 1), (0.01, 2), (0.1, 8), (1 / 64, 1024)]),
    st.data(),
)
def test_windowed_frozen_parts_give_the_masks_of_all_of_them(n, parts, seed, drift, levels, window, data):
    """Frozen auxiliary parts held only as windows around the threshold (down to one value a side, so that the
    threshold leaves them and they are rebuilt from their source): every step's mask is the torch oracle's over
    the whole parts, for thresholds moving, jumping, k changing and values tied within and across parts."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, generator=g)
    aux = [torch.rand(n, generator=g) * 2 for _ in range(parts - 1)] or [torch.rand(max(n // 2, 1), generator=g)]
    if levels:
        aux = [(a * levels).round() / levels for a in aux]
    total = s.numel() + sum(a.numel() for a in aux)
    ks = [data.draw(st.integers(1, total - 1), label="k")] * 12
    ks += [data.draw(st.integers(1, total - 1), label="k later")] * 4
    sel = TopKSelector()
    sel.window_share, sel.window_min = window
    _windowed_run(sel, s, aux, ks, g, drift, levels)


@pytest.mark.slow
def test_tiny_windows_are_rebuilt_and_stay_exact():
    """One value a side: the threshold leaves the windows often, they are rebuilt from the source (redrawn
    values), and the masks never change; wider windows need fewer rebuilds."""
    rebuilds = []
    for share, least in ((0.0, 1), (0.001, 4), (0.05, 16)):
        for seed in range(3):
            g = torch.Generator().manual_seed(seed)
            sel = TopKSelector()
            sel.window_share, sel.window_min = share, least
            aux = [torch.rand(5000, generator=g)]
            calls = _windowed_run(sel, torch.randn(64, 80, generator=g), aux, [6000] * 30, g, 0.01, 0)
            assert calls == sel.rebuilds
            rebuilds.append(sel.rebuilds)
    assert min(rebuilds[:3]) > 0  # the tiny windows were left and rebuilt
    assert sum(rebuilds[6:]) < sum(rebuilds[:3])
