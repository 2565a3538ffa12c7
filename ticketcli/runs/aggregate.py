"""Tickets aggregated over seeds (`--aggregate` of `inspect DIR`, `evaluate DIR` and `compare`): one group per
method, model and requested sparsity, with the mean and standard deviation of the achieved sparsity and the
accuracies over its seeds (a language model's tickets: their bits per character too). Runs made with
`--match-sparsity` each request their own seed's sparsity, so they are grouped by the folder they were matched in
instead (the paper's matched protocol: one row per baseline); compare's same-seed pairs by their two methods.
Torch-free."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from ticketcli.contract.schema import JsonObject


@dataclass(frozen=True)
class MeanStd:
    """The mean and the sample standard deviation (n - 1) of the values a group has; std None for one value, both
    None for none."""

    mean: float | None
    std: float | None
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> MeanStd:
        xs = [x for x in values if x is not None and math.isfinite(x)]
        if not xs:
            return cls(None, None, 0)
        mean = math.fsum(xs) / len(xs)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
        return cls(mean, std, len(xs))

    def to_dict(self) -> JsonObject:
        return {"mean": self.mean, "std": self.std, "n": self.n}


@dataclass(frozen=True)
class Sample:
    """One ticket's values, as a group reads them."""

    method: str
    model: str
    seed: int | None
    requested_sparsity: float | None
    matched_in: str | None  # the folder of the ticket whose sparsity it was run at (--match-sparsity)
    achieved_sparsity: float | None
    test_accuracy: float | None
    val_accuracy: float | None
    test_bits_per_char: float | None = None  # a language model's ticket (--dataset text)
    val_bits_per_char: float | None = None


@dataclass(frozen=True)
class SeedGroup:
    """The tickets of one method, model and requested sparsity (or matched folder), over their seeds."""

    method: str
    model: str
    requested_sparsity: float | None  # None for runs matched to other tickets (matched_in)
    matched_in: str | None
    seeds: tuple[int, ...]
    achieved_sparsity: MeanStd
    test_accuracy: MeanStd
    val_accuracy: MeanStd
    bits_per_char: tuple[MeanStd, MeanStd] | None = None  # test, val: a language model's tickets

    def to_dict(self) -> JsonObject:
        doc: JsonObject = {
            "method": self.method,
            "model": self.model,
            "sparsity": {"requested": self.requested_sparsity, "matched_in": self.matched_in},
            "seeds": list(self.seeds),
            "count": len(self.seeds),
            "achieved_sparsity": self.achieved_sparsity.to_dict(),
            "metrics": {"test": self.test_accuracy.to_dict(), "val": self.val_accuracy.to_dict()},
        }
        if self.bits_per_char is not None:
            test, val = self.bits_per_char
            doc["bits_per_char"] = {"test": test.to_dict(), "val": val.to_dict()}
        return doc


def matched_folder(matched_to: object) -> str | None:
    """The folder of a ticket's recorded `matched_to`, None when it was not matched."""
    return str(PurePath(matched_to).parent) if isinstance(matched_to, str) and matched_to else None


def seed_groups(samples: Sequence[Sample]) -> tuple[SeedGroup, ...]:
    """One group per method, model and requested sparsity (to 1e-9; matched runs: per matched folder), in the order
    their first ticket comes; the seeds in the tickets' order."""
    groups: dict[tuple[str, str, float | None, str | None], list[Sample]] = {}
    for s in samples:
        requested = None if s.matched_in is not None or s.requested_sparsity is None else s.requested_sparsity
        key = (s.method, s.model, None if requested is None else round(requested, 9), s.matched_in)
        groups.setdefault(key, []).append(s)
    return tuple(
        SeedGroup(
            method=method,
            model=model,
            requested_sparsity=members[0].requested_sparsity if matched is None else None,
            matched_in=matched,
            seeds=tuple(m.seed for m in members if m.seed is not None),
            achieved_sparsity=MeanStd.of(m.achieved_sparsity for m in members),
            test_accuracy=MeanStd.of(m.test_accuracy for m in members),
            val_accuracy=MeanStd.of(m.val_accuracy for m in members),
            bits_per_char=_bits(members),
        )
        for (method, model, _, matched), members in groups.items()
    )


def _bits(members: Sequence[Sample]) -> tuple[MeanStd, MeanStd] | None:
    """A language model's group: the test and validation bits per character over its seeds (None: none has any)."""
    if all(m.test_bits_per_char is None and m.val_bits_per_char is None for m in members):
        return None
    return MeanStd.of(m.test_bits_per_char for m in members), MeanStd.of(m.val_bits_per_char for m in members)


@dataclass(frozen=True)
class PairGroup:
    """compare --aggregate: the pairs of tickets of one model drawn with the same seed, of two methods (each pair's
    Jaccard over every masked weight), over their seeds."""

    method_a: str
    method_b: str
    model: str
    seeds: tuple[int, ...]
    jaccard: MeanStd

    def to_dict(self) -> JsonObject:
        return {
            "methods": [self.method_a, self.method_b],
            "model": self.model,
            "seeds": list(self.seeds),
            "count": len(self.seeds),
            "jaccard": self.jaccard.to_dict(),
        }
