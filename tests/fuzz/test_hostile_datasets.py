"""Hostile dataset files: an MNIST/FashionMNIST IDX file or a CIFAR-10 pickle batch that is truncated, lies about
its size, inflates without end, names foreign code or is fabricated ends `ticket extract` with exit code 2 and one
line, runs nothing, writes nothing and never allocates what the file only declares (in-process peak < 64 MiB,
while the bombs below declare or inflate to 1-8 GB, or ask for a 10^12-element array)."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from hostile import assert_clean, cli, snapshot

IDX = {
    "x_train": "train-images-idx3-ubyte",
    "y_train": "train-labels-idx1-ubyte",
    "x_test": "t10k-images-idx3-ubyte",
    "y_test": "t10k-labels-idx1-ubyte",
}
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
N_TRAIN, N_TEST = 60, 20  # per file: MNIST's train set, CIFAR's batches of 12 (five of them) and test batch
GIB_OF_ZEROS = gzip.compress(bytes(1 << 24), compresslevel=1) * 64  # 64 gzip members of 16 MiB: 1 GiB, ~4.7 MB


def idx(dtype: int, dims: tuple[int, ...], body: bytes) -> bytes:
    return b"\0\0" + bytes([dtype, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + body


def mnist_files(rng: np.random.Generator) -> dict[str, bytes]:
    """The four valid (gzip'd) IDX files of a small MNIST-format dataset."""
    arrays = {
        "x_train": rng.integers(0, 256, (N_TRAIN, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, N_TRAIN, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (N_TEST, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, N_TEST, dtype=np.uint8),
    }
    return {IDX[k] + ".gz": gzip.compress(idx(8, a.shape, a.tobytes())) for k, a in arrays.items()}


def write_dir(d: Path, files: dict[str, bytes]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, raw in files.items():
        (d / name).write_bytes(raw)
    return d


def extract(tmp_path: Path, dataset: str, data_dir: Path, model: str):
    """`ticket extract` on the files, the cheapest way to reach the loader; returns the run and the output path."""
    out = tmp_path / "t.safetensors"
    before = snapshot(out)
    run = cli(
        "extract",
        "--dataset",
        dataset,
        "--data-dir",
        str(data_dir),
        "--method",
        "random",
        "--model",
        model,
        "--n-extract",
        "10",
        "--n-val",
        "10",
        "--quiet",
        "--out",
        str(out),
    )
    return run, before


# --------------------------------------------------------------------------------------------------- IDX


def _gz(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=1)


def _flip(raw: bytes, at: int) -> bytes:
    b = bytearray(raw)
    b[at] ^= 0xFF
    return bytes(b)


IMAGES = IDX["x_train"] + ".gz"
TEST_IMAGES = IDX["x_test"] + ".gz"
LABELS = IDX["y_train"] + ".gz"
ok_images = idx(8, (N_TRAIN, 28, 28), bytes(N_TRAIN * 784))

# name -> (file to replace, its new bytes, a piece of the one error line)
IDX_CASES = {
    "truncated-declares-60000": (IMAGES, _gz(idx(8, (60000, 28, 28), bytes(1000))), "is truncated"),
    "declares-10^9-images": (IMAGES, _gz(idx(8, (10**9, 28, 28), b"")), "N <= 60000"),
    "declares-2^32-1-images": (IMAGES, _gz(idx(8, (2**32 - 1, 28, 28), b"")), "N <= 60000"),
    "declares-60001-images": (IMAGES, _gz(idx(8, (60001, 28, 28), b"")), "N <= 60000"),
    "test-declares-10001": (TEST_IMAGES, _gz(idx(8, (10001, 28, 28), b"")), "N <= 10000"),
    "declares-10^9-labels": (LABELS, _gz(idx(8, (10**9,), b"")), "N <= 60000"),
    "huge-image-size": (IMAGES, _gz(idx(8, (1, 2**31, 2**31), b"")), "(N, 28, 28)"),
    "32x32-images": (IMAGES, _gz(idx(8, (N_TRAIN, 32, 32), bytes(N_TRAIN * 1024))), "(N, 28, 28)"),
    "bomb-after-100-images": (IMAGES, _gz(idx(8, (100, 28, 28), b"")) + GIB_OF_ZEROS, "data after the 78400 bytes"),
    "bomb-after-60000-images": (IMAGES, _gz(idx(8, (60000, 28, 28), b"")) + GIB_OF_ZEROS, "data after the 47040000"),
    "bomb-in-labels": (LABELS, _gz(idx(8, (N_TRAIN,), b"")) + GIB_OF_ZEROS, "data after the 60 bytes"),
    "one-extra-byte": (IMAGES, _gz(ok_images + b"\0"), "data after"),
    "trailing-garbage": (IMAGES, _gz(ok_images) + b"garbage!" * 4, "cannot read"),
    "wrong-magic": (IMAGES, _gz(b"\x1f\x8b" + ok_images[2:]), "bad magic"),
    "float-dtype": (IMAGES, _gz(idx(0x0D, (N_TRAIN, 28, 28), bytes(N_TRAIN * 784 * 4))), "not unsigned bytes"),
    "int-dtype": (LABELS, _gz(idx(0x0C, (N_TRAIN,), bytes(N_TRAIN * 4))), "not unsigned bytes"),
    "images-with-1-dim": (IMAGES, _gz(idx(8, (N_TRAIN * 784,), bytes(N_TRAIN * 784))), "1-d array, expected 3-d"),
    "labels-with-3-dims": (LABELS, _gz(ok_images), "3-d array, expected 1-d (N,)"),
    "header-cut": (IMAGES, _gz(ok_images[:9]), "truncated inside its header"),
    "empty-gzip": (IMAGES, _gz(b""), "bad magic"),
    "empty-file": (IMAGES, b"", "bad magic"),
    "not-gzip": (IMAGES, ok_images, "cannot read"),
    "gzip-cut-short": (IMAGES, _gz(ok_images)[:-30], "cannot read"),
    "corrupt-deflate": (IMAGES, _flip(_gz(ok_images), 40), "cannot read"),
    "bad-crc": (IMAGES, _flip(_gz(ok_images), -6), "cannot read"),
    "fewer-labels": (LABELS, _gz(idx(8, (N_TRAIN - 1,), bytes(N_TRAIN - 1))), "59 labels for 60 train images"),
    "label-10": (LABELS, _gz(idx(8, (N_TRAIN,), bytes([10]) * N_TRAIN)), "0..9"),
    "no-examples": (IMAGES, _gz(idx(8, (0, 28, 28), b"")), "holds no images"),
}


@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> dict[str, bytes]:
    return mnist_files(np.random.default_rng(0))


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist"])
def test_the_unmodified_idx_files_load(tmp_path, mnist, dataset):
    """The base of every case is valid, so each rejection below is the case's own."""
    run, _ = extract(tmp_path, dataset, write_dir(tmp_path / "d", mnist), "mlp:784-8-10")
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize("case", list(IDX_CASES))
def test_hostile_idx_file(tmp_path, mnist, case):
    name, raw, needle = IDX_CASES[case]
    d = write_dir(tmp_path / "d", {**mnist, name: raw})
    run, before = extract(tmp_path, "mnist", d, "mlp:784-8-10")
    assert_clean(run, 2, contains=needle, unchanged=before, folder=tmp_path)
    assert name in run.stderr  # the line names the file


@pytest.mark.parametrize("special", ["fifo", "dev-zero", "directory"])
def test_idx_special_files_are_never_opened(tmp_path, mnist, special):
    """A FIFO (would hang), /dev/zero (endless) or a directory under a dataset file's name: the directory does not
    hold the dataset, so it is skipped and the run says where it looked."""
    d = write_dir(tmp_path / "d", {k: v for k, v in mnist.items() if k != IMAGES})
    target = d / IDX["x_train"]
    if special == "fifo":
        os.mkfifo(target)
    elif special == "dev-zero":
        target.symlink_to("/dev/zero")
    else:
        target.mkdir()
    run, before = extract(tmp_path, "mnist", d, "mlp:784-8-10")
    assert_clean(run, 2, contains="MNIST not found", unchanged=before, folder=tmp_path)


# --------------------------------------------------------------------------------------------------- CIFAR-10


class Reduce:
    """Pickles as fn(*args) (then BUILD with state, if given): how a hostile batch names its callables."""

    def __init__(self, fn, args, state=None):
        self.fn, self.args, self.state = fn, args, state

    def __reduce__(self):
        return (self.fn, self.args) if self.state is None else (self.fn, self.args, self.state)


RECONSTRUCT = np._core.multiarray._reconstruct if hasattr(np, "_core") else np.core.multiarray._reconstruct


def array(shape, dtype="u1", data: bytes | list = b"\0", fortran=False) -> Reduce:
    """numpy's own pickle of an array, with whatever state a hostile file wants."""
    return Reduce(RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, shape, np.dtype(dtype), fortran, data))


def batch(n: int, rng: np.random.Generator, **entries) -> dict:
    return {
        "batch_label": "training batch 1 of 5",
        "labels": [int(v) for v in rng.integers(0, 10, n)],
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": [f"im_{i}.png" for i in range(n)],
        **entries,
    }


class Py2Pickler(pickle._Pickler):
    """Writes bytes and str as Python 2's str opcodes and numpy.core.multiarray, as the real batches are."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj):
        op = (
            pickle.SHORT_BINSTRING + bytes([len(obj)])
            if len(obj) < 256
            else pickle.BINSTRING + struct.pack("<i", len(obj))
        )
        self.write(op + obj)
        self.memoize(obj)

    def save_str(self, obj):
        self.save_bytes(obj.encode("latin1"))

    def save_global(self, obj, name=None):
        if obj is RECONSTRUCT:
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
        else:
            super().save_global(obj, name)

    dispatch[bytes], dispatch[str] = save_bytes, save_str


def py2_dumps(obj) -> bytes:
    f = io.BytesIO()
    Py2Pickler(f, protocol=2).dump(obj)
    return f.getvalue()


def cifar_files(rng: np.random.Generator, dumps=lambda o: pickle.dumps(o, protocol=2)) -> dict[str, bytes]:
    files = {f"data_batch_{i}": dumps(batch(N_TRAIN // 5, rng)) for i in range(1, 6)}
    files["test_batch"] = dumps(batch(N_TEST, rng))
    files["batches.meta"] = dumps({"label_names": LABEL_NAMES, "num_cases_per_batch": N_TRAIN // 5, "num_vis": 3072})
    return files


def p2(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


def p4(body: bytes) -> bytes:
    return b"\x80\x04" + body + b"."


def _many_encodes() -> bytes:
    """One 1 MB string, memoized, handed to _codecs.encode 300 times: 300 MB if every call were allowed."""
    text = "x" * (1 << 20)
    s = pickle.BINUNICODE + struct.pack("<I", len(text)) + text.encode() + b"q\x01"
    call = b"c_codecs\nencode\nq\x02h\x01X\x06\x00\x00\x00latin1\x86R0"
    return p2(s + b"0" + call * 300 + b"}")


MARKER = f"/tmp/ticket-hostile-marker-{os.getpid()}"  # a case that ran code would create it; os.system's line names it

# numpy's pickle of a (1, 3072) uint8 array, spelled out: _reconstruct(ndarray, (0,), b'b'), then BUILD's state
RECON = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85C\x01b\x87R"
ARRAY_STATE = (
    b"(K\x01K\x01M\x00\x0c\x86cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ"
    b"\xff\xff\xff\xffK\x00tb\x89B" + struct.pack("<I", 3072) + bytes(3072) + b"t"
)

# name -> (file to replace, its bytes, a piece of the one error line)
B1, META = "data_batch_1", "batches.meta"
rng0 = np.random.default_rng(1)
CIFAR_CASES = {
    "binbytes8-declares-2^60": (B1, p4(b"\x8e" + struct.pack("<Q", 2**60) + b"abc"), "cannot read"),
    "binunicode8-declares-2^40": (B1, p4(b"\x8d" + struct.pack("<Q", 2**40) + b"abc"), "cannot read"),
    "binstring-declares-2^31": (B1, p2(b"T" + struct.pack("<i", 2**31 - 1) + b"abc"), "cannot read"),
    "frame-past-the-end": (B1, b"\x80\x04\x95" + struct.pack("<Q", 2**50) + b"}.", "frame of"),
    "memo-index-2^31": (B1, p2(b"}r" + struct.pack("<I", 2**31)), "memo index"),
    "memo-index-2^27": (B1, p2(b"}r" + struct.pack("<I", 2**27)), "memo index"),
    "memo-get-undefined": (B1, p2(b"h\x05"), "cannot read"),
    "too-many-opcodes": (B1, p2(b"(" + b"K\x01" * 250_000 + b"l"), "more than 200000 opcodes"),
    "uint8-10^12-rows": (B1, pickle.dumps(batch(12, rng0, data=array((10**12, 3072))), protocol=2), "1 <= N <= 10000"),
    "uint8-10^12-flat": (B1, pickle.dumps(batch(12, rng0, data=array((10**12,))), protocol=2), "(N, 3072)"),
    "10001-rows": (B1, pickle.dumps(batch(12, rng0, data=array((10001, 3072))), protocol=2), "1 <= N <= 10000"),
    "object-array-2^28": (B1, pickle.dumps(batch(12, rng0, data=array((2**28,), "O", [0])), protocol=2), "uint8"),
    "object-array-rows": (
        B1,
        pickle.dumps(batch(12, rng0, data=array((12, 3072), "O", [0] * 12)), protocol=2),
        "uint8",
    ),
    "float-array": (B1, pickle.dumps(batch(12, rng0, data=rng0.random((12, 3072))), protocol=2), "uint8"),
    "bytes-short-by-one": (
        B1,
        pickle.dumps(batch(12, rng0, data=array((12, 3072), data=bytes(12 * 3072 - 1))), protocol=2),
        "must hold 36864 bytes",
    ),
    "fortran-order": (
        B1,
        pickle.dumps(batch(12, rng0, data=array((12, 3072), data=bytes(12 * 3072), fortran=True)), protocol=2),
        "C-ordered",
    ),
    "os-system": (
        B1,
        pickle.dumps(batch(12, rng0, data=Reduce(os.system, (f"touch {MARKER}",))), protocol=2),
        "refusing to load posix.system",
    ),
    "builtins-eval": (
        B1,
        pickle.dumps(batch(12, rng0, labels=Reduce(eval, ("[0]*12",))), protocol=2),
        "refusing to load __builtin__.eval",
    ),
    "stack-global-getattr": (
        B1,
        pickle.dumps(batch(12, rng0, labels=Reduce(getattr, (0, "real"))), protocol=4),
        "refusing to load builtins.getattr",
    ),
    "numpy-scalar-labels": (
        B1,
        pickle.dumps(batch(12, rng0, labels=list(np.arange(12) % 10)), protocol=2),
        "refusing to load",
    ),
    "inst-opcode": (B1, b"(i__builtin__\nlist\n.", "opcode INST"),
    "ext1-opcode": (B1, p2(b"\x82\x01"), "opcode EXT1"),
    "persistent-id": (B1, p2(b"}Q"), "opcode BINPERSID"),
    "build-on-a-global": (B1, p2(b"cnumpy\ndtype\n}b"), "BUILD on a global"),
    "dtype-with-fields": (
        B1,
        p2(b"cnumpy\ndtype\nU\x02u1K\x00K\x01\x87R(K\x03U\x01|N}NJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"),
        "plain uint8",
    ),
    "codecs-encode-other-codec": (
        B1,
        p2(b"c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R"),
        "_codecs.encode",
    ),
    "codecs-encode-300-times": (B1, _many_encodes(), "more than its own size"),
    "build-twice": (B1, p2(RECON + ARRAY_STATE + b"q\x09b" + b"h\x09b"), "not a numpy array's state"),
    "truncated": (B1, pickle.dumps(batch(12, rng0), protocol=2)[:5000], "cannot read"),
    "bytes-after-stop": (B1, pickle.dumps(batch(12, rng0), protocol=2) + b"\0", "after the pickle's end"),
    "not-a-dict": (B1, pickle.dumps([1, 2, 3], protocol=2), "not a dict"),
    "missing-filenames": (
        B1,
        pickle.dumps({k: v for k, v in batch(12, rng0).items() if k != "filenames"}, protocol=2),
        "its keys must be",
    ),
    "extra-key": (B1, pickle.dumps(batch(12, rng0, coarse_labels=[0] * 12), protocol=2), "its keys must be"),
    "label-10": (B1, pickle.dumps(batch(12, rng0, labels=[10] * 12), protocol=2), "0..9"),
    "bool-labels": (B1, pickle.dumps(batch(12, rng0, labels=[True] * 12), protocol=2), "0..9"),
    "labels-short": (B1, pickle.dumps(batch(12, rng0, labels=[0] * 11), protocol=2), "12 integers"),
    "filenames-short": (B1, pickle.dumps(batch(12, rng0, filenames=["a"] * 11), protocol=2), "12 names"),
    "data-not-built": (
        B1,
        pickle.dumps(batch(12, rng0, data=Reduce(RECONSTRUCT, (np.ndarray, (0,), b"b"))), protocol=2),
        "'data' must be",
    ),
    "batch-size-not-meta": (B1, pickle.dumps(batch(11, rng0), protocol=2), "batches.meta says"),
    "meta-label-names": (
        META,
        pickle.dumps({"label_names": list("abcdefghij"), "num_cases_per_batch": 12, "num_vis": 3072}, protocol=2),
        "batches.meta",
    ),
    "meta-num-vis": (
        META,
        pickle.dumps({"label_names": LABEL_NAMES, "num_cases_per_batch": 12, "num_vis": 3073}, protocol=2),
        "batches.meta",
    ),
    "meta-num-cases-10^9": (
        META,
        pickle.dumps({"label_names": LABEL_NAMES, "num_cases_per_batch": 10**9, "num_vis": 3072}, protocol=2),
        "num_cases_per_batch in",
    ),
}


@pytest.fixture(scope="module")
def cifar() -> dict[str, bytes]:
    return cifar_files(np.random.default_rng(2))


@pytest.mark.parametrize("dumps", ["python3-protocol-2", "python2"])
def test_the_unmodified_cifar_batches_load(tmp_path, dumps):
    """The base of every case is valid, written as Python 3 does and byte-for-byte the way the real Python 2
    batches are (str opcodes, numpy.core.multiarray), so each rejection below is the case's own."""
    files = cifar_files(np.random.default_rng(2), **({"dumps": py2_dumps} if dumps == "python2" else {}))
    assert dumps != "python2" or b"cnumpy.core.multiarray\n_reconstruct" in files[B1]
    run, _ = extract(tmp_path, "cifar10", write_dir(tmp_path / "cifar-10-batches-py", files), "mlp:3072-8-10")
    assert run.exit_code == 0, run.stderr


@pytest.mark.parametrize("case", list(CIFAR_CASES))
def test_hostile_cifar_file(tmp_path, cifar, case):
    name, raw, needle = CIFAR_CASES[case]
    d = write_dir(tmp_path / "cifar-10-batches-py", {**cifar, name: raw})
    run, before = extract(tmp_path, "cifar10", d, "mlp:3072-8-10")
    assert_clean(run, 2, contains=needle, unchanged=before, folder=tmp_path, markers=(Path(MARKER),))
    assert name in run.stderr


def test_cifar_file_over_64_mib_is_not_read(tmp_path, cifar):
    d = write_dir(tmp_path / "cifar-10-batches-py", cifar)
    with open(d / B1, "r+b") as f:
        f.truncate((64 << 20) + 1)  # sparse: costs no disk, and must cost no memory
    run, before = extract(tmp_path, "cifar10", d, "mlp:3072-8-10")
    assert_clean(run, 2, contains="larger than 64 MiB", unchanged=before, folder=tmp_path)


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_cifar_special_files_are_never_opened(tmp_path, cifar, special):
    d = write_dir(tmp_path / "cifar-10-batches-py", {k: v for k, v in cifar.items() if k != B1})
    os.mkfifo(d / B1) if special == "fifo" else (d / B1).symlink_to("/dev/zero")
    run, before = extract(tmp_path, "cifar10", d, "mlp:3072-8-10")
    assert_clean(run, 2, contains="CIFAR-10 not found", unchanged=before, folder=tmp_path)
