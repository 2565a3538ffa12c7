"""The Python API's data argument: a registered dataset's name, or the caller's own examples (tensors, a torch
Dataset, DataLoaders), turned into what `ticket extract` works on (data.draw_splits draws the seeded split)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Union

import torch
from torch.utils.data import DataLoader, Dataset

from ticketcli.data.datasets import Splits, draw_splits
from ticketcli.data.memory import HELD_OUT, IN_MEMORY, memory_pools, memory_splits
from ticketcli.data.registry import DatasetInfo, Pools
from ticketcli.errors import UsageError
from ticketcli.models.budget import default_max_memory
from ticketcli.specs.run import ModelSpec

Examples = Union[tuple[torch.Tensor, torch.Tensor], Dataset[Any], DataLoader[Any]]  # one set of (x, y) examples
Data = Union[str, Examples, Mapping[str, Examples], tuple[Examples, ...]]  # what extract's `data` accepts
SPLIT_KEYS = ("extract", "val", "test")
CLASSES = 1 << 16  # labels may go this high however few the examples; beyond it, up to the number of examples


@dataclass(frozen=True)
class Given:
    """The caller's examples: a training pool to split (pools) or three ready splits (splits), never both."""

    pools: Pools | None
    splits: Splits | None
    info: DatasetInfo  # shape and classes, for sizing the model as a registered dataset would


def examples(source: object, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) from a pair of tensors, a Dataset of (x, y) items or a DataLoader of (x, y) batches, in order."""
    if isinstance(source, (tuple, list)) and len(source) == 2 and all(isinstance(t, torch.Tensor) for t in source):
        return source[0], source[1]
    if isinstance(source, DataLoader):
        return _stack(source, what, batched=True)
    if isinstance(source, Dataset):
        return _stack(source, what, batched=False)  # type: ignore[arg-type]  # map-style: iterable by index
    raise UsageError(
        f"{what}: expected (x, y) tensors, a torch Dataset or a DataLoader, got {type(source).__name__}",
        hint="or a dataset name such as 'digits'",
    )


def _stack(items: Iterable[Any], what: str, *, batched: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The examples of a Dataset or DataLoader, read within the memory budget (an endless one is refused)."""
    xs, ys = [], []
    held, budget = 0, default_max_memory() or 1 << 62
    try:  # the caller's Dataset or DataLoader: a ragged batch, a string or an object is one UsageError line
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise UsageError(f"{what}: each {'batch' if batched else 'item'} must be an (x, y) pair")
            xs.append(torch.as_tensor(item[0]))
            ys.append(torch.as_tensor(item[1]))
            held += sum(t.element_size() * t.numel() for t in (xs[-1], ys[-1]))
            if held > budget:
                raise UsageError(f"{what}: its examples pass the memory budget of {budget} bytes; is it endless?")
        if not xs:
            raise UsageError(f"{what} holds no examples")
        if batched:
            return torch.cat(xs), torch.cat(ys).reshape(-1)
        return torch.stack(xs), torch.stack(ys).reshape(-1)
    except UsageError:
        raise
    except Exception as e:  # noqa: BLE001 - the caller's code, failing inside: one line, as any other bad data
        ones = "batches" if batched else "items"
        raise UsageError(
            f"{what}: its {ones} could not be read as (x, y) tensors of one shape: {type(e).__name__}: {first_line(e)}"
        ) from None


def first_line(e: BaseException) -> str:
    """An exception's text on one line, shortened."""
    return " ".join(str(e).split())[:200]


@contextmanager
def labels_within_outputs() -> Iterator[None]:
    """Where the model's outputs are only known once it runs (the caller's own module): a label beyond them, which
    torch's loss reports as an IndexError, is one UsageError."""
    try:
        yield
    except IndexError as e:
        if not str(e).startswith("Target"):
            raise
        raise UsageError(f"data: a class label is beyond the model's outputs: {first_line(e)}") from None


