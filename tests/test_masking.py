"""Properties of top-k selection and the straight-through estimator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.masking import masked_weight
from ticketcli.selection.exact import (
    KTH_ALGORITHMS,
    default_algorithm,
    joint_topk_masks,
    keep_count,
    kth_largest,
    topk_mask,
)
from ticketcli.selection.warm import SELECT_ALGORITHMS, TopKSelector


def reference_topk(values: np.ndarray, k: int) -> np.ndarray:
    """Oracle: stable sort by descending value; ties resolved towards the lowest index."""
    order = np.lexsort((np.arange(values.size), -values))
    keep = np.zeros(values.size, dtype=bool)
    keep[order[:k]] = True
    return keep


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=60), st.data())
@pytest.mark.slow
def test_topk_exact_count_and_ties_to_lowest_index(values, data):
    a = np.array(values, dtype=np.float32)  # few distinct values: many ties
    k = data.draw(st.integers(0, a.size))
    mask = topk_mask(torch.from_numpy(a), k).numpy()
    assert mask.sum() == k
    np.testing.assert_array_equal(mask, reference_topk(a, k))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=40),
    st.lists(st.integers(0, 4), min_size=1, max_size=40),
    st.data(),
)
def test_joint_topk_is_topk_of_concatenation(a, b, data):
    ta, tb = torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
    k = data.draw(st.integers(0, len(a) + len(b)))
    ma, mb = joint_topk_masks([ta, tb], k)
    np.testing.assert_array_equal(torch.cat([ma, mb]).numpy(), reference_topk(np.array(a + b, np.float32), k))


def test_topk_keeps_shape_and_largest():
    s = torch.randn(7, 9, generator=torch.Generator().manual_seed(0))
    m = topk_mask(s, 20)
    assert m.shape == s.shape and m.dtype == torch.bool and int(m.sum()) == 20
    assert s[m].min() > s[~m].max()


@pytest.mark.parametrize(
    "density,n,expected",
    [(0.1, 10, 1), (1 - 0.9, 10, 1), (0.29, 100, 29), (0.5, 7, 3), (1.0, 5, 5), (0.0, 5, 0), (0.2, 200704, 40140)],
)
def test_keep_count_is_floor_without_float_surprises(density, n, expected):
    assert keep_count(density, n) == expected


def test_straight_through_gradient_is_upstream_times_sign():
    """dL/dS = dL/dH * sign(S), with dL/dH = dL/d(W*H) * W (edge-popup's estimator through |S|)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 6, generator=g, dtype=torch.float64)
    s = torch.randn(5, 6, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    hard = topk_mask(s.detach().abs(), 12)

    # oracle: treat the effective weight as a leaf and apply the chain rule by hand
    eff = (w * hard).requires_grad_(True)
    (x @ eff.T).tanh().sum().backward()
    expected = eff.grad * w * torch.sign(s.detach())

    out = (x @ masked_weight(s, w, hard).T).tanh().sum()
    out.backward()
    assert torch.equal(masked_weight(s, w, hard).detach(), w * hard)
    torch.testing.assert_close(s.grad, expected, rtol=0, atol=1e-12)


small_parts = st.lists(st.lists(st.integers(-3, 3), min_size=1, max_size=30), min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(small_parts, st.data())
@pytest.mark.slow
def test_every_selection_algorithm_gives_the_same_bits(parts, data):
    """sort, topk, kthvalue, numpy and the warm band search: exact counts, ties to the lowest concatenated index,
    over several parts with heavy ties (the bits tickets and checkpoints rely on)."""
    tensors = [torch.tensor(p, dtype=torch.float32) for p in parts]
    flat = np.concatenate([np.array(p, np.float32) for p in parts])
    k = data.draw(st.integers(0, flat.size))
    expected = reference_topk(flat, k)
    first = expected[: len(parts[0])]
    for algorithm in KTH_ALGORITHMS:
        got = joint_topk_masks(tensors, k, algorithm)
        np.testing.assert_array_equal(torch.cat(got).numpy(), expected, err_msg=algorithm)
        if k:
            assert kth_largest(torch.from_numpy(flat), k, algorithm) == np.sort(flat)[::-1][k - 1]
    # the selector, cold then warm (the second call searches a band around the first call's threshold), each
    # algorithm, auxiliary parts live or frozen (sorted once); a shift of the first part moves the threshold
    shift = data.draw(st.integers(-1, 1))
    moved = [tensors[0] + shift, *tensors[1:]]
    moved_expected = reference_topk(np.concatenate([flat[: len(parts[0])] + shift, flat[len(parts[0]) :]]), k)
    for algorithm in SELECT_ALGORITHMS:
        for frozen in (False, True):
            sel = TopKSelector(algorithm)
            np.testing.assert_array_equal(sel("p", tensors, k, frozen=frozen).numpy(), first, err_msg=algorithm)
            got = sel("p", moved, k, torch.float32, frozen=frozen)
            np.testing.assert_array_equal(
                got.numpy(), moved_expected[: len(parts[0])].astype(np.float32), err_msg=f"{algorithm} warm"
            )


def test_selection_algorithm_choices():
    assert default_algorithm("cpu") == "numpy" and default_algorithm("cuda:1") == "topk"
    assert default_algorithm("meta") == "sort"  # unknown device types: torch.sort, implemented everywhere
    with pytest.raises(ValueError, match="unknown selection algorithm"):
        TopKSelector("quick")
    with pytest.raises(ValueError, match="CPU only"):
        kth_largest(torch.zeros(3, device="meta"), 1, "numpy")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_weight_of_a_bool_mask_has_the_bits_of_a_float_mask(dtype):
    """A bool mask (numpy multiplies on the CPU) gives bit for bit W * mask.to(W.dtype), signed zeros included,
    for contiguous and non-contiguous weights, and the same straight-through gradient."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(7, 9, generator=g, dtype=dtype)
    w[0, :3] = torch.tensor([0.0, -0.0, float("inf")], dtype=dtype)
    hard = torch.rand(7, 9, generator=g) > 0.5
    for weight, mask in ((w, hard), (w.t(), hard.t()), (w[:, ::2], hard[:, ::2])):
        got = masked_weight(torch.zeros_like(weight), weight, mask).detach()
        expected = weight * mask.to(dtype)
        bits = torch.int32 if dtype == torch.float32 else torch.int64  # NaN (inf * 0) and -0.0 compared as bits
        assert got.dtype == dtype and torch.equal(got.contiguous().view(bits), expected.contiguous().view(bits))
    s = torch.randn(7, 9, generator=g, dtype=dtype, requires_grad=True)
    up = torch.randn(7, 9, generator=g, dtype=dtype)
    (masked_weight(s, w.nan_to_num(posinf=1.0), hard) * up).sum().backward()
    grad_bool, s.grad = s.grad, None
    (masked_weight(s, w.nan_to_num(posinf=1.0), hard.to(dtype)) * up).sum().backward()
    assert torch.equal(grad_bool, s.grad)
