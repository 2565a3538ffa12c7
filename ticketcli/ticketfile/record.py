"""The typed records a ticket's metadata holds: model, init, method, data, sparsity, metrics, provenance
(created_by) and checkpoint, each a frozen dataclass whose attributes are what readers use.

Each record also keeps the JSON object it was made from, key order and unknown keys included, and writes exactly
that back (`to_json`, `dumps`): a ticket read and saved again is the same bytes, and `ticket inspect` shows a
shared file's fields as the file holds them. The typed attributes are read leniently (a value of the wrong type
reads as None): the reader's checks (meta.py) have refused a bad file before any record is made, and a record
made from a hand-written object must still save it as given. Torch-free, like the reader."""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ticketcli.specs.run import InitSpec

JsonValue = Any  # a value as JSON holds it (parsed from a file or made by the writer): never indexed outside here
R = TypeVar("R", bound="Stored")


def _number(x: object) -> float | None:
    """x when it is a JSON number (an int stays an int: a table prints it as stored), else None."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _str(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _object(x: object) -> Mapping[str, JsonValue]:
    return x if isinstance(x, dict) else {}


@dataclass(frozen=True, kw_only=True)
class Stored:
    """A record's JSON object as stored (written back unchanged); subclasses add the typed attributes."""

    stored: Mapping[str, JsonValue] = field(repr=False)

    @classmethod
    def of(cls: type[R], obj: Mapping[str, JsonValue]) -> R:
        """The record of a JSON object (as read from a ticket file, or as the writer makes it)."""
        raise NotImplementedError

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON object as stored (a copy: changing it does not change the record)."""
        return copy.deepcopy(dict(self.stored))

    def subset(self, keys: Collection[str]) -> dict[str, JsonValue]:
        """The stored entries whose key is in `keys`, in the stored order (copies)."""
        return {k: copy.deepcopy(v) for k, v in self.stored.items() if k in keys}

    def dumps(self) -> str:
        """The metadata value a ticket file holds for this record (json.dumps of the object as stored)."""
        return json.dumps(self.stored)

    def recorded(self, key: str) -> bool:
        """Whether the stored object has `key` (older tickets lack some)."""
        return key in self.stored


@dataclass(frozen=True, kw_only=True)
class ModelRecord(Stored):
    """The ticket's `model`: the spec string, and what a factory's or a BatchNorm network's rebuild checks."""

    spec: str  # "mlp:784-256-10", "resnet20@3x32x32-10", "pkg.module:factory"
    arch: str | None
    factory: str | None  # "pkg.module:function" for arch "user"
    parameters: Mapping[str, tuple[int, ...]] | None  # a factory's every parameter (name -> shape)
    masked: tuple[str, ...] | None  # a factory's masked parameters, in order
    batchnorm: JsonValue  # how evaluation gets BatchNorm statistics (models.batchnorm.read_record), None if absent

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> ModelRecord:
        params, masked = obj.get("parameters"), obj.get("masked")
        return cls(
            stored=dict(obj),
            spec=_str(obj.get("spec")) or "",
            arch=_str(obj.get("arch")),
            factory=_str(obj.get("factory")),
            parameters={n: tuple(s) for n, s in params.items()} if isinstance(params, dict) else None,
            masked=tuple(masked) if isinstance(masked, list) else None,
            batchnorm=obj.get("batchnorm"),
        )


@dataclass(frozen=True, kw_only=True)
class InitRecord(Stored):
    """The ticket's `init`: the scheme, k and the seed that regenerate the weights."""

    scheme: str
    k: float | None  # None: a factory's own weights (scheme "module"), which no k shaped
    seed: int
    factory_seed: JsonValue  # scheme "module": the global seed the factory ran under

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> InitRecord:
        return cls(
            stored=dict(obj),
            scheme=_str(obj.get("scheme")) or "",
            k=_number(obj.get("k")),
            seed=_int(obj.get("seed")) or 0,
            factory_seed=obj.get("factory_seed"),
        )

    def spec(self) -> InitSpec:
        """The InitSpec that redraws these weights (k as recorded, InitSpec's default when none was)."""
        return InitSpec(scheme=self.scheme, k=float(InitSpec.k if self.k is None else self.k), seed=self.seed)


