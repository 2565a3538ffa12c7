"""The 8x8 digits (the UCI "Optical Recognition of Handwritten Digits" test set, E. Alpaydin and C. Kaynak, CC BY
4.0, as scikit-learn distributes it): read from the gzip CSV shipped beside this module (`digits.csv.gz`, 57 kB), so
that digits needs neither scikit-learn nor its scipy (about 200 MB) installed, nor their import (seconds of every
command that trains on digits). The numbers are what `sklearn.datasets.load_digits()` returns (tests/test_data.py
compares them); where the shipped file is missing or does not read as 1,797 rows of 64 pixel counts and a label,
scikit-learn's copy of the file is read, then its own loader is used where it is installed."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from ticketcli.errors import UsageError

ROWS, PIXELS = 1797, 64
MAX_BYTES = 1 << 20  # the bundled file is 57 kB, 263 kB inflated


SHIPPED = Path(__file__).with_name("digits.csv.gz")


def bundled_file() -> Path | None:
    """Where scikit-learn keeps digits.csv.gz, found without importing it; None if it is not there."""
    try:
        spec = importlib.util.find_spec("sklearn")
    except (ImportError, ValueError):
        return None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    for root in roots:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


def read_bundled(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """The pixel counts (float64, as scikit-learn's `data`) and labels (int64) of the file, or None when it is
    not the digits table."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read(MAX_BYTES + 1)
        if len(text) > MAX_BYTES:
            return None
        table = np.loadtxt(text.splitlines(), delimiter=",")
    except (OSError, EOFError, ValueError, UnicodeDecodeError):
        return None
    if table.shape != (ROWS, PIXELS + 1) or not np.isfinite(table).all():
        return None
    labels = table[:, -1]
    if not ((labels >= 0) & (labels <= 9) & (labels == np.round(labels))).all():
        return None
    return table[:, :-1], labels.astype(np.int64)


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(data, target) of scikit-learn's digits: (1797, 64) float64 pixel counts 0-16 and (1797,) int64 labels."""
    found = read_bundled(SHIPPED) if SHIPPED.is_file() else None
    if found is not None:
        return found
    path = bundled_file()
    found = read_bundled(path) if path is not None else None
    if found is not None:
        return found
    if importlib.util.find_spec("sklearn") is None:
        raise UsageError(
            f"the digits table shipped with ticket ({SHIPPED}) is missing or unreadable, and scikit-learn, which "
            "holds a copy, is not installed",
            hint="reinstall ticketcli, or pip install scikit-learn",
        )
    from sklearn.datasets import load_digits

    d = load_digits()
    return np.asarray(d.data, dtype=np.float64), np.asarray(d.target, dtype=np.int64)
