"""The typed pieces the extract, evaluate, inspect and compare results share: one split's measurement and one masked
parameter's counts, each with the object it is in the `--json` document (docs/json.md's `split` and `layers[]`).
Torch-free: `ticket inspect` imports it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ticketcli.contract.schema import JsonObject
from ticketcli.ticketfile.record import SplitRecord


@dataclass(frozen=True)
class SplitMetrics:
    """One split measured by train.evaluate: accuracy (a fraction), mean loss, correct predictions out of n."""

    accuracy: float  # text: next-character accuracy
    loss: float  # mean cross-entropy in nats (text: per character)
    correct: int
    n: int
    bits_per_char: float | None = None  # text only: loss / ln 2
    perplexity: float | None = None  # text only: exp(loss)

    @classmethod
    def of(cls, measured: Mapping[str, Any]) -> SplitMetrics:
        """From train.evaluate's dict (this package's own measurement, never a file's)."""
        return cls(
            accuracy=measured["accuracy"],
            loss=measured["loss"],
            correct=measured["correct"],
            n=measured["n"],
            bits_per_char=measured.get("bits_per_char"),
            perplexity=measured.get("perplexity"),
        )

    @classmethod
    def stored(cls, split: SplitRecord) -> SplitMetrics:
        """From a ticket this package has just written (its splits hold every value)."""
        assert split.accuracy is not None and split.loss is not None and split.correct is not None
        assert split.n is not None
        return cls(split.accuracy, split.loss, split.correct, split.n, split.bits_per_char, split.perplexity)

    def to_dict(self) -> JsonObject:
        d: JsonObject = {"accuracy": self.accuracy, "loss": self.loss, "correct": self.correct, "n": self.n}
        if self.bits_per_char is not None:  # a language model's: only then, so image documents stay as they were
            d["bits_per_char"], d["perplexity"] = self.bits_per_char, self.perplexity
        return d


@dataclass(frozen=True)
class LayerCount:
    """One masked parameter counted from a ticket's masks: kept of total entries, the achieved sparsity and, for
    double-scoring, the share of kept augmented entries on auxiliary coordinates."""

    name: str
    kept: int
    total: int
    sparsity: float  # 1 - kept / total, as masking.mask_stats computed it
    aux_share: float | None = None

    @classmethod
    def of(cls, name: str, entry: Mapping[str, Any]) -> LayerCount:
        """From a per-layer entry {kept, total, achieved[, aux_share]} (runs.record's, counted by this package)."""
        return cls(name, entry["kept"], entry["total"], entry["achieved"], entry.get("aux_share"))

    def to_dict(self) -> JsonObject:
        """The `layers[]` item (contract.layer_list's shape)."""
        item: JsonObject = {"name": self.name, "kept": self.kept, "total": self.total}
        if self.aux_share is not None:
            item["aux_share"] = self.aux_share
        if self.total:
            item["density"] = self.kept / self.total
            item["sparsity"] = self.sparsity
        return item


def layer_counts(per_layer: Mapping[str, Mapping[str, Any]]) -> tuple[LayerCount, ...]:
    """{name: {kept, total, achieved[, aux_share]}} -> LayerCounts in the given order."""
    return tuple(LayerCount.of(name, entry) for name, entry in per_layer.items())


def language_model_numbers(split: SplitRecord) -> JsonObject:
    """A stored split's bits per character and perplexity, each only when a finite number in its range (the file is
    not trusted beyond its checks); none for an image model's ticket."""
    bits, perplexity = split.bits_per_char, split.perplexity
    numbers: JsonObject = {}
    if bits is not None and math.isfinite(bits) and bits >= 0:
        numbers["bits_per_char"] = bits
    if perplexity is not None and math.isfinite(perplexity) and perplexity >= 1:
        numbers["perplexity"] = perplexity
    return numbers
