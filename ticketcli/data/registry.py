"""DATASETS, the registered datasets by name, torch-free: each declared once below (its description, shape, classes,
default split sizes, normalisation) with the loader datasets.py holds, imported only when the dataset is loaded.
`--help`, `ticket list datasets`, the resolution of --dataset and the exports' metadata read it without torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

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
    sizes: tuple[int, int] | None = None  # default (extraction, validation) sizes, where the data decides them
    record: dict[str, Any] | None = None  # what the ticket's `data` records beside the split (the text's digest)


@dataclass(frozen=True)
class Normalization:
    """How a dataset's loader turns its raw values into the network's inputs, declared once here so that exports
    and the manual read it without torch: `raw` is the stored value divided by `scale` (pixels / 255, in [0, 1]),
    and the network takes (raw - mean) / std, per channel (one value for one channel)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    scale: float  # the stored values' divisor: raw = stored / scale, in [0, 1]
    raw: str  # the raw input in words, for the export metadata and the manual

    def to_dict(self) -> dict[str, list[float] | float | str]:
        """{"mean": [...], "std": [...], "scale": s, "raw": "..."}: one float per channel."""
        return {"mean": list(self.mean), "std": list(self.std), "scale": self.scale, "raw": self.raw}


PIXELS = "pixel values / 255, in [0, 1]"
IDS = "character ids (int64) into the text's sorted characters, not scaled"


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    shape: tuple[int, int, int]  # (C, H, W)
    classes: int
    n_extract: int  # default split sizes (the paper's 5000 / 5000 for FashionMNIST)
    n_val: int
    load: Callable[[DataSpec], Pools]
    description: str = ""  # its one line in `ticket list datasets`
    # what the loader does to the stored values (None: a dataset whose inputs are not scaled, e.g. character ids)
    normalization: Normalization | None = None
    text: bool = False  # character ids for a character-level model, next-character targets (data/lm.py)

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
        Normalization((0.2860,), (0.3530,), 255.0, PIXELS),
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
        # mean / std of the counts / 16 over all 1797 images
        Normalization((0.3053,), (0.3760,), 16.0, "scikit-learn's 0..16 pixel counts / 16, in [0, 1]"),
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
        Normalization((0.1307,), (0.3081,), 255.0, PIXELS),  # the usual MNIST statistics
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
        # the standard per-channel (R, G, B) statistics of the CIFAR-10 training set
        Normalization((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), 255.0, PIXELS + ", channels R, G, B"),
    )
)
DATASETS.register("text")(
    DatasetInfo(
        "text",
        (1, 1, 1),  # unused: a block's length is the model's context
        0,  # the vocabulary comes from the text
        6000,  # blocks, at most: a shorter text gives 90% / 10% of the blocks left after the test set (data/lm.py)
        600,
        lambda spec: cast(Callable[[DataSpec], Pools], load("ticketcli.data.lm:load_text"))(spec),
        "Next-character prediction for gpt-nano: the fortunes files or --text FILE (sizes in blocks, at most).",
        # the identity: ids are taken as they are (an export's --with-preprocessing has nothing to fold in)
        Normalization((0.0,), (1.0,), 1.0, IDS),
        text=True,
    )
)
