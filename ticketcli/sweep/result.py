"""sweep-k's typed result: each run's record, the stability summary (summary.py) and the command's settings, as
frozen dataclasses whose `to_document()` is the `--json` document (docs/json.md). Torch-free: the standard library,
the result base and summary.py.

`SweepRecord` is a finished run's one record type: the sweep makes it (execute.run_task), keeps it in --out-dir
(records.py) and reports it. It is written out in two shapes: the document's (`to_dict()`: `metrics.test.accuracy`,
`sparsity.achieved`, as in extract's document), which is also what a run's record file holds, and the flat one
(`flat()`: `test_accuracy`, `achieved_sparsity`, ...), which summary.py summarises and which record files held
before they had a schema. `flat_record` is the one conversion from the document's shape to the flat one (checking
that shape); `SweepRecord.of` reads the flat shape, `from_document` the document's, so that a saved sweep can be
summarised again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, present
from ticketcli.sweep.summary import PAPER_BAND, summarize

# the flat record's measurements, which the document moves to metrics.<split> and sparsity
FLAT_MEASURES = ("requested_sparsity", "test_accuracy", "val_accuracy", "test_loss", "achieved_sparsity")
# a language model's run (--dataset text) also has these, at metrics.<split>.bits_per_char; an image run has neither
LM_MEASURES = ("test_bits_per_char", "val_bits_per_char")


@dataclass(frozen=True)
class SweepRecord:
    """One finished run of the sweep (a ticket in --out-dir when there is one)."""

    id: str
    seed: int
    group: str  # edge-popup (the sweep), a double-scoring method, random
    config: str
    fixed: bool  # the fixed edge-popup run (k = 1 - sparsity)
    method: dict[str, Any]  # the ticket's method record, as extract and inspect report it
    requested_sparsity: float
    layer_densities: tuple[float, ...] | None
    test_accuracy: float
    val_accuracy: float
    test_loss: float
    achieved_sparsity: float
    masks_sha256: str  # the ticket's digest, as extract and inspect report it
    device: str
    threads: int
    wall_time_s: float
    ticket: str | None  # None without --out-dir
    ticket_sha256: str | None
    test_bits_per_char: float | None = None  # a language model's run (--dataset text); None for an image model's
    val_bits_per_char: float | None = None

    @property
    def language_model(self) -> bool:
        return self.test_bits_per_char is not None

    @classmethod
    def of(cls, flat: Mapping[str, Any]) -> SweepRecord:
        """From sweep's flat record (flat(), or flat_record's reading of the document's shape)."""
        values: dict[str, Any] = {
            f.name: flat.get(f.name) if f.name in LM_MEASURES else flat[f.name] for f in fields(cls)
        }
        ld = values["layer_densities"]
        return cls(**{**values, "layer_densities": None if ld is None else tuple(ld)})

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> SweepRecord:
        """From a record of a sweep-k --json document (or of a run's record file); ValueError if it is not one."""
        flat = flat_record(doc)
        if flat is None:
            raise ValueError("not a sweep-k record: its metrics, sparsity or method are not the document's")
        return cls.of(flat)

    def flat(self) -> JsonObject:
        """Sweep's flat shape (what summary.summarize reads), in the fields' order; a language model's bits per
        character only where the run has them (an image run's flat record is what it always was)."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in LM_MEASURES}
        if self.language_model:
            flat |= {"test_bits_per_char": self.test_bits_per_char, "val_bits_per_char": self.val_bits_per_char}
        flat["layer_densities"] = None if self.layer_densities is None else list(self.layer_densities)
        return flat

    def to_dict(self) -> JsonObject:
        """The record in the document: the flat record with extract's metrics and sparsity shapes in place of its
        flat accuracy and sparsity keys."""
        doc = {k: v for k, v in self.flat().items() if k not in FLAT_MEASURES + LM_MEASURES}
        doc["metrics"] = {
            "val": {"accuracy": self.val_accuracy},
            "test": {"accuracy": self.test_accuracy, "loss": self.test_loss},
        }
        if self.language_model:
            doc["metrics"]["val"]["bits_per_char"] = self.val_bits_per_char
            doc["metrics"]["test"]["bits_per_char"] = self.test_bits_per_char
        doc["sparsity"] = {"achieved": self.achieved_sparsity, "requested": self.requested_sparsity}
        return doc


def flat_record(stored: Any) -> JsonObject | None:
    """A record in the document's shape (method record, metrics, sparsity) as the flat record, the method kept as
    its record; None when its shape is not that (values are not checked here: records.finished checks them). A
    language model's record has bits_per_char in both splits, an image model's in neither."""
    if not isinstance(stored, Mapping):
        return None
    metrics, sparsity, method = stored.get("metrics"), stored.get("sparsity"), stored.get("method")
    if not (isinstance(metrics, Mapping) and metrics.keys() == {"test", "val"} and isinstance(sparsity, Mapping)):
        return None
    test, val = metrics["test"], metrics["val"]
    if not (isinstance(test, Mapping) and isinstance(val, Mapping)):
        return None
    lm = "bits_per_char" in test  # a language model's run
    bits = {"bits_per_char"} if lm else set()
    if test.keys() != {"accuracy", "loss"} | bits:
        return None
    if val.keys() != {"accuracy"} | bits or sparsity.keys() != {"achieved", "requested"}:
        return None
    if not (isinstance(method, Mapping) and isinstance(method.get("name"), str)):
        return None
    flat = {k: v for k, v in stored.items() if k not in ("metrics", "sparsity")}
    flat.update(
        test_accuracy=test["accuracy"],
        test_loss=test["loss"],
        val_accuracy=val["accuracy"],
        achieved_sparsity=sparsity["achieved"],
        requested_sparsity=sparsity["requested"],
    )
    if lm:
        flat.update(test_bits_per_char=test["bits_per_char"], val_bits_per_char=val["bits_per_char"])
    return flat


@dataclass(frozen=True)
class Stats:
    """Count, mean, sample standard deviation (None below two values), min and max of some runs' values."""

    n: int
    mean: float | None
    std: float | None
    min: float | None
    max: float | None

    def to_dict(self) -> JsonObject:
        return {"n": self.n, "mean": self.mean, "std": self.std, "min": self.min, "max": self.max}