@dataclass(frozen=True, kw_only=True)
class MethodRecord(Stored):
    """The ticket's `method`: its name, the requested sparsity and every hyper-parameter the method read, which
    vary by method (read them with `option`)."""

    name: str
    sparsity: float | None

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> MethodRecord:
        return cls(stored=dict(obj), name=_str(obj.get("name")) or "", sparsity=_number(obj.get("sparsity")))

    def option(self, key: str) -> JsonValue:
        """A recorded hyper-parameter (`epochs`, `lr`, `grasp_direction`, ...) as stored; None if not recorded."""
        return copy.deepcopy(self.stored.get(key))

    def options(self) -> dict[str, JsonValue]:
        """Every recorded entry but the name, in the stored order."""
        return {k: v for k, v in self.to_json().items() if k != "name"}


@dataclass(frozen=True, kw_only=True)
class DataRecord(Stored):
    """The ticket's `data`: the dataset and the split sizes and seed that redraw its splits."""

    dataset: str
    n_extract: int
    n_val: int
    split_seed: int
    n_test: JsonValue  # as stored, if the writer recorded it

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> DataRecord:
        return cls(
            stored=dict(obj),
            dataset=_str(obj.get("dataset")) or "",
            n_extract=_int(obj.get("n_extract")) or 0,
            n_val=_int(obj.get("n_val")) or 0,
            split_seed=_int(obj.get("split_seed")) or 0,
            n_test=obj.get("n_test"),
        )

    def split(self) -> dict[str, JsonValue]:
        """What decides the splits: dataset, n_extract, n_val, split_seed (in that order)."""
        d = self
        return {"dataset": d.dataset, "n_extract": d.n_extract, "n_val": d.n_val, "split_seed": d.split_seed}


@dataclass(frozen=True)
class LayerSparsity:
    """One parameter's entry of the sparsity report, each value None where the file has none of its type."""

    kept: int | None
    total: int | None
    achieved: float | None
    aux_share: float | None  # a number in [0, 1], else None

    @classmethod
    def of(cls, entry: JsonValue) -> LayerSparsity:
        e = _object(entry)
        share = _number(e.get("aux_share"))
        ok = share is not None and 0 <= share <= 1
        return cls(_int(e.get("kept")), _int(e.get("total")), _number(e.get("achieved")), share if ok else None)


@dataclass(frozen=True, kw_only=True)
class SparsityRecord(Stored):
    """The ticket's `sparsity`: requested against achieved, the counts, each layer's (`layer`), and what
    double-scoring and its iterated variant add."""

    requested: float | None
    achieved: float | None
    kept: int | None
    total: int | None
    requested_layer_densities: tuple[float, ...] | None
    aug_density: float | None
    aux_share: float | None
    projected: bool
    rounds: tuple[JsonValue, ...] | None

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> SparsityRecord:
        densities, rounds = obj.get("requested_layer_densities"), obj.get("rounds")
        return cls(
            stored=dict(obj),
            requested=_number(obj.get("requested")),
            achieved=_number(obj.get("achieved")),
            kept=_int(obj.get("kept")),
            total=_int(obj.get("total")),
            requested_layer_densities=tuple(densities) if isinstance(densities, list) else None,
            aug_density=_number(obj.get("aug_density")),
            aux_share=_number(obj.get("aux_share")),
            projected=obj.get("projected") is True,
            rounds=tuple(copy.deepcopy(rounds)) if isinstance(rounds, list) else None,
        )

    def layer_names(self) -> tuple[str, ...]:
        """The parameters the per-layer report names, in its order."""
        return tuple(_object(self.stored.get("per_layer")))

    def layer(self, name: str) -> LayerSparsity:
        """Parameter `name`'s entry (all None when the report has none)."""
        return LayerSparsity.of(_object(self.stored.get("per_layer")).get(name))


