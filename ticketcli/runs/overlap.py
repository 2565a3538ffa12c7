"""Two masks' overlap, counted straight from their packed bytes: `Overlap` (kept by each, by both, by either;
Jaccard and each one's share kept by the other), `LayerOverlap` (one parameter's) and `both_kept`, the AND and
popcount over two files' pieces. Torch-free, like `ticket compare`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ticketcli.contract.schema import JsonObject, entries
from ticketcli.ticketfile.safetensors_file import popcount_and


@dataclass(frozen=True)
class Overlap:
    """Two masks over the same entries (one parameter, or all of them): each one's kept count and how many entries
    both keep."""

    total: int  # entries
    kept_a: int
    kept_b: int
    both: int  # kept by both

    @property
    def either(self) -> int:
        """Entries kept by at least one of the two."""
        return self.kept_a + self.kept_b - self.both

    @property
    def jaccard(self) -> float:
        """|A ∧ B| / |A ∨ B|; 1.0 when neither keeps anything (two empty masks are the same mask)."""
        return self.both / self.either if self.either else 1.0

    @property
    def a_kept_in_b(self) -> float | None:
        """The share of A's kept entries that B keeps too (None when A keeps nothing)."""
        return self.both / self.kept_a if self.kept_a else None

    @property
    def b_kept_in_a(self) -> float | None:
        return self.both / self.kept_b if self.kept_b else None

    def counts(self) -> JsonObject:
        return entries(self, "total", "kept_a", "kept_b", "both", "either", "jaccard", "a_kept_in_b", "b_kept_in_a")


@dataclass(frozen=True)
class LayerOverlap:
    """One masked parameter's overlap (a `layers[]` item: its name and shape, then the counts)."""

    name: str
    shape: tuple[int, ...]
    overlap: Overlap

    def to_dict(self) -> JsonObject:
        return {"name": self.name, "shape": list(self.shape), **self.overlap.counts()}


def both_kept(pa: Iterator[bytes], pb: Iterator[bytes]) -> int:
    """Entries set in both of two equally long packed masks, read piece by piece (the pieces of two files usually
    line up; when a read comes back short, the longer piece waits for the rest of the other)."""
    count, rest_a, rest_b = 0, b"", b""
    for piece in pa:
        rest_a += piece
        while len(rest_b) < len(rest_a):
            more = next(pb, None)
            if more is None:
                break
            rest_b += more
        n = min(len(rest_a), len(rest_b))
        count += popcount_and(rest_a[:n], rest_b[:n])
        rest_a, rest_b = rest_a[n:], rest_b[n:]
    if rest_a or rest_b or next(pb, None):
        raise RuntimeError("two masks of one shape were read back with different lengths")  # the layout checks it
    return count