@dataclass(frozen=True)
class GroupSummary:
    """Test accuracy and achieved sparsity over a group's runs (`configs`: the edge-popup sweep's run count)."""

    test: Stats
    achieved_sparsity: Stats
    configs: int | None = None
    test_bits: Stats | None = None  # a language model's runs: their test bits per character

    @classmethod
    def of(cls, g: Mapping[str, Any]) -> GroupSummary:
        return cls(
            test=Stats(**g["test"]),
            achieved_sparsity=Stats(**g["achieved_sparsity"]),
            configs=g.get("configs"),
            test_bits=_stats_or_none(g.get("test_bits_per_char")),
        )

    def to_dict(self) -> JsonObject:
        doc: JsonObject = {} if self.configs is None else {"configs": self.configs}
        doc["metrics"] = {"test": split_stats(self.test, self.test_bits)}
        doc["sparsity"] = {"achieved": self.achieved_sparsity.to_dict()}
        return doc


def _stats_or_none(s: Mapping[str, Any] | None) -> Stats | None:
    return None if s is None else Stats(**s)


def split_stats(accuracy: Stats, bits: Stats | None) -> JsonObject:
    """A group's metrics.test: its accuracy statistics, and a language model's bits per character beside them."""
    return {"accuracy": accuracy.to_dict()} | ({} if bits is None else {"bits_per_char": bits.to_dict()})


@dataclass(frozen=True)
class OraclePick:
    """The run an oracle chose for one seed (best validation accuracy)."""

    id: str
    config: str
    val_accuracy: float
    test_accuracy: float
    achieved_sparsity: float
    val_bits_per_char: float | None = None  # a language model's run
    test_bits_per_char: float | None = None

    def to_dict(self) -> JsonObject:
        metrics: JsonObject = {"val": {"accuracy": self.val_accuracy}, "test": {"accuracy": self.test_accuracy}}
        if self.test_bits_per_char is not None:
            metrics["val"]["bits_per_char"] = self.val_bits_per_char
            metrics["test"]["bits_per_char"] = self.test_bits_per_char
        return {
            "id": self.id,
            "config": self.config,
            "metrics": metrics,
            "sparsity": {"achieved": self.achieved_sparsity},
        }


