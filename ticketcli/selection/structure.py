"""Structured masks, torch-free: what `--structure N:M` and `--block RxC` mean, how a ticket records them, and the
checks that a mask has the pattern (numpy, imported when a check runs), for any code that reads tickets.

Every mask is read as a matrix: a weight of shape (out, ...) viewed as (out, -1), so a convolution's input
dimension is the flattened in_channels * kh * kw one.

- N:M (`Structure`): in every row, each run of M consecutive entries along the input dimension keeps exactly N.
  The input width must be a multiple of M (no remainder group: a layer that is not is refused before any work).
- RxC blocks (`Blocks`): the matrix is tiled from its top-left corner by blocks of R rows (outputs) and C columns
  (inputs); each block is kept or dropped whole. A dimension that is not a multiple of R (or C) ends in a narrower
  edge block, a block like the others (the paper MLP's 10-output layer in 4x4 blocks: two rows of 4, one of 2).

A parameter that is not a matrix (a bias) has no input dimension: a model with masked biases is refused.

parse_structure, parse_block: the option's text; pattern_of: a method's options or a ticket's method record;
is_n_m, is_blocks: a mask has the pattern; check_fits: every masked parameter can take it (one UsageError if not).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ticketcli.errors import UsageError

MAX_GROUP = 1024  # the largest M of N:M and the largest side of a block


@dataclass(frozen=True)
class Structure:
    """N:M: exactly `n` of every `m` consecutive weights along the input dimension kept (0 < n < m)."""

    n: int
    m: int

    @property
    def sparsity(self) -> float:
        """The sparsity the pattern implies: 1 - n/m (2:4 is 50%)."""
        return 1.0 - self.n / self.m

    def text(self) -> str:
        return f"{self.n}:{self.m}"


@dataclass(frozen=True)
class Blocks:
    """Whole blocks of `rows` outputs by `cols` inputs kept or dropped (edge blocks may be smaller)."""

    rows: int
    cols: int

    def text(self) -> str:
        return f"{self.rows}x{self.cols}"


Pattern = Structure | Blocks

_NM = re.compile(r"([0-9]{1,5}):([0-9]{1,5})")
_RC = re.compile(r"([0-9]{1,5})[xX]([0-9]{1,5})")


def parse_structure(text: str) -> Structure:
    """'2:4' -> Structure(2, 4); anything else (0 < N < M <= 1024) is one UsageError."""
    m = _NM.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"--structure must be N:M (e.g. 2:4: 2 of every 4 weights kept), got {text[:40]!r}")
    n, size = int(m.group(1)), int(m.group(2))
    if not 0 < n < size <= MAX_GROUP:
        raise UsageError(f"--structure N:M needs 0 < N < M <= {MAX_GROUP}, got {n}:{size}")
    return Structure(n, size)


def parse_block(text: str) -> Blocks:
    """'4x4' -> Blocks(4, 4); sides in [1, 1024], not both 1 (a 1x1 block is a weight alone: no --block)."""
    m = _RC.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"--block must be RxC (e.g. 4x4: blocks of 4 outputs by 4 inputs), got {text[:40]!r}")
    r, c = int(m.group(1)), int(m.group(2))
    if not (0 < r <= MAX_GROUP and 0 < c <= MAX_GROUP):
        raise UsageError(f"--block RxC needs sides in [1, {MAX_GROUP}], got {r}x{c}")
    if r == c == 1:
        raise UsageError("--block 1x1 is every weight on its own: leave --block out for an unstructured mask")
    return Blocks(r, c)


def pattern_of(options: Mapping[str, Any]) -> Pattern | None:
    """The pattern that a method's options or a ticket's method record (`Ticket.method.to_json()`) hold under
    "structure" and "block" (None: unstructured)."""
    structure, block = options.get("structure"), options.get("block")
    if structure is not None and block is not None:
        raise UsageError("--structure and --block exclude each other: choose N:M or blocks")
    if structure is not None:
        return parse_structure(str(structure))
    if block is not None:
        return parse_block(str(block))
    return None


def describe(pattern: Pattern | None) -> str:
    """How a pattern reads in tables: '2:4', '4x4 blocks' or 'unstructured'."""
    if pattern is None:
        return "unstructured"
    return pattern.text() if isinstance(pattern, Structure) else f"{pattern.text()} blocks"


def matrix_shape(shape: Sequence[int]) -> tuple[int, int]:
    """A parameter's shape as the (out, in) matrix its mask is read as (a vector: one row)."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, int(shape[0])
    return int(shape[0]), math.prod(int(s) for s in shape[1:])


