"""The registered datasets' loaders (their files found, read without trusting them, normalised) and the seeded
extraction/validation splits with the full test set as in-memory tensors; what each dataset is, torch-free, is
declared in registry.py."""

from __future__ import annotations

import gzip
import io
import math
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ticketcli.data import cifar
from ticketcli.data.digits import digits_arrays
from ticketcli.data.places import CIFAR10_DIR, CIFAR10_FILES, IDX_FILES, PLACES, idx_path
from ticketcli.data.registry import DATASETS, Normalization, Pools
from ticketcli.errors import UsageError
from ticketcli.seeding import generator
from ticketcli.specs.run import DataSpec


@dataclass(frozen=True)
class Splits:
    """Extraction, validation and test tensors, all on one device."""

    x_extract: torch.Tensor  # (N_e, C, H, W)
    y_extract: torch.Tensor  # (N_e,)
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    info: dict[str, Any]  # dataset name, sizes, split seed, source

    @property
    def extract(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of the extraction split."""
        return self.x_extract, self.y_extract

    @property
    def val(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of the validation split."""
        return self.x_val, self.y_val

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) of the test set."""
        return self.x_test, self.y_test

    def to(self, device: torch.device) -> Splits:
        t = {k: getattr(self, k).to(device) for k in ("x_extract", "y_extract", "x_val", "y_val", "x_test", "y_test")}
        return Splits(**t, info=self.info)


IDX_CHUNK = 1 << 20  # bytes inflated per read


def read_idx(path: Path, item: tuple[int, ...], max_n: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (optionally gzip'd) of N <= max_n items of shape `item`: labels (N,) for
    item (), images (N, H, W) for item (H, W). The header is checked before the body is inflated, and exactly the
    declared bytes are read (plus one, to catch trailing data), so a gzip bomb stops at the declared size."""
    expect = f"({', '.join(['N', *map(str, item)])}{',' if not item else ''}) with N <= {max_n}"
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4 or head[:2] != b"\0\0":
                raise UsageError(f"{path} is not an IDX file (bad magic number)")
            if head[2] != 0x08:
                raise UsageError(f"{path}: IDX data type 0x{head[2]:02x} is not unsigned bytes (0x08)")
            if head[3] != 1 + len(item):
                raise UsageError(f"{path}: a {head[3]}-d array, expected {1 + len(item)}-d {expect}")
            raw_dims = f.read(4 * head[3])
            if len(raw_dims) < 4 * head[3]:
                raise UsageError(f"{path} is truncated inside its header")
            dims = struct.unpack(f">{head[3]}I", raw_dims)
            if dims[1:] != item or dims[0] > max_n:
                raise UsageError(f"{path}: header declares shape {dims}, expected {expect}")
            body = _read_exactly(f, math.prod(dims), path, dims)
            if f.read(1):
                raise UsageError(f"{path} has data after the {math.prod(dims)} bytes its header declares")
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise UsageError(
            f"cannot read {path}: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
        ) from None
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)  # writable: a bytearray, so torch can own it


def _read_exactly(f: io.BufferedIOBase, n: int, path: Path, dims: tuple[int, ...]) -> bytearray:
    body = bytearray(n)  # at most 47 MB: the header was checked against the official sizes
    view, got = memoryview(body), 0
    while got < n:
        k = f.readinto(view[got : got + IDX_CHUNK])
        if not k:
            raise UsageError(f"{path} is truncated: header declares {dims} ({n} bytes), found {got}")
        got += k
    return body


IDX_SHAPES = {"x": (28, 28), "y": ()}  # MNIST and FashionMNIST: 28x28 images, one label each
IDX_COUNTS = {"train": 60000, "test": 10000}  # the official files' sizes; a header may declare fewer, never more


