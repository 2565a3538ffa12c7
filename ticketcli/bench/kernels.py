"""The sparse layers the bench's forms are made of, and what a mask allows: a Linear layer computing with a CSR, a
block-sparse (BSR) or a semi-structured (N:M) weight, the block size a mask is made of (`block_of`), and whether a
mask is at most N kept of every M consecutive weights along the input dimension (`is_n_of_m`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import torch
from torch import nn

BLOCK_SIDES = (32, 16, 8, 4, 2, 1)
MIN_BLOCK = 4  # a block of fewer entries is no block structure (1x1 is every mask; 1x2 gains nothing)


def block_of(mask: torch.Tensor, *, square: bool = False) -> tuple[int, int] | None:
    """The largest block R x C (at least MIN_BLOCK entries, R and C powers of two dividing the 2-D mask's sides;
    R = C with `square`, all torch's CPU BSR product takes) such that the mask keeps or drops every block whole;
    None when there is none. Ties: the squarer block."""
    if mask.dim() != 2:
        return None
    rows, cols = mask.shape
    m = mask.to(torch.bool)
    shapes = sorted(
        (
            (r, c)
            for r in BLOCK_SIDES
            for c in BLOCK_SIDES
            if r * c >= MIN_BLOCK and rows % r == 0 and cols % c == 0 and (r == c or not square)
        ),
        key=lambda rc: (-rc[0] * rc[1], abs(rc[0] - rc[1])),
    )
    for r, c in shapes:
        kept = m.reshape(rows // r, r, cols // c, c).sum(dim=(1, 3))
        if bool(((kept == 0) | (kept == r * c)).all()):
            return r, c
    return None


def is_n_of_m(mask: torch.Tensor, n: int = 2, m: int = 4) -> bool:
    """Whether a 2-D mask keeps at most n of every m consecutive entries along its input dimension (its rows in
    groups of m columns)."""
    if mask.dim() != 2 or mask.shape[1] % m:
        return False
    return bool((mask.to(torch.bool).reshape(mask.shape[0], -1, m).sum(-1) <= n).all())


def flat(x: torch.Tensor) -> tuple[torch.Tensor, torch.Size]:
    """(x as a 2-D batch of rows, the leading shape to restore)."""
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


class SparseLinear(nn.Module):
    """y = x W^T + b with W a sparse (CSR or BSR) matrix: computed as (W @ x^T)^T, the product torch's sparse
    kernels provide (sparse times dense)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = weight
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2, lead = flat(x)
        y = torch.mm(self.weight, x2.t()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, y.shape[-1])

    def tensors(self) -> Iterator[torch.Tensor]:
        """The tensors it holds (its weight's parts: values and indices), for the form's memory."""
        w = self.weight
        yield from (w.crow_indices(), w.col_indices(), w.values())  # CSR and BSR alike
        if self.bias is not None:
            yield self.bias


def csr(weight: torch.Tensor) -> torch.Tensor:
    """A dense 2-D weight (zeros where masked) as CSR."""
    return weight.to_sparse_csr()


def bsr(weight: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """A dense 2-D weight as BSR of `block` (torch calls its BSR support beta and warns once: not ours to show)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return weight.to_sparse_bsr(block)


def bsr_tensor(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """A BSR matrix from its arrays (read from a file: its invariants checked)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_bsr_tensor(crow, col, values, size=shape, check_invariants=True)


class SemiStructuredLinear(nn.Module):
    """y = x W^T + b with W in torch's semi-structured (2:4) sparse format (CUDA only)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        from torch.sparse import to_sparse_semi_structured

        self.weight = to_sparse_semi_structured(weight)
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2, lead = flat(x)
        y = torch.nn.functional.linear(x2, self.weight, self.bias)
        return y.reshape(*lead, y.shape[-1])


def tensor_bytes(tensors: Iterator[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def module_bytes(module: nn.Module) -> int:
    """The bytes of every tensor a module holds: its parameters and buffers, and its sparse layers' parts."""
    total = tensor_bytes(iter([*module.parameters(), *module.buffers()]))
    for sub in module.modules():
        if isinstance(sub, SparseLinear):
            total += tensor_bytes(sub.tensors())
        elif isinstance(sub, SemiStructuredLinear):  # the packed kept values and their metadata
            parts = (getattr(sub.weight, a, None) for a in ("packed", "meta"))
            total += tensor_bytes(p for p in parts if isinstance(p, torch.Tensor))
            total += 0 if sub.bias is None else tensor_bytes(iter([sub.bias]))
    return total