def block_grid(shape: Sequence[int], blocks: Blocks) -> tuple[int, int]:
    """How many block rows and block columns tile the parameter's matrix (edge blocks included)."""
    rows, cols = matrix_shape(shape)
    return -(-rows // blocks.rows), -(-cols // blocks.cols)


def check_fits(pattern: Pattern | None, shapes: Mapping[str, Sequence[int]]) -> None:
    """Every masked parameter can take the pattern, or one UsageError naming the first that cannot: a vector (a
    bias) has no input dimension; N:M needs an input width that is a multiple of M."""
    if pattern is None:
        return
    flag = "--structure" if isinstance(pattern, Structure) else "--block"
    for name, shape in shapes.items():
        if len(shape) < 2:
            raise UsageError(
                f"{flag} {pattern.text()} applies to weight matrices, and {name} is a vector (a bias) that has no "
                "input dimension",
                hint="use a model without masked biases (no +bias)",
            )
        width = matrix_shape(shape)[1]
        if isinstance(pattern, Structure) and width % pattern.m:
            read = f" (shape {'x'.join(map(str, shape))} read as {shape[0]}x{width})" if len(shape) > 2 else ""
            raise UsageError(
                f"--structure {pattern.text()}: {name} has an input width of {width}{read}, not a multiple of "
                f"{pattern.m}",
                hint="choose an M that divides every layer's input width, or --block",
            )


def _matrix(mask: Any) -> Any:
    import numpy as np

    a = np.asarray(mask).astype(bool)
    rows, cols = matrix_shape(a.shape)
    return a.reshape(rows, cols)


def is_n_m(mask: Any, n: int, m: int) -> bool:
    """Whether a mask (numpy array or CPU tensor) keeps exactly `n` of every `m` consecutive entries along its input
    dimension (False when the input width is no multiple of m)."""
    a = _matrix(mask)
    if a.shape[1] % m:
        return False
    return bool((a.reshape(a.shape[0], -1, m).sum(axis=2) == n).all())


def is_blocks(mask: Any, rows: int, cols: int) -> bool:
    """Whether a mask (numpy array or CPU tensor) is whole `rows` x `cols` blocks tiled from its top-left corner
    (edge blocks may be smaller): every block all kept or all dropped."""
    import numpy as np

    a = _matrix(mask)
    r, c = a.shape
    pr, pc = -(-r // rows) * rows, -(-c // cols) * cols
    kept = np.zeros((pr, pc), dtype=np.int64)
    kept[:r, :c] = a
    size = np.zeros((pr, pc), dtype=np.int64)
    size[:r, :c] = 1
    sums = kept.reshape(pr // rows, rows, pc // cols, cols).sum(axis=(1, 3))
    sizes = size.reshape(pr // rows, rows, pc // cols, cols).sum(axis=(1, 3))
    return bool(((sums == 0) | (sums == sizes)).all())


def has_pattern(mask: Any, pattern: Pattern | None) -> bool:
    """is_n_m or is_blocks for the pattern (True for None: any mask is unstructured)."""
    if pattern is None:
        return True
    if isinstance(pattern, Structure):
        return is_n_m(mask, pattern.n, pattern.m)
    return is_blocks(mask, pattern.rows, pattern.cols)
