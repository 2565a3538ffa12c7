"""DATASETS, the registered datasets by name, torch-free: each declared once below (its description, shape, classes,
default split sizes) with the loader datasets.py holds, imported only when the dataset is loaded. `--help`,
`ticket list datasets` and the resolution of --dataset read it without torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ticketcli.registry import Registry, load
from ticketcli.specs.run import DataSpec

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Pools:
    """A dataset's training pool and test set as stored (e.g. uint8), labels int64; `prepare` turns rows into
    normalised float32 (N, C, H, W) and is applied only to the rows a split uses."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    source: str  # where the files came from, for reports
    prepare: Callable[[torch.Tensor], torch.Tensor] = lambda x: x


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    shape: tuple[int, int, int]  # (C, H, W)
    classes: int
    n_extract: int  # default split sizes (the paper's 5000 / 5000 for FashionMNIST)
    n_val: int
    load: Callable[[DataSpec], Pools]
    description: str = ""  # its one line in `ticket list datasets`

    @property
    def in_features(self) -> int:
        c, h, w = self.shape
        return c * h * w


def loader(name: str) -> Callable[[DataSpec], Pools]:
    """The loader `name` of datasets.py, imported (with torch) when the dataset is first loaded."""
    return lambda spec: cast(Callable[[DataSpec], Pools], load(f"ticketcli.data.datasets:{name}"))(spec)


DATASETS: Registry[DatasetInfo] = Registry("dataset")
DATASETS.register("fashion-mnist")(
    DatasetInfo(
        "fashion-mnist",
        (1, 28, 28),
        10,
        5000,
        5000,
        loader("load_fashion_mnist"),
        "FashionMNIST: 28x28 clothing images, 10 classes (the paper's dataset).",
    )
)
DATASETS.register("digits")(
    DatasetInfo(
        "digits",
        (1, 8, 8),
        10,
        1000,
        400,
        loader("load_digits"),
        "The 8x8 digits bundled with scikit-learn, 10 classes: needs no files.",
    )
)
DATASETS.register("mnist")(
    DatasetInfo(
        "mnist",
        (1, 28, 28),
        10,
        5000,
        5000,
        loader("load_mnist"),
        "MNIST: 28x28 handwritten digits, 10 classes (files or --download).",
    )
)
DATASETS.register("cifar10")(
    DatasetInfo(
        "cifar10",
        (3, 32, 32),
        10,
        5000,
        5000,
        loader("load_cifar10"),
        "CIFAR-10: 32x32 colour images, 10 classes (files or --download).",
    )
)