def _idx_pools(d: Path, norm: Normalization, classes: int = 10) -> Pools:
    paths: dict[str, Path] = {}
    for key, stem in IDX_FILES.items():
        path = idx_path(d, stem)
        if path is None:  # the folder was chosen because it held all four files: one went away since
            raise UsageError(f"{d / stem}(.gz) is missing")
        paths[key] = path
    arrays = {key: read_idx(path, IDX_SHAPES[key[0]], IDX_COUNTS[key[2:]]) for key, path in paths.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.shape[0] == 0:
            raise UsageError(f"{paths[f'x_{split}']} holds no images")
        if x.shape[0] != y.shape[0]:
            raise UsageError(f"{paths[f'y_{split}']} holds {y.shape[0]} labels for {x.shape[0]} {split} images")
        if int(y.max()) >= classes:
            raise UsageError(f"{paths[f'y_{split}']}: labels must lie in 0..{classes - 1}, found {int(y.max())}")

    def prepare(x: torch.Tensor) -> torch.Tensor:  # uint8 (N, H, W) -> normalised float32 (N, 1, H, W)
        return ((x.to(torch.float32) / norm.scale - norm.mean[0]) / norm.std[0]).unsqueeze(1)

    return Pools(
        torch.from_numpy(arrays["x_train"]),
        torch.from_numpy(arrays["y_train"].astype(np.int64)),
        torch.from_numpy(arrays["x_test"]),
        torch.from_numpy(arrays["y_test"].astype(np.int64)),
        source=str(d),
        prepare=prepare,
    )


def _find_or_download(spec: DataSpec, name: str, download: Callable[[str], Path]) -> Path:
    """The first search dir (with one of the dataset's sub-folders, places.py) holding the dataset, else a
    torchvision download if allowed."""
    place = PLACES[name]
    d = place.find(spec.search_dirs)
    if d is None and spec.download and spec.download_dir is not None:
        try:
            d = download(spec.download_dir)
        except Exception as e:  # network errors come in many types; all mean the same to the user
            raise UsageError(f"{place.title} download failed: {download_reason(e)}", hint=place.hint) from None
    if d is None:
        raise place.not_found(spec.search_dirs)
    return d


def normalization(name: str) -> Normalization:
    """The registered dataset's normalisation (registry.py declares it, so that exports read it without torch)."""
    norm = DATASETS.get(name).normalization
    assert norm is not None, name  # every image dataset declares one
    return norm


def download_reason(e: BaseException) -> str:
    """A failed download's reason as one line. torchvision's first line ("Error downloading FILE:") says nothing
    alone: the last mirror's error, its last line, follows it (urllib's `<urlopen error [Errno -2] X>` as X)."""
    lines = [re.sub(r"^<urlopen error (.*)>$", r"\1", ln.strip()) for ln in str(e).splitlines() if ln.strip()]
    lines = [re.sub(r"^\[Errno -?\d+\] ", "", line) for line in lines]
    if not lines:
        return f"{type(e).__name__} (no message)"
    return (f"{lines[0]} {lines[-1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0])[:300]


def _idx_dataset(tv_class: str, name: str) -> Callable[[DataSpec], Pools]:
    """A loader for an MNIST-format dataset (four IDX files, plain or gzip'd; torchvision keeps them in
    <root>/<tv_class>/raw), normalised as the registry declares dataset `name`."""

    def download(root: str) -> Path:
        import torchvision.datasets

        cls = getattr(torchvision.datasets, tv_class)
        cls(root=root, train=True, download=True)
        cls(root=root, train=False, download=True)
        return Path(root) / tv_class / "raw"

    def load(spec: DataSpec) -> Pools:
        return _idx_pools(_find_or_download(spec, name, download), normalization(name))

    return load


load_fashion_mnist = _idx_dataset("FashionMNIST", "fashion-mnist")
load_mnist = _idx_dataset("MNIST", "mnist")


CIFAR10_MEAN = normalization("cifar10").mean  # the standard per-channel statistics of the CIFAR-10 training set
CIFAR10_STD = normalization("cifar10").std


def load_cifar10(spec: DataSpec) -> Pools:
    def download(root: str) -> Path:
        from torchvision.datasets import CIFAR10

        CIFAR10(root=root, train=True, download=True)
        return Path(root) / CIFAR10_DIR

    d = _find_or_download(spec, "cifar10", download)
    per_batch = cifar.read_meta(d / "batches.meta")
    train = [cifar.read_batch(d / f) for f in CIFAR10_FILES[:5]]
    for f, (x, _) in zip(CIFAR10_FILES, train):
        if len(x) != per_batch:
            raise UsageError(f"{d / f} holds {len(x)} images; batches.meta says every training batch holds {per_batch}")
    x_test, y_test = cifar.read_batch(d / "test_batch")
    norm = normalization("cifar10")
    mean = torch.tensor(norm.mean).view(1, 3, 1, 1)
    std = torch.tensor(norm.std).view(1, 3, 1, 1)

    def prepare(x: torch.Tensor) -> torch.Tensor:  # uint8 (N, 3, 32, 32) -> per-channel normalised float32
        return (x.to(torch.float32) / norm.scale - mean) / std

    return Pools(
        torch.from_numpy(np.concatenate([x for x, _ in train])),
        torch.from_numpy(np.concatenate([y for _, y in train])),
        torch.from_numpy(x_test.copy()),
        torch.from_numpy(y_test),
        source=str(d),
        prepare=prepare,
    )


DIGITS_TEST = 397  # scikit-learn's digits has no test split: a fixed one is held out (seed-independent)


def load_digits(spec: DataSpec) -> Pools:
    data, target = digits_arrays()
    norm = normalization("digits")
    x = torch.from_numpy(data.astype(np.float32) / norm.scale).reshape(-1, 1, 8, 8)  # raw: the counts / 16
    y = torch.from_numpy(target)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(20260101))
    test, train = perm[:DIGITS_TEST], perm[DIGITS_TEST:]

    def prepare(raw: torch.Tensor) -> torch.Tensor:  # counts / 16 in [0, 1] -> normalised
        return (raw - norm.mean[0]) / norm.std[0]

    return Pools(x[train], y[train], x[test], y[test], source="sklearn.datasets.load_digits", prepare=prepare)


def load_splits(spec: DataSpec) -> Splits:
    """Shuffle the training pool with the split seed: first n_extract for extraction, next n_val for validation."""
    info = DATASETS.get(spec.name)
    pools = info.load(spec)
    sizes = pools.sizes or (info.n_extract, info.n_val)
    n_e = spec.n_extract if spec.n_extract is not None else sizes[0]
    n_v = spec.n_val if spec.n_val is not None else sizes[1]
    return draw_splits(pools, spec.name, n_e, n_v, spec.split_seed)


def draw_splits(pools: Pools, name: str, n_e: int, n_v: int, split_seed: int) -> Splits:
    """The seeded extraction/validation split of a training pool, plus the whole test set (every dataset, in
    memory or registered, is split by this one function)."""
    n = len(pools.y_train)
    if n_e + n_v > n:
        what = "training blocks" if pools.record is not None and "text" in pools.record else "training examples"
        raise UsageError(f"{name} has {n} {what}; cannot draw {n_e} extraction + {n_v} validation")
    perm = torch.randperm(n, generator=generator(split_seed, "split"))
    ext, val = perm[:n_e], perm[n_e : n_e + n_v]
    meta = {
        "dataset": name,
        "n_extract": n_e,
        "n_val": n_v,
        "n_test": len(pools.y_test),
        "split_seed": split_seed,
        "source": pools.source,
        **(pools.record or {}),
    }
    prep = pools.prepare
    return Splits(
        prep(pools.x_train[ext]),
        pools.y_train[ext],
        prep(pools.x_train[val]),
        pools.y_train[val],
        prep(pools.x_test),
        pools.y_test,
        meta,
    )
