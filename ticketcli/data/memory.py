"""Data the caller holds in memory (tensors): checked, turned into the Pools and Splits that registered datasets
give, and split by the same seeded draw (data.draw_splits)."""

from __future__ import annotations

import torch

from ticketcli.data.datasets import Splits
from ticketcli.data.registry import Pools
from ticketcli.errors import UsageError
from ticketcli.seeding import generator

IN_MEMORY = "in-memory"  # the dataset name a ticket records when its data came from the caller's tensors
HELD_OUT = 0.2  # fraction of a single in-memory pool kept as its test set, and the default validation fraction


def memory_pools(x: torch.Tensor, y: torch.Tensor, test: tuple[torch.Tensor, torch.Tensor] | None, seed: int) -> Pools:
    """A caller's tensors as Pools: (x, y) is the training pool; without `test`, a seeded HELD_OUT share of it
    becomes the test set (drawn with its own generator, so the extraction/validation split stays draw_splits')."""
    x, y = check_examples(x, y, "data")
    if test is not None:
        xt, yt = check_examples(*test, "test data")
        check_alike({"train data": x, "test data": xt})
        return Pools(x, y, xt, yt, source="tensors")
    n_test = max(1, int(len(y) * HELD_OUT))
    perm = torch.randperm(len(y), generator=generator(seed, "held-out test"))
    keep, held = perm[n_test:], perm[:n_test]
    return Pools(x[keep], y[keep], x[held], y[held], source="tensors")


def memory_splits(
    splits: tuple[tuple[torch.Tensor, torch.Tensor], ...], split_seed: int, name: str = IN_MEMORY
) -> Splits:
    """Splits the caller made themselves ((x, y) for extraction, validation and test), taken as they are."""
    (xe, ye), (xv, yv), (xt, yt) = (
        check_examples(x, y, f"{what} data") for (x, y), what in zip(splits, ("extraction", "validation", "test"))
    )
    check_alike({"extraction data": xe, "validation data": xv, "test data": xt})
    meta = {"dataset": name, "n_extract": len(ye), "n_val": len(yv), "n_test": len(yt), "split_seed": split_seed}
    return Splits(xe, ye, xv, yv, xt, yt, {**meta, "source": "tensors"})


def check_examples(x: torch.Tensor, y: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs (N, ...) of floats and N integer class labels as float32 and int64 (the dtypes of the registered
    datasets), or one UsageError line saying what is wrong."""
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise UsageError(f"{what} must be tensors (x, y), got ({type(x).__name__}, {type(y).__name__})")
    if x.dim() < 2 or y.dim() != 1 or len(x) != len(y) or len(y) == 0:
        raise UsageError(f"{what}: x must be (N, ...) and y (N,) with N > 0, got {tuple(x.shape)} and {tuple(y.shape)}")
    if not x.is_floating_point() or y.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise UsageError(f"{what}: x must hold floats and y integer class labels, got {x.dtype} and {y.dtype}")
    if int(y.min()) < 0:
        raise UsageError(f"{what}: class labels must be >= 0, got {int(y.min())}")
    x = x.to(torch.float32)  # a float64 beyond float32's range is infinite there, and refused with the rest
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise UsageError(f"{what}: x must be finite, got {bad} of {x.numel()} values NaN or infinite")
    return x, y.to(torch.int64)


def check_alike(sets: dict[str, torch.Tensor]) -> None:
    """The inputs of every split (what -> x) have one shape beyond the first dimension, or one UsageError."""
    shapes = {what: tuple(x.shape[1:]) for what, x in sets.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{what} {list(shape)}" for what, shape in shapes.items())
        raise UsageError(f"the examples' shapes differ between splits: {listed}")