def given(data: object, seed_for_test: int) -> Given:
    """The caller's data, checked: one pool (x, y) / Dataset / DataLoader (a seeded share held out as its test
    set), {"train": ..., "test": ...} (a pool and its test set), or the three splits as {"extract", "val",
    "test"} or a 3-tuple."""
    if isinstance(data, Mapping):
        keys = set(data)
        if keys == set(SPLIT_KEYS):
            return _ready(tuple(data[k] for k in SPLIT_KEYS))
        if keys == {"train", "test"}:
            test = examples(data["test"], "test data")
            return _pool(memory_pools(*examples(data["train"], "train data"), test, seed_for_test))
        raise UsageError(
            f"data keys {sorted(map(str, keys))} are not a split layout",
            hint="use {'extract', 'val', 'test'} or {'train', 'test'}",
        )
    if isinstance(data, (tuple, list)) and len(data) == 3:
        return _ready(tuple(data))
    return _pool(memory_pools(*examples(data, "data"), None, seed_for_test))


def _ready(sources: tuple[object, ...]) -> Given:
    pairs = tuple(examples(s, f"{k} data") for s, k in zip(sources, SPLIT_KEYS))
    splits = memory_splits(pairs, split_seed=0)
    return Given(None, splits, _info(splits.x_extract, (splits.y_extract, splits.y_val, splits.y_test)))


def _pool(pools: Pools) -> Given:
    return Given(pools, None, _info(pools.x_train, (pools.y_train, pools.y_test)))


def _info(x: torch.Tensor, labels: tuple[torch.Tensor, ...]) -> DatasetInfo:
    """A registered dataset's description of the caller's data: (C, H, W) as images have it ((1, 1, F) for flat
    features, so that an MLP is sized by F), classes = the largest label + 1, which the data bounds (class_count);
    the model it sizes then meets the memory budget (settings.resolve)."""
    shape = tuple(x.shape[1:])
    chw = (int(shape[0]), int(shape[1]), int(shape[2])) if len(shape) == 3 else (1, 1, int(x[0].numel()))
    classes = class_count(labels)

    def load(_: object) -> Pools:
        raise UsageError("in-memory data has no files to load")  # never called: runs get the splits themselves

    return DatasetInfo(IN_MEMORY, chw, classes, 0, 0, load)


def class_count(labels: tuple[torch.Tensor, ...]) -> int:
    """The largest label + 1, where labels are class indices: below the number of examples, or CLASSES when that is
    more (a huge label would size a model's output by it); beyond that one UsageError, before anything is built."""
    top = max(int(y.max()) for y in labels)
    bound = max(CLASSES, sum(len(y) for y in labels))
    if top >= bound:
        raise UsageError(
            f"data: class label {top} is out of range: labels are class indices, below {bound}",
            hint=f"number the classes 0, 1, 2, ...: up to {CLASSES} classes, or as many as there are examples",
        )
    return top + 1


def check_fits(model: ModelSpec, x: torch.Tensor, classes: int) -> None:
    """The caller's examples fit the model: as many input values per example as its input (where its spec says),
    and a class label below its number of outputs; else one UsageError naming both."""
    mlp = model.arch == "mlp" and bool(model.widths)
    inputs = model.widths[0] if mlp else None if model.input is None else math.prod(model.input)
    outputs = model.widths[-1] if mlp else model.classes
    features = int(x[0].numel())
    if inputs is not None and features != inputs:
        raise UsageError(f"data: examples of {features} values, but the model {model.to_string()} takes {inputs}")
    if outputs is not None and classes > outputs:
        raise UsageError(
            f"data: class labels up to {classes - 1}, but the model {model.to_string()} has {outputs} outputs"
        )


def splits_for(g: Given, n_extract: int | None, n_val: int | None, split_seed: int) -> Splits:
    """The splits of the caller's data: ready ones as given (recording the seed), a pool drawn by data.draw_splits
    (n_val defaults to HELD_OUT of the pool, n_extract to the rest)."""
    if g.splits is not None:
        if n_extract is not None or n_val is not None:
            raise UsageError("n_extract and n_val draw splits from one pool; the data came already split")
        return Splits(**{k: getattr(g.splits, k) for k in _TENSORS}, info={**g.splits.info, "split_seed": split_seed})
    assert g.pools is not None
    n = len(g.pools.y_train)
    n_v = max(1, int(n * HELD_OUT)) if n_val is None else n_val
    n_e = n - n_v if n_extract is None else n_extract
    if n_e < 1 or n_v < 1:
        raise UsageError(f"data: {n} training examples leave none for extraction or validation")
    return draw_splits(g.pools, IN_MEMORY, n_e, n_v, split_seed)


_TENSORS = ("x_extract", "y_extract", "x_val", "y_val", "x_test", "y_test")
