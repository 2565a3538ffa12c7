"""Structured selection (structure.py says what the patterns mean): ranked values become N:M or whole-block masks.

N:M: in every run of M consecutive entries of a row of the (out, -1) matrix, the N largest ranked values are kept,
ties to the lowest index; the group's budget plays no part (the pattern fixes every run's count), and so do
further parts (double-scoring's auxiliary scores, which only move a threshold that N:M does not have).
Blocks: each block is scored by the MEAN of its ranked values (computed in float64; an edge block's mean over its
own entries, so a smaller block is not ranked lower for its size), and the group keeps exactly k blocks of all its
parts' blocks together, ties to the lowest index of their concatenation as exact.joint_topk_masks, blocks in
row-major order. An entry ranked -inf (inactive, or pruned in an earlier round) makes its block's mean -inf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ticketcli.selection.exact import joint_topk_masks
from ticketcli.selection.structure import Blocks, Pattern, Structure, block_grid, matrix_shape


def nm_mask(values: torch.Tensor, structure: Structure) -> torch.Tensor:
    """Bool mask of `values`' shape keeping the n largest of every m consecutive entries of each row of the (out, -1)
    matrix (ties to the lowest index: a stable descending sort)."""
    rows, cols = matrix_shape(values.shape)
    runs = values.detach().reshape(rows, cols // structure.m, structure.m)
    order = torch.sort(runs, dim=2, descending=True, stable=True).indices[..., : structure.n]
    keep = torch.zeros(runs.shape, dtype=torch.bool, device=values.device)
    keep.scatter_(2, order, True)
    return keep.view(values.shape)


def _padded(values: torch.Tensor, blocks: Blocks) -> torch.Tensor:
    """The (out, -1) matrix zero-padded to whole blocks, as (block rows, R, block columns, C), float64."""
    rows, cols = matrix_shape(values.shape)
    br, bc = block_grid(values.shape, blocks)
    out = torch.zeros(br * blocks.rows, bc * blocks.cols, dtype=torch.float64, device=values.device)
    out[:rows, :cols] = values.detach().reshape(rows, cols)
    return out.view(br, blocks.rows, bc, blocks.cols)


def block_sizes(shape: Sequence[int], blocks: Blocks, device: torch.device | str = "cpu") -> torch.Tensor:
    """Entries per block (edge blocks fewer), as (block rows, block columns) float64."""
    return _padded(torch.ones(tuple(shape), device=device), blocks).sum(dim=(1, 3))


def block_scores(values: torch.Tensor, blocks: Blocks) -> torch.Tensor:
    """The mean of each block's values, (block rows, block columns) float64."""
    return _padded(values, blocks).sum(dim=(1, 3)) / block_sizes(values.shape, blocks, values.device)


def expand(block_mask: torch.Tensor, shape: Sequence[int], blocks: Blocks) -> torch.Tensor:
    """A (block rows, block columns) bool mask as the entries' mask of `shape`."""
    rows, cols = matrix_shape(shape)
    full = block_mask.repeat_interleave(blocks.rows, 0).repeat_interleave(blocks.cols, 1)
    return full[:rows, :cols].reshape(tuple(shape))


def units(shape: Sequence[int], pattern: Pattern | None) -> int:
    """What a group's budget counts for a parameter of this shape: its blocks, else its entries."""
    if isinstance(pattern, Blocks):
        br, bc = block_grid(shape, pattern)
        return br * bc
    return int(torch.Size(tuple(shape)).numel())


def active_units(active: torch.Tensor, pattern: Pattern | None) -> int:
    """The active units of an active-entries mask: its blocks with any active entry, else its active entries."""
    if isinstance(pattern, Blocks):
        return int((block_scores(active.float(), pattern) > 0).sum())
    return int(active.sum())


def patterned_masks(
    parts: Mapping[str, Sequence[torch.Tensor]], names: Sequence[str], k: int, pattern: Pattern
) -> list[torch.Tensor]:
    """groups.joint_masks under a pattern: the masks of the first parts (in `names` order), then those of each
    parameter's further parts in turn; `k` counts blocks (N:M: unused, every run keeps its N)."""
    firsts = [parts[n][0] for n in names]
    further = [a for n in names for a in parts[n][1:]]
    if isinstance(pattern, Structure):
        return [nm_mask(v, pattern) for v in firsts] + [torch.zeros_like(a, dtype=torch.bool) for a in further]
    every = [*firsts, *further]
    kept = joint_topk_masks([block_scores(v, pattern) for v in every], k)
    return [expand(m, v.shape, pattern) for m, v in zip(kept, every)]
