"""CIFAR-10's python batches (Python 2 pickles) read without trusting them.

A pickle is a program: it can name any callable and make the unpickler allocate whatever a length field or a memo
index says. So a batch is (1) read whole, at most 64 MiB (the real ones are ~31 MB), (2) walked opcode by opcode
before anything is built: only the opcodes a batch needs, every length within the file, memo indices and opcode
count bounded, then (3) unpickled with constructors of our own in place of numpy's, which accept exactly what a
batch holds (uint8 data of shape (N, 3072), N <= 10000, bytes matching the shape) and refuse anything else before
allocating. Finally the dict must look like the official batch: its keys, labels, filenames and batches.meta.
"""

from __future__ import annotations

import io
import pickle
import pickletools
from pathlib import Path
from typing import Any

import numpy as np

from ticketcli.errors import UsageError
from ticketcli.files.bounded import read_regular_file

MAX_FILE = 64 << 20  # bytes; a real batch is 30,730,000 bytes of pixels plus labels and file names
MAX_ROWS = 10000  # images in one official batch
ROW = 3 * 32 * 32  # 1024 red, 1024 green, 1024 blue values per image
MAX_OPS = 200_000  # a real batch takes ~35,000 opcodes (a label and a file name per image)
BATCH_KEYS = {"batch_label", "labels", "data", "filenames"}
META_KEYS = {"label_names", "num_cases_per_batch", "num_vis"}
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]

# Binary opcodes of protocols 2-5 that build dicts, lists, tuples, strings, numbers and call the few globals
# below. No text opcodes, no INST/OBJ/NEWOBJ, extension codes, persistent ids, sets or out-of-band buffers.
OPCODES = {
    "PROTO",
    "FRAME",
    "STOP",
    "MARK",
    "POP",
    "POP_MARK",
    "DUP",
    "NONE",
    "NEWTRUE",
    "NEWFALSE",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG1",
    "BINFLOAT",
    "SHORT_BINSTRING",
    "BINSTRING",
    "SHORT_BINBYTES",
    "BINBYTES",
    "BINBYTES8",
    "SHORT_BINUNICODE",
    "BINUNICODE",
    "BINUNICODE8",
    "EMPTY_LIST",
    "APPEND",
    "APPENDS",
    "LIST",
    "EMPTY_TUPLE",
    "TUPLE",
    "TUPLE1",
    "TUPLE2",
    "TUPLE3",
    "EMPTY_DICT",
    "DICT",
    "SETITEM",
    "SETITEMS",
    "GLOBAL",
    "STACK_GLOBAL",
    "REDUCE",
    "BUILD",
    "BINPUT",
    "LONG_BINPUT",
    "MEMOIZE",
    "BINGET",
    "LONG_BINGET",
}


def scan(raw: bytes) -> None:
    """Walk the pickle's opcodes without building anything; raise ValueError on anything a batch never holds."""
    f = io.BytesIO(raw)  # read(n) returns what is there: a declared 2^60-byte string costs nothing here
    for count, (op, arg, pos) in enumerate(pickletools.genops(f), 1):
        if op.name not in OPCODES:
            raise ValueError(f"opcode {op.name} at byte {pos} has no place in a CIFAR-10 batch")
        if count > MAX_OPS:
            raise ValueError(f"more than {MAX_OPS} opcodes")
        if op.name in ("BINPUT", "LONG_BINPUT") and isinstance(arg, int) and arg >= MAX_OPS:
            raise ValueError(f"memo index {arg} at byte {pos}")  # the C unpickler sizes its memo by the index
        if op.name == "FRAME" and isinstance(arg, int) and arg > len(raw) - f.tell():
            raise ValueError(f"frame of {arg} bytes at byte {pos} runs past the end")
    if f.tell() != len(raw):
        raise ValueError(f"{len(raw) - f.tell()} bytes after the pickle's end")


class _Global:
    """A global the pickle may name: callable, and never the target of BUILD (which would set attributes on our
    own functions or classes otherwise)."""

    def __init__(self, fn: Any = None) -> None:
        self._fn = fn

    def __call__(self, *args: Any) -> Any:
        if self._fn is None:
            raise pickle.UnpicklingError("numpy.ndarray is only an argument of _reconstruct here")
        return self._fn(*args)

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("BUILD on a global")


class _Uint8:
    """Stands for numpy.dtype('u1'); BUILD hands it the dtype's state, which must be that of a plain uint8."""

    def __setstate__(self, state: Any) -> None:
        if not (
            isinstance(state, tuple)
            and len(state) in (8, 9)
            and state[0] in (3, 4)
            and state[1] in "|<>="
            and all(s is None for s in state[2:5])
        ):
            raise pickle.UnpicklingError("the array's dtype is not plain uint8")


class PendingArray:
    """What numpy.core.multiarray._reconstruct returns here; BUILD's state must describe a batch's uint8 (N, 3072)
    array whose bytes are all there, and only then is an array made (a view of those bytes)."""

    array: np.ndarray | None = None

    def __init__(self, budget: list[int]) -> None:
        self._budget = budget

    def __setstate__(self, state: Any) -> None:
        if self.array is not None or not isinstance(state, tuple) or len(state) != 5:
            raise pickle.UnpicklingError("not a numpy array's state")
        version, shape, dtype, fortran, data = state
        if version != 1 or not isinstance(dtype, _Uint8) or fortran is not False:
            raise pickle.UnpicklingError("'data' must be a C-ordered uint8 array")
        if not (
            isinstance(shape, tuple)
            and len(shape) == 2
            and all(type(n) is int for n in shape)
            and 1 <= shape[0] <= MAX_ROWS
            and shape[1] == ROW
        ):
            raise pickle.UnpicklingError(
                f"'data' must be a uint8 array of shape (N, {ROW}) with 1 <= N <= {MAX_ROWS}, not {str(shape)[:80]}"
            )
        if not isinstance(data, (bytes, str)) or len(data) != shape[0] * ROW:
            raise pickle.UnpicklingError(f"'data' of shape {shape} must hold {shape[0] * ROW} bytes")
        if isinstance(data, str):  # a Python 2 str, decoded as latin-1 by the unpickler
            _charge(self._budget, len(data))
            data = data.encode("latin1")
        self.array = np.frombuffer(data, dtype=np.uint8).reshape(shape)


