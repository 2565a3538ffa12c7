"""sums.py against torch's own float64 reductions and comparisons: same counts and extremes exactly, sums to
float64 rounding, on contiguous and strided tensors, with NaN, infinities and -0.0, on numpy's path (float32 and
float64 on the CPU) and on torch's (half precision takes it, as other devices do)."""

from __future__ import annotations

import math

import pytest
import torch

from ticketcli.drift.sums import all_but, compare, count, masked_sum64, peak_abs, square_sum64, sum64


def tensors(dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 5, 4, 3, generator=g).to(dtype)
    special = base.clone()
    special.view(-1)[:4] = torch.tensor([0.0, -0.0, 1e-7, -1e-7]).to(dtype)
    return [
        base,
        base.transpose(1, 3),  # strided
        base[:, 1:4, ::2],  # sliced
        special,
        torch.randn(37, 11, generator=g).to(dtype).relu(),  # exact zeros
        torch.randn(7, generator=g).to(dtype),
    ]


DTYPES = [torch.float32, torch.float64, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_sums_equal_torch_float64_sums(dtype):
    for t in tensors(dtype):
        oracle = t.double()
        dims: list = [None, 0, -1, *([1, (0, 2), (0, 2, 3)] if t.dim() == 4 else [])]
        for dim in dims:
            want = oracle.sum() if dim is None else oracle.sum(dim)
            got = sum64(t, dim)
            assert got.dtype == torch.float64 and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert square_sum64(t) == pytest.approx(float((oracle * oracle).sum()), rel=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_comparisons_and_counts_equal_torch_exactly(dtype):
    for t in tensors(dtype):
        for op, want in (("<", t < 0), (">", t > 0), ("==", t == 0)):
            got = compare(t, op, 0)
            assert got.dtype == torch.bool and torch.equal(got, want), op
            assert count(got) == int(want.sum())
        assert torch.equal(compare(t, "<", 1e-3, magnitude=True), t.abs() < 1e-3)
        for keep in range(t.dim()):
            want = t.eq(0)
            for d in reversed([d for d in range(t.dim()) if d != keep]):
                want = want.all(d)
            assert torch.equal(all_but(t == 0, keep), want)
        assert peak_abs(t) == float(t.abs().max())


def test_nan_and_infinity():
    t = torch.tensor([[1.0, -3.0], [math.nan, 2.0]])
    assert math.isnan(peak_abs(t))
    assert peak_abs(torch.tensor([-math.inf, 1.0])) == math.inf
    assert count(compare(t, "<", 0)) == 1 and count(compare(t, ">", 0)) == 2  # NaN compares False
    assert math.isnan(float(sum64(t)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_sum_ignores_what_is_outside_even_nan_and_infinity(dtype):
    values = torch.tensor([1.5, -2.0, math.nan, math.inf, -math.inf, 4.0]).to(dtype)
    where = torch.tensor([True, True, False, False, False, True])
    assert masked_sum64(values, where) == float(values.double()[where].sum())
    inside = torch.tensor([True, False, True, False, False, False])
    assert math.isnan(masked_sum64(values, inside))  # a NaN inside counts
    g = torch.Generator().manual_seed(1)
    big = torch.randn(64, 33, generator=g).to(dtype)
    sel = torch.rand(64, 33, generator=g) > 0.3
    assert masked_sum64(big, sel) == pytest.approx(float(big.double()[sel].sum()), rel=1e-12, abs=1e-12)
    assert masked_sum64(big.T, sel.T) == pytest.approx(float(big.double()[sel].sum()), rel=1e-12, abs=1e-12)


def test_results_do_not_alias_the_input():
    t = torch.randn(8, 4)
    s = sum64(t, 0)
    t.add_(1.0)
    assert not torch.equal(s, sum64(t, 0))
