"""IDX reading, dataset resolution and the seeded extraction/validation/test splits, on tiny fake files."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import NAMES, fake_images, idx_bytes, write_idx

from ticketcli.data import digits
from ticketcli.data.datasets import load_splits, read_idx
from ticketcli.data.digits import digits_arrays, read_bundled
from ticketcli.errors import UsageError
from ticketcli.specs.run import DataSpec

N_TRAIN, N_TEST = 300, 50
MEAN, STD = 0.2860, 0.3530
IMAGES, LABELS = ((28, 28), 60000), ((), 60000)  # read_idx's expected item shape and most items


@pytest.fixture(scope="module")
def fake_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "x_train": fake_images(N_TRAIN, 2),
        "y_train": rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        "x_test": fake_images(N_TEST, 3),
        "y_test": rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }


def write_fashion(d: Path, arrays: dict[str, np.ndarray], gz: bool = True) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for key, stem in NAMES.items():
        write_idx(d / (stem + (".gz" if gz else "")), arrays[key])
    return d


@pytest.fixture(scope="module")
def fashion_dir(tmp_path_factory, fake_arrays) -> Path:
    return write_fashion(tmp_path_factory.mktemp("fmnist"), fake_arrays)


def normalise64(a: np.ndarray) -> torch.Tensor:
    """The paper's normalisation in float64, shape (N, 1, H, W)."""
    return torch.from_numpy((a.astype(np.float64) / 255.0 - MEAN) / STD).unsqueeze(1)


def spec(d: Path | str, seed: int = 0, n_extract: int = 100, n_val: int = 50) -> DataSpec:
    return DataSpec(name="fashion-mnist", n_extract=n_extract, n_val=n_val, split_seed=seed, search_dirs=(str(d),))


def pool_indices(x: torch.Tensor, pool: np.ndarray) -> list[int]:
    """Index in the raw uint8 pool of every (normalised) row of x, matched exactly after de-normalising."""
    raw = x[:, 0].double() * STD + MEAN
    pixels = torch.round(raw * 255.0)
    assert torch.allclose(raw * 255.0, pixels, atol=1e-3), "rows are not normalised uint8 images"
    pixels = pixels.to(torch.int64).numpy().astype(np.uint8)
    lookup = {row.tobytes(): i for i, row in enumerate(pool)}
    assert len(lookup) == len(pool)
    out = []
    for row in pixels:
        assert row.tobytes() in lookup, "a split row is not an image of the training pool"
        out.append(lookup[row.tobytes()])
    return out


# ---------------------------------------------------------------------------------------------- read_idx


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_read_idx_images_and_labels(tmp_path, suffix):
    x = fake_images(4, 0)
    y = np.array([3, 1, 4, 1], dtype=np.uint8)
    xi = write_idx(tmp_path / f"images{suffix}", x)
    yi = write_idx(tmp_path / f"labels{suffix}", y)
    raw = gzip.decompress(xi.read_bytes()) if suffix else xi.read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03" and struct.unpack(">3I", raw[4:16]) == (4, 28, 28)
    a, b = read_idx(xi, *IMAGES), read_idx(yi, *LABELS)
    assert a.dtype == np.uint8 and a.shape == (4, 28, 28) and np.array_equal(a, x)
    assert b.dtype == np.uint8 and b.shape == (4,) and np.array_equal(b, y)


def test_read_idx_empty_dataset(tmp_path):
    a = read_idx(write_idx(tmp_path / "labels", np.zeros(0, dtype=np.uint8)), *LABELS)
    assert a.shape == (0,)


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("edit", ["drop-last-byte", "drop-many", "extra-byte", "header-only", "3-bytes"])
def test_read_idx_rejects_wrong_size(tmp_path, suffix, edit):
    raw = idx_bytes(fake_images(3, 0))
    raw = {
        "drop-last-byte": raw[:-1],
        "drop-many": raw[:100],
        "extra-byte": raw + b"\x00",
        "header-only": raw[:16],
        "3-bytes": raw[:3],
    }[edit]
    path = tmp_path / f"images{suffix}"
    path.write_bytes(gzip.compress(raw) if suffix else raw)
    with pytest.raises(UsageError):
        read_idx(path, *IMAGES)