def _charge(budget: list[int], n: int) -> None:
    """Every byte our constructors allocate counts against the file's budget, however often a pickle calls them."""
    budget[0] -= n
    if budget[0] < 0:
        raise pickle.UnpicklingError("the pickle builds more than its own size in arrays")


class BatchUnpickler(pickle.Unpickler):
    """Resolves the globals a CIFAR-10 batch names (numpy's array and dtype reconstruction, protocol 2's bytes)
    to constructors of ours, and nothing else."""

    def __init__(self, raw: bytes) -> None:
        super().__init__(io.BytesIO(raw), encoding="latin1")
        self.budget = [len(raw)]
        self.ndarray = _Global()
        reconstruct = _Global(self._reconstruct)
        self.globals = {
            ("numpy.core.multiarray", "_reconstruct"): reconstruct,
            ("numpy._core.multiarray", "_reconstruct"): reconstruct,  # numpy >= 2 names it so
            ("numpy", "ndarray"): self.ndarray,
            ("numpy", "dtype"): _Global(self._dtype),
            ("_codecs", "encode"): _Global(self._encode),
        }

    def find_class(self, module: str, name: str) -> Any:
        found = self.globals.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}"[:200])
        return found

    def _reconstruct(self, cls: Any, shape: Any, typecode: Any) -> PendingArray:
        if cls is not self.ndarray or shape != (0,) or typecode not in (b"b", "b"):
            raise pickle.UnpicklingError("not numpy's array reconstruction")
        return PendingArray(self.budget)

    def _dtype(self, spec: Any, align: Any = False, copy: Any = False) -> _Uint8:
        if spec != "u1" or align not in (0, False) or copy not in (0, 1):
            raise pickle.UnpicklingError(f"'data' must be uint8, not dtype {str(spec)[:40]}")
        return _Uint8()

    def _encode(self, text: Any, encoding: Any = "utf-8") -> bytes:
        # Python 3's protocol 2 writes bytes as _codecs.encode(str, 'latin1')
        if not isinstance(text, str) or encoding != "latin1":
            raise pickle.UnpicklingError("_codecs.encode is only allowed as protocol 2's way of writing bytes")
        _charge(self.budget, len(text))
        return text.encode("latin1")


def load(path: Path) -> dict[str, object]:
    """One CIFAR-10 python file (a batch or batches.meta) as a dict with str keys; any fault is a UsageError."""
    raw = read_regular_file(path, MAX_FILE, "CIFAR-10 file")
    try:
        scan(raw)
        obj = BatchUnpickler(raw).load()
    except Exception as e:  # truncated files, foreign pickles, refused globals and shapes
        raise UsageError(
            f"cannot read {path}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        ) from None
    if not isinstance(obj, dict) or not all(isinstance(k, (str, bytes)) for k in obj):
        raise UsageError(f"{path} is not a CIFAR-10 batch (not a dict of named entries)")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_meta(path: Path) -> int:
    """batches.meta, checked; returns the number of images per training batch."""
    meta = load(path)
    n = meta.get("num_cases_per_batch")
    if (
        set(meta) != META_KEYS
        or meta["label_names"] != LABEL_NAMES
        or meta["num_vis"] != ROW
        or type(n) is not int
        or not 1 <= n <= MAX_ROWS
    ):
        raise UsageError(
            f"{path} is not CIFAR-10's batches.meta (keys {', '.join(sorted(META_KEYS))}; the ten "
            f"label names airplane..truck, num_vis {ROW}, num_cases_per_batch in 1..{MAX_ROWS})"
        )
    return n


def read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file, checked: images uint8 (N, 3, 32, 32) and labels int64 (N,)."""
    batch = load(path)
    if set(batch) != BATCH_KEYS:
        raise UsageError(f"{path} is not a CIFAR-10 batch: its keys must be {', '.join(sorted(BATCH_KEYS))}")
    x, y, names = batch["data"], batch["labels"], batch["filenames"]
    if not isinstance(x, PendingArray) or x.array is None:
        raise UsageError(f"{path}: 'data' must be a uint8 array of shape (N, {ROW})")
    n = x.array.shape[0]
    if not isinstance(y, list) or len(y) != n or not all(type(v) is int and 0 <= v <= 9 for v in y):
        raise UsageError(f"{path}: 'labels' must be a list of {n} integers in 0..9")
    if not isinstance(names, list) or len(names) != n or not all(isinstance(s, (str, bytes)) for s in names):
        raise UsageError(f"{path}: 'filenames' must be a list of {n} names")
    if not isinstance(batch["batch_label"], (str, bytes)):
        raise UsageError(f"{path}: 'batch_label' must be a string")
    return x.array.reshape(n, 3, 32, 32), np.array(y, dtype=np.int64)  # rows are 1024 red, green, blue values
