"""MNIST (IDX) and CIFAR-10 (python pickle batches) in their exact on-disk formats, through the real loaders."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CIFAR_BATCH, CIFAR_TEST, NAMES, fake_images, write_cifar, write_idx
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.datasets import CIFAR10_MEAN, CIFAR10_STD, load_splits
from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.specs.run import DataSpec

N_BATCH, N_TEST = CIFAR_BATCH, CIFAR_TEST  # write_cifar's batch sizes; write_mnist's test set is as large


def write_mnist(d: Path, seed: int = 0, gz: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": fake_images(120, seed + 1),
        "y_train": rng.integers(0, 10, 120, dtype=np.uint8),
        "x_test": fake_images(N_TEST, seed + 2),
        "y_test": rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }
    d.mkdir(parents=True, exist_ok=True)
    for key, stem in NAMES.items():
        write_idx(d / (stem + (".gz" if gz else "")), arrays[key])
    return arrays


def rewrite(path: Path, **entries) -> None:
    """Replace entries of a batch written by write_cifar, keeping the rest of the real format."""
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="latin1")
    path.write_bytes(pickle.dumps({**batch, **entries}, protocol=2))


def image_id(x: torch.Tensor) -> list[int]:
    """Undo the per-channel normalisation of the red channel and read back the ids."""
    red = x[:, 0].double() * CIFAR10_STD[0] + CIFAR10_MEAN[0]
    px = torch.round(red * 255.0).to(torch.int64)
    return (px[:, 0, 0] + 256 * px[:, 0, 1]).tolist()


def test_cifar10_splits_from_pickle_batches(tmp_path):
    d = write_cifar(tmp_path)
    s = load_splits(DataSpec(name="cifar10", n_extract=40, n_val=25, split_seed=3, search_dirs=(str(tmp_path),)))
    assert s.x_extract.shape == (40, 3, 32, 32) and s.x_test.shape == (N_TEST, 3, 32, 32)
    assert s.x_extract.dtype == torch.float32 and s.info["source"] == str(d)
    ext, val = image_id(s.x_extract), image_id(s.x_val)
    assert set(ext).isdisjoint(val) and set(ext) | set(val) <= set(range(5 * N_BATCH))
    assert image_id(s.x_test) == list(range(1000, 1000 + N_TEST))  # the whole test batch, in order
    # labels travel with their images, and the layout is 1024 red, 1024 green, 1024 blue values, row-major
    with open(d / "data_batch_2", "rb") as f:
        b2 = pickle.load(f, encoding="latin1")
    i = ext.index(next(j for j in ext if N_BATCH <= j < 2 * N_BATCH))
    row = b2["data"][ext[i] - N_BATCH].astype(np.float64) / 255.0
    expect = (row.reshape(3, 32, 32) - np.array(CIFAR10_MEAN)[:, None, None]) / np.array(CIFAR10_STD)[:, None, None]
    assert torch.allclose(s.x_extract[i].double(), torch.from_numpy(expect), atol=1e-5)
    assert int(s.y_extract[i]) == b2["labels"][ext[i] - N_BATCH]
    # per-seed: same seed same split, another seed another
    again = load_splits(DataSpec(name="cifar10", n_extract=40, n_val=25, split_seed=3, search_dirs=(str(d),)))
    other = load_splits(DataSpec(name="cifar10", n_extract=40, n_val=25, split_seed=4, search_dirs=(str(d),)))
    assert image_id(again.x_extract) == ext and image_id(other.x_extract) != ext


def test_cifar10_refuses_foreign_pickles_without_running_them(tmp_path):
    d = write_cifar(tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(d / "data_batch_3", "wb") as f:
        pickle.dump({"data": Evil(), "labels": []}, f, protocol=2)
    with pytest.raises(UsageError, match="data_batch_3.*refusing to load"):
        load_splits(DataSpec(name="cifar10", n_extract=10, n_val=10, search_dirs=(str(tmp_path),)))
    assert not marker.exists()


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda d: (d / "batches.meta").unlink(), "CIFAR-10 not found"),
        (lambda d: (d / "test_batch").write_bytes(b"\x80\x02garbage"), "cannot read"),
        (lambda d: rewrite(d / "data_batch_1", data=np.zeros((N_BATCH, 5), np.uint8)), "(N, 3072)"),
        (lambda d: rewrite(d / "data_batch_1", labels=[0, 11] + [0] * (N_BATCH - 2)), "0..9"),
    ],
)
def test_cifar10_bad_files_are_usage_errors(tmp_path, edit, needle):
    edit(write_cifar(tmp_path))
    with pytest.raises(UsageError) as e:
        load_splits(DataSpec(name="cifar10", n_extract=10, n_val=10, search_dirs=(str(tmp_path),)))
    assert needle in str(e.value)


@pytest.mark.parametrize("layout,gz", [("MNIST/raw", True), ("", False), ("mnist", True)])
def test_mnist_from_idx_files(tmp_path, layout, gz):
    arrays = write_mnist(tmp_path / layout if layout else tmp_path, gz=gz)
    s = load_splits(DataSpec(name="mnist", n_extract=50, n_val=30, split_seed=1, search_dirs=(str(tmp_path),)))
    assert s.x_extract.shape == (50, 1, 28, 28) and s.x_test.shape == (N_TEST, 1, 28, 28)
    expect = (arrays["x_test"].astype(np.float64) / 255.0 - 0.1307) / 0.3081  # the usual MNIST statistics
    assert torch.allclose(s.x_test[:, 0].double(), torch.from_numpy(expect), atol=1e-5)
    assert s.y_test.tolist() == arrays["y_test"].tolist()

    def ids(x):
        pixels = torch.round((x[:, 0, 0, :2].double() * 0.3081 + 0.1307) * 255)
        return pixels @ torch.tensor([1.0, 256.0], dtype=torch.float64)

    assert set(ids(s.x_extract).tolist()).isdisjoint(ids(s.x_val).tolist())


def test_new_datasets_default_to_the_paper_protocol():
    for name, shape in (("mnist", (1, 28, 28)), ("cifar10", (3, 32, 32))):
        info = DATASETS.get(name)
        assert (info.shape, info.classes, info.n_extract, info.n_val) == (shape, 10, 5000, 5000)


@pytest.mark.slow
def test_cli_extract_and_evaluate_on_cifar10_files(tmp_path, isolated_env):
    write_cifar(tmp_path / "data")
    runner = CliRunner()
    out = tmp_path / "t.safetensors"
    common = ["--data-dir", str(tmp_path / "data"), "--json"]
    r = runner.invoke(
        app,
        [
            "extract",
            "--dataset",
            "cifar10",
            "--model",
            "conv2",
            "--n-extract",
            "30",
            "--n-val",
            "20",
            "--epochs",
            "1",
            "--quiet",
            "--out",
            str(out),
            *common,
        ],
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["model"] == "conv2@3x32x32-10" and s["data"]["n_test"] == N_TEST
    r = runner.invoke(app, ["evaluate", str(out), *common])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["reproduced"] is True
    # the paper's MLP sized for FashionMNIST does not fit CIFAR-10: one line naming both shapes
    r = runner.invoke(
        app,
        [
            "extract",
            "--dataset",
            "cifar10",
            "--model",
            "mlp:784-256-10",
            "--n-extract",
            "30",
            "--n-val",
            "20",
            "--out",
            str(tmp_path / "u.safetensors"),
            *common,
        ],
    )
    assert r.exit_code == 2 and "784 inputs" in r.output and "(3, 32, 32)" in r.output
    assert len(r.output.strip().splitlines()) <= 2