@pytest.mark.parametrize("magic", [0x00000802, 0x00000804, 0x00000903, 0x00000D03, 0x01000803, 0x03080000])
def test_read_idx_rejects_wrong_magic(tmp_path, magic):
    raw = idx_bytes(fake_images(2, 0))
    path = tmp_path / "images"
    path.write_bytes(struct.pack(">I", magic) + raw[4:])
    with pytest.raises(UsageError):
        read_idx(path, *IMAGES)


def test_read_idx_rejects_unreadable_gzip(tmp_path):
    raw = idx_bytes(fake_images(2, 0))
    not_gz = tmp_path / "plain-named.gz"
    not_gz.write_bytes(raw)
    with pytest.raises(UsageError):
        read_idx(not_gz, *IMAGES)
    truncated = tmp_path / "truncated.gz"
    truncated.write_bytes(gzip.compress(raw)[:-20])
    with pytest.raises(UsageError):
        read_idx(truncated, *IMAGES)
    with pytest.raises(UsageError):
        read_idx(tmp_path / "missing.gz", *IMAGES)


# ---------------------------------------------------------------------------------------------- FashionMNIST


def test_splits_shapes_and_dtypes(fashion_dir):
    s = load_splits(spec(fashion_dir))
    assert s.x_extract.shape == (100, 1, 28, 28) and s.y_extract.shape == (100,)
    assert s.x_val.shape == (50, 1, 28, 28) and s.y_val.shape == (50,)
    assert s.x_test.shape == (N_TEST, 1, 28, 28) and s.y_test.shape == (N_TEST,)
    for x in (s.x_extract, s.x_val, s.x_test):
        assert x.dtype == torch.float32
    for y in (s.y_extract, s.y_val, s.y_test):
        assert y.dtype == torch.int64
    assert s.info["dataset"] == "fashion-mnist" and s.info["n_extract"] == 100 and s.info["n_val"] == 50
    assert s.info["n_test"] == N_TEST and s.info["split_seed"] == 0


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_extraction_and_validation_are_disjoint_subsets_of_the_pool(fashion_dir, fake_arrays, seed):
    s = load_splits(spec(fashion_dir, seed=seed))
    ext = pool_indices(s.x_extract, fake_arrays["x_train"])
    val = pool_indices(s.x_val, fake_arrays["x_train"])
    assert len(set(ext)) == 100 and len(set(val)) == 50
    assert not set(ext) & set(val)
    # labels travel with their images
    assert s.y_extract.tolist() == fake_arrays["y_train"][ext].tolist()
    assert s.y_val.tolist() == fake_arrays["y_train"][val].tolist()
    # and the images are exactly the pool's images, normalised
    pool = normalise64(fake_arrays["x_train"])
    assert torch.allclose(s.x_extract.double(), pool[ext], rtol=0, atol=1e-6)
    assert torch.allclose(s.x_val.double(), pool[val], rtol=0, atol=1e-6)


def test_test_set_is_the_whole_test_file_in_order(fashion_dir, fake_arrays):
    s = load_splits(spec(fashion_dir))
    assert s.y_test.tolist() == fake_arrays["y_test"].tolist()
    assert torch.allclose(s.x_test.double(), normalise64(fake_arrays["x_test"]), rtol=0, atol=1e-6)
    assert torch.equal(load_splits(spec(fashion_dir, seed=5)).x_test, s.x_test)