@dataclass(frozen=True)
class OracleSummary:
    """An oracle (in the achieved-sparsity band, or unconstrained: band None): its pick per seed and their stats."""

    band: tuple[float, float] | None
    per_seed: dict[str, OraclePick | None]  # seed (as a string) -> its pick, None when no run qualified
    test: Stats
    achieved_sparsity: Stats
    seeds_without_candidate: tuple[str, ...]
    test_bits: Stats | None = None  # a language model's runs: their test bits per character

    @classmethod
    def of(cls, o: Mapping[str, Any]) -> OracleSummary:
        band = o["band"]
        return cls(
            band=None if band is None else (band[0], band[1]),
            per_seed={s: None if p is None else OraclePick(**p) for s, p in o["per_seed"].items()},
            test=Stats(**o["test"]),
            achieved_sparsity=Stats(**o["achieved_sparsity"]),
            seeds_without_candidate=tuple(o["seeds_without_candidate"]),
            test_bits=_stats_or_none(o.get("test_bits_per_char")),
        )

    def to_dict(self) -> JsonObject:
        return {
            "band": None if self.band is None else list(self.band),
            "seeds_without_candidate": list(self.seeds_without_candidate),
            "metrics": {"test": split_stats(self.test, self.test_bits)},
            "sparsity": {"achieved": self.achieved_sparsity.to_dict()},
            "per_seed": {s: None if p is None else p.to_dict() for s, p in self.per_seed.items()},
        }


@dataclass(frozen=True)
class SweepSummary:
    """Section 6.3's quantities (summary.summarize): the edge-popup sweep's range, both oracles, fixed edge-popup and
    each other method's mean and std over seeds."""

    seeds: tuple[int, ...]
    edge_popup: GroupSummary
    oracle_constrained: OracleSummary
    oracle_unconstrained: OracleSummary
    fixed_edge_popup: GroupSummary
    methods: dict[str, GroupSummary]

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> SweepSummary:
        return cls(
            seeds=tuple(s["seeds"]),
            edge_popup=GroupSummary.of(s["edge_popup"]),
            oracle_constrained=OracleSummary.of(s["oracle_constrained"]),
            oracle_unconstrained=OracleSummary.of(s["oracle_unconstrained"]),
            fixed_edge_popup=GroupSummary.of(s["fixed_edge_popup"]),
            methods={m: GroupSummary.of(g) for m, g in s["methods"].items()},
        )

    @classmethod
    def of_records(cls, records: Sequence[SweepRecord], band: tuple[float, float] = PAPER_BAND) -> SweepSummary:
        return cls.of(summarize([r.flat() for r in records], band=band))

    def to_dict(self) -> JsonObject:
        return {
            "seeds": list(self.seeds),
            "edge_popup": self.edge_popup.to_dict(),
            "oracle_constrained": self.oracle_constrained.to_dict(),
            "oracle_unconstrained": self.oracle_unconstrained.to_dict(),
            "fixed_edge_popup": self.fixed_edge_popup.to_dict(),
            "methods": {m: g.to_dict() for m, g in self.methods.items()},
        }


@dataclass(frozen=True)
class SweepSettings:
    """What the command ran: the requested sparsity, the seeds, the density pool, the band and the execution."""

    sparsity: float
    seeds: tuple[int, ...]
    densities: tuple[float, ...]
    layerwise: int
    band: tuple[float, float]
    model: str
    dataset: str
    epochs: int
    double_scoring: tuple[str, ...]
    workers: int
    threads: int
    executor: str
    out_dir: str | None

    def to_dict(self) -> JsonObject:
        """Every setting by its field's name, in their order (tuples as lists)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


@dataclass(frozen=True)
class SweepResult(Result):
    """What `ticket sweep-k` reports: every run's record in plan order, the ids resumed from --out-dir, the summary,
    and (from the command line) its settings, plot and thread count; `to_document()` is its --json document."""

    COMMAND = "sweep-k"
    records: tuple[SweepRecord, ...]
    resumed: tuple[str, ...]
    summary: SweepSummary
    settings: SweepSettings | None = None
    plot: str | None = None
    threads: int | None = None

    @classmethod
    def of(
        cls, records: Sequence[SweepRecord], resumed: Sequence[str], band: tuple[float, float] = PAPER_BAND
    ) -> SweepResult:
        """From the sweep's records in plan order (run.run_sweep), summarised with `band`."""
        return cls(records=tuple(records), resumed=tuple(resumed), summary=SweepSummary.of_records(records, band))

    def body(self) -> JsonObject:
        doc: JsonObject = {
            "records": [r.to_dict() for r in self.records],
            "resumed": list(self.resumed),
            "summary": self.summary.to_dict(),
        }
        settings = None if self.settings is None else self.settings.to_dict()
        return doc | present(settings=settings, plot=self.plot, threads=self.threads)
