"""The masked forward pass: the straight-through estimator and density bookkeeping.

The gradient reaches the scores through masked_weight's straight-through estimator; MaskedWeights makes each
layer's W * H when the layer asks for it. Which entries a mask keeps is decided by the selection package
(selection/exact.py defines the exact top-k)."""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

import numpy as np
import torch


class _MaskedWeight(torch.autograd.Function):
    """W * H in the forward pass; dL/dS = (dL/d(W*H) * W) * sign(S) in the backward pass.

    Edge-popup's straight-through estimator in one autograd node: the hard top-k passes dL/dH = dL/d(W*H) * W
    to |S| unchanged (as if it were the identity), and d|S|/dS = sign(S) (0 at 0, as torch's abs). With signed
    ranking (the "NoAbs" ablation, H = top-k of S itself) the last factor is 1: dL/dS = dL/d(W*H) * W.
    The mask itself is not needed by the backward pass and is not saved. `owned`: the incoming gradient is a
    fresh tensor that nothing else holds (W * H had one consumer, a linear layer, a convolution or an embedding,
    whose backward made it), so dL/dS is formed in it in place instead of in a second weight-sized temporary.
    """

    # ctx: autograd's per-call context object, typed Any as in torch.autograd.Function itself (attributes are set
    # on it freely)
    @staticmethod
    def forward(
        ctx: Any, scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool, owned: bool
    ) -> torch.Tensor:
        ctx.save_for_backward(scores, weight)
        ctx.signed, ctx.owned = signed, owned
        return _product(weight, mask)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        scores, weight = ctx.saved_tensors
        # the same values either way: mul_ and mul run the same kernel; otherwise `grad` may be shared with other
        # branches of the graph and a fresh tensor is needed
        g = grad.mul_(weight) if ctx.owned and grad.shape == weight.shape else grad.mul(weight)
        return (g if ctx.signed else g.mul_(scores.sign())), None, None, None, None


def _product(weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """weight * mask with the mask's 0/1 as weight's dtype: the same bits as weight * mask.to(weight.dtype).

    A bool mask on the CPU is multiplied by numpy, which casts it inside the multiplication loop: torch's own
    float * bool (and bool -> float cast) is several times slower there, and no float copy of the mask is made."""
    if mask.dtype == torch.bool and weight.device.type == "cpu" and mask.device.type == "cpu":
        w = weight.detach()
        if w.dtype in _NUMPY_FLOATS and w.is_contiguous() and mask.is_contiguous() and w.shape == mask.shape:
            return torch.from_numpy(np.multiply(w.numpy(), mask.numpy()))
    return weight * mask.to(weight.dtype)


_NUMPY_FLOATS = (torch.float32, torch.float64)  # dtypes whose products numpy computes exactly as torch does


def masked_weight(scores: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor, signed: bool = False) -> torch.Tensor:
    """The effective weight W * H, differentiable in the raw scores S through |S| (or S itself when `signed`)
    and a straight-through top-k. `mask`: bool or 0/1 in any dtype."""
    return cast(torch.Tensor, _MaskedWeight.apply(scores, weight, mask, signed, False))  # apply() is typed Any


class MaskedWeights(Mapping[str, torch.Tensor]):
    """The effective weights W * H of a training forward pass, each made when the layer asks for it, and not kept
    for the backward pass: inside `recomputing()`, autograd saves a recipe instead of W * H and the backward
    pass multiplies it again (the same product, so the same bits) when it needs it.

    What the forward pass of a masked layer used to keep alive until the backward pass, W * H (4 bytes a
    weight), is then never held for more than one layer at a time. `scores[n]`: S for every masked name n.
    `recompute`: the names whose W * H is recomputed (default: all); the others are kept as autograd keeps them,
    and with none the hooks are not even installed (their Python costs more than a small layer's memory is
    worth). `owned`: the caller's layers consume each W * H once, in a linear layer, a convolution or an
    embedding (the built-in models), so that the gradient reaching W * H is fresh and dL/dS is formed in it in
    place.
    """

    def __init__(
        self,
        scores: Mapping[str, torch.Tensor],
        weights: Mapping[str, torch.Tensor],
        masks: Mapping[str, torch.Tensor],
        *,
        signed: bool = False,
        owned: bool = False,
        recompute: Collection[str] | None = None,
    ):
        self.scores, self.weights, self.masks, self.signed, self.owned = scores, weights, masks, signed, owned
        self.recompute = frozenset(scores if recompute is None else recompute)
        self._made: dict[int, tuple[weakref.ref[torch.Tensor], str]] = {}  # id(W * H) -> (the tensor, weakly; its name)

    def __getitem__(self, name: str) -> torch.Tensor:
        w = cast(
            torch.Tensor,  # apply() is typed Any
            _MaskedWeight.apply(self.scores[name], self.weights[name], self.masks[name], self.signed, self.owned),
        )
        if name in self.recompute:
            self._made[id(w)] = (weakref.ref(w), name)
        return w

    def __iter__(self) -> Iterator[str]:
        return iter(self.scores)

    def __len__(self) -> int:
        return len(self.scores)

    @contextmanager
    def recomputing(self) -> Iterator[None]:
        """Within: a W * H (or a view of it) that an operation saves for its backward pass is saved as a recipe
        (weight, mask, the view's geometry) and multiplied again when the backward pass unpacks it."""
        if not self.recompute:
            yield
            return
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            try:
                yield
            finally:
                self._made.clear()

    def _pack(self, t: torch.Tensor) -> torch.Tensor | _Recipe:
        base = t if t._base is None else t._base
        made = self._made.get(id(base))
        if made is None or made[0]() is not base:  # not ours (an id can be reused once its tensor is gone)
            return t
        w, m = self.weights[made[1]], self.masks[made[1]]
        return _Recipe(w, m, w._version, m._version, tuple(t.shape), t.stride(), int(t.storage_offset()))


class _Recipe(NamedTuple):
    """What W * H's backward needs to make it again: the frozen weight and the mask, at their versions then."""

    weight: torch.Tensor
    mask: torch.Tensor
    weight_version: int
    mask_version: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


def _unpack(saved: torch.Tensor | _Recipe) -> torch.Tensor:
    if isinstance(saved, torch.Tensor):
        return saved
    if saved.weight._version != saved.weight_version or saved.mask._version != saved.mask_version:
        raise RuntimeError("a weight or mask used in the forward pass was modified in place before its backward pass")
    w = _product(saved.weight, saved.mask)
    contiguous = saved.offset == 0 and saved.shape == tuple(w.shape) and saved.stride == w.stride()
    return w if contiguous else w.as_strided(saved.shape, saved.stride, saved.offset)


@dataclass(frozen=True)
class Kept:
    """Kept of total mask entries, and their density (0.0 of none)."""

    kept: int
    total: int

    @property
    def density(self) -> float:
        return self.kept / self.total if self.total else 0.0

    def counted(self) -> dict[str, int | float]:
        """As a ticket's per-layer sparsity records it: kept, total and achieved sparsity."""
        return {"kept": self.kept, "total": self.total, "achieved": 1.0 - self.density}


@dataclass(frozen=True)
class MaskStats(Kept):
    """Kept/total counts and achieved density globally, and per parameter."""

    per_param: dict[str, Kept]


def mask_stats(masks: dict[str, torch.Tensor]) -> MaskStats:
    """Kept/total counts and achieved density globally and per parameter."""
    per = {n: Kept(int(m.sum()), m.numel()) for n, m in masks.items()}
    return MaskStats(sum(v.kept for v in per.values()), sum(v.total for v in per.values()), per)