def test_normalisation_constants(tmp_path, fake_arrays):
    """Every pixel value 0..255 maps to (v/255 - 0.2860)/0.3530 (tight enough to tell 0.2860 from 0.28604)."""
    arrays = dict(fake_arrays)
    x_test = np.zeros((1, 28, 28), dtype=np.uint8)
    x_test.reshape(-1)[:256] = np.arange(256)
    arrays["x_test"], arrays["y_test"] = x_test, np.zeros(1, dtype=np.uint8)
    s = load_splits(spec(write_fashion(tmp_path / "d", arrays)))
    got = s.x_test.reshape(-1)[:256].double()
    want = (torch.arange(256, dtype=torch.float64) / 255.0 - MEAN) / STD
    assert (got - want).abs().max().item() < 1e-6
    assert s.x_test.reshape(-1)[0].item() == pytest.approx(-MEAN / STD, abs=1e-6)
    assert s.x_test.reshape(-1)[255].item() == pytest.approx((1 - MEAN) / STD, abs=1e-6)


def test_same_seed_same_splits_different_seed_different(fashion_dir):
    a, b, c = (load_splits(spec(fashion_dir, seed=s)) for s in (3, 3, 4))
    for k in ("x_extract", "y_extract", "x_val", "y_val", "x_test", "y_test"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k
    assert not torch.equal(a.x_extract, c.x_extract)
    assert not torch.equal(a.x_val, c.x_val)


def test_split_is_one_shuffle_cut_in_two(fashion_dir, fake_arrays):
    """First n_extract of the seeded shuffle for extraction, the next n_val for validation."""
    pool = fake_arrays["x_train"]
    small = load_splits(spec(fashion_dir, seed=2, n_extract=100, n_val=50))
    big = load_splits(spec(fashion_dir, seed=2, n_extract=150, n_val=100))
    ext_s, val_s = pool_indices(small.x_extract, pool), pool_indices(small.x_val, pool)
    ext_b, val_b = pool_indices(big.x_extract, pool), pool_indices(big.x_val, pool)
    assert ext_b[:100] == ext_s and ext_b[100:] == val_s
    everything = load_splits(spec(fashion_dir, seed=2, n_extract=N_TRAIN - 1, n_val=1))
    order = pool_indices(everything.x_extract, pool) + pool_indices(everything.x_val, pool)
    assert sorted(order) == list(range(N_TRAIN))  # a permutation of the whole pool
    assert order[:150] == ext_b and order[150:250] == val_b


def test_asking_for_more_than_the_pool(fashion_dir):
    with pytest.raises(UsageError):
        load_splits(spec(fashion_dir, n_extract=N_TRAIN - 49, n_val=50))
    with pytest.raises(UsageError):
        load_splits(spec(fashion_dir, n_extract=N_TRAIN + 1, n_val=0))
    s = load_splits(spec(fashion_dir, n_extract=N_TRAIN - 50, n_val=50))  # exactly the pool is fine
    assert len(s.y_extract) + len(s.y_val) == N_TRAIN


@pytest.mark.parametrize("layout", ["", "fashion-mnist", "FashionMNIST/raw", "fashion_mnist"])
@pytest.mark.parametrize("gz", [True, False])
def test_resolution_layouts(tmp_path, fake_arrays, layout, gz):
    d = write_fashion(tmp_path / layout if layout else tmp_path, fake_arrays, gz=gz)
    s = load_splits(spec(tmp_path, seed=1))
    assert Path(s.info["source"]) == d
    assert s.y_test.tolist() == fake_arrays["y_test"].tolist()
    ref = load_splits(spec(d, seed=1))
    assert torch.equal(s.x_extract, ref.x_extract)


def test_search_dirs_in_order_and_incomplete_dirs_skipped(tmp_path, fake_arrays):
    incomplete = write_fashion(tmp_path / "a", fake_arrays)
    (incomplete / (NAMES["y_test"] + ".gz")).unlink()
    other = dict(fake_arrays, y_test=(fake_arrays["y_test"] + 1) % 10)
    first = write_fashion(tmp_path / "b", fake_arrays)
    second = write_fashion(tmp_path / "c", other)
    dirs = (str(tmp_path / "empty"), str(incomplete), str(first), str(second))
    s = load_splits(DataSpec(name="fashion-mnist", n_extract=10, n_val=10, search_dirs=dirs))
    assert Path(s.info["source"]) == first
    s = load_splits(DataSpec(name="fashion-mnist", n_extract=10, n_val=10, search_dirs=dirs[::-1]))
    assert Path(s.info["source"]) == second
    assert s.y_test.tolist() == other["y_test"].tolist()


@pytest.mark.parametrize("download", [False, True])
def test_missing_dataset_hint(tmp_path, download):
    empty = tmp_path / "empty"
    empty.mkdir()
    # download=True without a download_dir must not reach the network either
    ds = DataSpec(name="fashion-mnist", search_dirs=(str(empty),), download=download, download_dir=None)
    with pytest.raises(UsageError) as info:
        load_splits(ds)
    assert str(empty) in str(info.value)
    assert "apt-get install dataset-fashion-mnist" in info.value.hint
    assert "--download" in info.value.hint


def test_corrupt_dataset_file_is_a_usage_error(tmp_path, fake_arrays):
    d = write_fashion(tmp_path, fake_arrays)
    path = d / (NAMES["x_train"] + ".gz")
    path.write_bytes(gzip.compress(idx_bytes(fake_arrays["x_train"])[:-1]))
    with pytest.raises(UsageError):
        load_splits(spec(d))


# ---------------------------------------------------------------------------------------------- digits


@pytest.fixture(scope="module")
def sklearn_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.data.astype(np.int64), d.target.astype(np.int64)


def digits_rows(x: torch.Tensor, y: torch.Tensor) -> list[tuple]:
    """De-normalise (x*16 in 0..16) and key each example by its pixel values and label."""
    raw = (x.reshape(len(x), -1).double() * 0.3760 + 0.3053) * 16.0
    ints = torch.round(raw)
    assert torch.allclose(raw, ints, atol=1e-3)
    return [(tuple(r), int(t)) for r, t in zip(ints.to(torch.int64).tolist(), y.tolist())]


def test_digits_defaults(sklearn_digits):
    s = load_splits(DataSpec(name="digits"))
    assert s.x_extract.shape == (1000, 1, 8, 8) and s.y_extract.shape == (1000,)
    assert s.x_val.shape == (400, 1, 8, 8) and s.y_val.shape == (400,)
    assert s.x_test.shape == (397, 1, 8, 8) and s.y_test.shape == (397,)
    assert s.x_extract.dtype == torch.float32 and s.y_extract.dtype == torch.int64
    ext, val, test = (
        digits_rows(s.x_extract, s.y_extract),
        digits_rows(s.x_val, s.y_val),
        digits_rows(s.x_test, s.y_test),
    )
    x, y = sklearn_digits
    full = Counter((tuple(r), int(t)) for r, t in zip(x.tolist(), y.tolist()))
    # the three splits together are exactly the dataset, each example used once (as a multiset)
    assert Counter(ext) + Counter(val) + Counter(test) == full
    assert sum(full.values()) == 1797


def test_digits_seeds(sklearn_digits):
    a = load_splits(DataSpec(name="digits", split_seed=0))
    b = load_splits(DataSpec(name="digits", split_seed=1))
    c = load_splits(DataSpec(name="digits", split_seed=1))
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test)  # fixed, seed-independent
    assert not torch.equal(a.x_extract, b.x_extract)
    assert torch.equal(b.x_extract, c.x_extract) and torch.equal(b.x_val, c.x_val)
    # the extraction+validation pool is the same set for every seed
    pool_a = Counter(digits_rows(a.x_extract, a.y_extract) + digits_rows(a.x_val, a.y_val))
    pool_b = Counter(digits_rows(b.x_extract, b.y_extract) + digits_rows(b.x_val, b.y_val))
    assert pool_a == pool_b
    with pytest.raises(UsageError):
        load_splits(DataSpec(name="digits", n_extract=1000, n_val=401))