@dataclass(frozen=True)
class SplitRecord:
    """One split as measured at extraction (train.evaluate's accuracy, loss, correct, n); None where absent."""

    accuracy: float | None
    loss: float | None
    correct: int | None
    n: int | None
    bits_per_char: float | None = None  # a language model's (--dataset text)
    perplexity: float | None = None

    @classmethod
    def of(cls, entry: JsonValue) -> SplitRecord:
        e = _object(entry)
        accuracy, loss, bits, perplexity = (
            _number(e.get(k)) for k in ("accuracy", "loss", "bits_per_char", "perplexity")
        )
        return cls(accuracy, loss, _int(e.get("correct")), _int(e.get("n")), bits, perplexity)


@dataclass(frozen=True, kw_only=True)
class TrainedRecord(Stored):
    """A weight-training baseline's own trained network under the final mask: for information, not the ticket."""

    test: SplitRecord
    val: SplitRecord
    note: str | None

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> TrainedRecord:
        test, val = SplitRecord.of(obj.get("test")), SplitRecord.of(obj.get("val"))
        return cls(stored=dict(obj), test=test, val=val, note=_str(obj.get("note")))


@dataclass(frozen=True, kw_only=True)
class MetricsRecord(Stored):
    """The ticket's `metrics`: the rewound ticket's test and validation splits and the facts of the run."""

    test: SplitRecord | None  # None: the file records no such split (a hand-made or foreign ticket)
    val: SplitRecord | None
    device: str | None
    wall_time_s: float | None
    processes: int | None  # under torchrun
    precision: str | None  # of training, when not fp32
    trained: TrainedRecord | None

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> MetricsRecord:
        test, val, trained = obj.get("test"), obj.get("val"), obj.get("trained")
        return cls(
            stored=dict(obj),
            test=SplitRecord.of(test) if isinstance(test, dict) else None,
            val=SplitRecord.of(val) if isinstance(val, dict) else None,
            device=_str(obj.get("device")),
            wall_time_s=_number(obj.get("wall_time_s")),
            processes=_int(obj.get("processes")),
            precision=_str(obj.get("precision")),
            trained=TrainedRecord.of(trained) if isinstance(trained, dict) else None,
        )

    def accuracy(self, split: str) -> float | None:
        """The stored accuracy of "test" or "val" (None when the file has none)."""
        s = self.test if split == "test" else self.val if split == "val" else None
        return None if s is None else s.accuracy


@dataclass(frozen=True, kw_only=True)
class Provenance(Stored):
    """The ticket's `created_by`: the ticketcli version and the machine it ran on (every value a short string)."""

    entries: Mapping[str, str]  # "ticketcli", "torch", "cpu_isa", ... as recorded

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> Provenance:
        return cls(stored=dict(obj), entries={k: v for k, v in obj.items() if isinstance(v, str)})

    @property
    def ticketcli(self) -> str | None:
        return self.entries.get("ticketcli")

    @property
    def torch(self) -> str | None:
        return self.entries.get("torch")


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord(Stored):
    """The ticket's `checkpoint`, when the weights came from a file: its path (relative to the ticket) and sha256."""

    path: str | None
    sha256: str | None  # absent only in hand-made tickets: the weights fingerprint identifies the weights anyway

    @classmethod
    def of(cls, obj: Mapping[str, JsonValue]) -> CheckpointRecord:
        return cls(stored=dict(obj), path=_str(obj.get("path")), sha256=_str(obj.get("sha256")))

    def __bool__(self) -> bool:
        """False for an empty object (a hand-made `checkpoint: {}`), as the plain dict was: nothing to look for."""
        return bool(self.stored)

    def saved_at(self, ticket: str | Path) -> CheckpointRecord:
        """The record as the ticket written to `ticket` stores it: an absolute path made relative to the ticket's
        folder (files.checkpoint.saved_at); a relative one (a loaded ticket's) stays as it is."""
        from ticketcli.files.checkpoint import saved_at  # imports torch: `ticket inspect` never saves

        moved = saved_at(dict(self.stored), ticket)
        return self if moved is None or moved == self.stored else CheckpointRecord.of(moved)
