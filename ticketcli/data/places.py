"""Where a registered dataset's files are looked for, torch-free: the system folders, each file-based dataset's
sub-folders, files and hint, and the look-up itself. The command line checks here that a dataset's files exist
(or that --download may fetch them) before it imports torch; datasets.py's loaders find their files the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ticketcli.errors import UsageError
from ticketcli.specs.run import DataSpec

SYSTEM_DIRS = ("/usr/share/datasets",)  # Debian's dataset-fashion-mnist installs /usr/share/datasets/fashion-mnist

IDX_FILES = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta")


def idx_path(d: Path, stem: str) -> Path | None:
    """An IDX file in `d`, gzip'd or plain."""
    for name in (stem + ".gz", stem):
        if (d / name).is_file():
            return d / name
    return None


def find_idx_dir(search_dirs: tuple[str, ...], subdirs: tuple[str, ...]) -> Path | None:
    """The first directory that holds all four IDX files (plain or .gz)."""
    for base in search_dirs:
        for sub in subdirs:
            d = Path(base) / sub if sub else Path(base)
            if all(idx_path(d, stem) is not None for stem in IDX_FILES.values()):
                return d
    return None


def find_cifar10_dir(search_dirs: tuple[str, ...], subdirs: tuple[str, ...]) -> Path | None:
    """The first directory that holds CIFAR-10's python batches."""
    for base in search_dirs:
        for sub in subdirs:
            d = Path(base) / sub if sub else Path(base)
            if all((d / f).is_file() for f in CIFAR10_FILES):
                return d
    return None


@dataclass(frozen=True)
class Place:
    """A file-based dataset's look-up: its title in messages, the sub-folders of each search folder, the finder,
    and the hint of a dataset that is not found."""

    title: str
    subdirs: tuple[str, ...]
    cifar: bool  # CIFAR-10's batches, else four IDX files
    hint: str

    def find(self, search_dirs: tuple[str, ...]) -> Path | None:
        return (find_cifar10_dir if self.cifar else find_idx_dir)(search_dirs, self.subdirs)

    def not_found(self, search_dirs: tuple[str, ...]) -> UsageError:
        looked = ", ".join(search_dirs) or "(nowhere)"
        return UsageError(
            f"{self.title} not found (looked in {looked})",
            hint=self.hint + ", or add --download to fetch it with torchvision",
        )


PLACES = {
    "fashion-mnist": Place(
        "FashionMNIST",
        ("", "fashion-mnist", "FashionMNIST/raw", "fashion_mnist"),
        False,
        "install it with `apt-get install dataset-fashion-mnist` or pass --data-dir DIR holding the four IDX files",
    ),
    "mnist": Place(
        "MNIST",
        ("", "mnist", "MNIST/raw"),
        False,
        "pass --data-dir DIR holding the four MNIST IDX files (train-images-idx3-ubyte[.gz], ...)",
    ),
    "cifar10": Place(
        "CIFAR-10",
        (CIFAR10_DIR, f"cifar10/{CIFAR10_DIR}", ""),
        True,
        f"pass --data-dir DIR holding {CIFAR10_DIR}/ (the python version: data_batch_1..5, test_batch, batches.meta)",
    ),
}


def check_present(spec: DataSpec) -> None:
    """Refuse a file-based dataset whose files are in none of the search folders and may not be downloaded (the
    loader would refuse it the same way, after torch is imported); datasets without files pass."""
    place = PLACES.get(spec.name)
    if place is not None and not spec.download and place.find(spec.search_dirs) is None:
        raise place.not_found(spec.search_dirs)