def test_digits_are_read_as_scikit_learn_loads_them_without_importing_it(sklearn_digits):
    code = (
        "import sys; from ticketcli.data.digits import digits_arrays, bundled_file; x, y = digits_arrays(); "
        "assert bundled_file() is not None; print('sklearn' in sys.modules, x.dtype, y.dtype, x.shape, y.shape)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "float64", "int64", "(1797,", "64)", "(1797,)"]
    data, target = digits_arrays()
    x, y = sklearn_digits
    assert np.array_equal(data, x) and np.array_equal(target, y)


@pytest.mark.parametrize(
    "body",
    [
        b"",  # empty
        b"1,2,3\n",  # the wrong shape
        b"0," * 64 + b"11\n",  # a label out of range
        b"\xff\xfe not text",
        b"0," * 64 + b"1\n" + b"9" * (2 << 20),  # over the size the real file justifies
    ],
)
def test_a_digits_file_that_is_not_the_table_is_not_used(tmp_path, body):
    p = tmp_path / "digits.csv.gz"
    p.write_bytes(gzip.compress(body))
    assert read_bundled(p) is None
    p.write_bytes(body[:20])  # not gzip at all
    assert read_bundled(p) is None


def test_the_shipped_table_is_scikit_learns_digits(sklearn_digits):
    """ticket ships the digits table itself (no scikit-learn needed to install or run): the same numbers."""
    found = read_bundled(digits.SHIPPED)
    assert found is not None
    assert np.array_equal(found[0], sklearn_digits[0]) and np.array_equal(found[1], sklearn_digits[1])


def test_digits_fall_back_to_scikit_learns_file_then_its_loader(monkeypatch, tmp_path, sklearn_digits):
    monkeypatch.setattr(digits, "SHIPPED", tmp_path / "missing.csv.gz")
    data, target = digits.digits_arrays()  # scikit-learn's copy of the file
    assert np.array_equal(data, sklearn_digits[0]) and np.array_equal(target, sklearn_digits[1])
    monkeypatch.setattr(digits, "bundled_file", lambda: None)
    data, target = digits.digits_arrays()  # its loader
    assert np.array_equal(data, sklearn_digits[0]) and np.array_equal(target, sklearn_digits[1])


def test_without_the_shipped_table_or_scikit_learn_digits_is_one_error(monkeypatch, tmp_path):
    monkeypatch.setattr(digits, "SHIPPED", tmp_path / "missing.csv.gz")
    monkeypatch.setattr(digits, "bundled_file", lambda: None)
    real = digits.importlib.util.find_spec
    monkeypatch.setattr(
        digits.importlib.util, "find_spec", lambda name, *a: None if name == "sklearn" else real(name, *a)
    )
    with pytest.raises(UsageError, match="missing or unreadable, and scikit-learn"):
        digits.digits_arrays()


# ---------------------------------------------------------------------------------------------- regressions


def test_corrupt_gzip_body_is_a_usage_error(tmp_path):
    raw = bytearray(gzip.compress(b"\0\0\x08\x01" + struct.pack(">I", 1024) + bytes(range(256)) * 4))
    for i in range(12, 30):
        raw[i] ^= 0xFF
    p = tmp_path / "x.gz"
    p.write_bytes(bytes(raw))
    with pytest.raises(UsageError):
        read_idx(p, *LABELS)


def test_overflowing_idx_dimensions_are_a_usage_error(tmp_path):
    p = tmp_path / "ov"
    p.write_bytes(b"\0\0\x08\x03" + struct.pack(">3I", 2**22, 2**21, 2**21))
    with pytest.raises(UsageError):
        read_idx(p, *IMAGES)


@pytest.mark.parametrize("edit", ["fewer_labels", "more_labels", "label_out_of_range", "labels_as_images"])
def test_inconsistent_idx_files_are_a_usage_error(tmp_path, fake_arrays, edit):
    arrays = dict(fake_arrays)
    if edit == "fewer_labels":
        arrays["y_train"] = arrays["y_train"][:200]
    elif edit == "more_labels":
        arrays["y_train"] = np.concatenate([arrays["y_train"], arrays["y_train"]])
    elif edit == "label_out_of_range":
        arrays["y_test"] = arrays["y_test"].copy()
        arrays["y_test"][0] = 200
    else:
        arrays["x_train"] = arrays["y_train"]
    d = write_fashion(tmp_path / "bad", arrays)
    with pytest.raises(UsageError):
        load_splits(spec(d))
