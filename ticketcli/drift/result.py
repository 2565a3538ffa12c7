"""drift's typed results: a drift run (and its activation-control and ReLUfication variants) and the trade-off
sweep, as frozen dataclasses whose `to_document()` is the `--json` document of their schema (docs/json.md). The
command's tables and plots read their attributes and pick themselves by the result's class (`views.show`,
`views.figure`); nothing callable travels in the data. Torch-free: the result base and drift's specs.

What is fixed is typed (the run's settings as its DriftSpec, the mean ± std series of the summary, per layer); each
seed's logged series, the control's and ReLUfication's records stay the JSON objects their modules build
(`JsonObject`), in which every object keyed by layer or site name becomes a list of named objects in the document
(`named_layers`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, present
from ticketcli.drift.spec import DriftSpec


def named_layers(node: Any) -> Any:
    """Every `layers` (or activation `sites`) object keyed by name becomes a list of objects with a `name`, in the
    same order (a bare number there is that layer's activation sparsity); the input is left untouched."""
    if isinstance(node, list):
        return [named_layers(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("layers", "sites") and isinstance(v, dict):
            out[k] = [
                {"name": n, **named_layers(x)} if isinstance(x, dict) else {"name": n, "sparsity": x}
                for n, x in v.items()
            ]
        else:
            out[k] = named_layers(v)
    return out


@dataclass(frozen=True)
class MeanStd:
    """A statistic at every logged step: its mean over seeds and their standard deviation (None for one seed's
    missing value)."""

    mean: tuple[float | None, ...]
    std: tuple[float | None, ...]

    @classmethod
    def of(cls, s: Mapping[str, Sequence[float | None]]) -> MeanStd:
        return cls(mean=tuple(s["mean"]), std=tuple(s["std"]))

    def to_dict(self) -> JsonObject:
        return {"mean": list(self.mean), "std": list(self.std)}


@dataclass(frozen=True)
class LayerSummary:
    """One layer's statistics over the logged steps (weight_mean, sparsity, ...: the hidden-layer ones are absent for
    the output layer) and the share of seeds whose weight mean fell from the first to the last step."""

    series: dict[str, MeanStd]
    negative_drift_share: float

    def to_dict(self) -> JsonObject:
        return {**{k: v.to_dict() for k, v in self.series.items()}, "negative_drift_share": self.negative_drift_share}


@dataclass(frozen=True)
class DriftSummary:
    """The mean over seeds (run.summarise): the logged steps, loss, accuracy (perplexity for a text model) and each
    layer's statistics."""

    steps: tuple[int, ...]
    loss: MeanStd
    accuracy: MeanStd
    layers: dict[str, LayerSummary]
    perplexity: MeanStd | None = None

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> DriftSummary:
        layers = {
            name: LayerSummary(
                series={k: MeanStd.of(v) for k, v in stats.items() if k != "negative_drift_share"},
                negative_drift_share=stats["negative_drift_share"],
            )
            for name, stats in s["layers"].items()
        }
        perplexity = s.get("perplexity")
        return cls(
            steps=tuple(s["steps"]),
            loss=MeanStd.of(s["loss"]),
            accuracy=MeanStd.of(s["accuracy"]),
            layers=layers,
            perplexity=None if perplexity is None else MeanStd.of(perplexity),
        )

    def to_dict(self) -> JsonObject:
        return {
            "steps": list(self.steps),
            "loss": self.loss.to_dict(),
            "accuracy": self.accuracy.to_dict(),
            "layers": [{"name": n, **la.to_dict()} for n, la in self.layers.items()],
        } | present(perplexity=None if self.perplexity is None else self.perplexity.to_dict())


@dataclass(frozen=True)
class DriftResult(Result):
    """What `ticket drift` reports: its settings (the spec it ran, after a ticket or a corpus fixed the model), every
    seed's logged series, their mean over seeds, and where it ran; `to_document()` is its --json document."""

    COMMAND = "drift"
    spec: DriftSpec
    seeds: tuple[int, ...]
    probe_n: int  # examples in the fixed probe batch the statistics are measured on
    ticket: str | None  # the ticket whose kept weights were trained, if any
    device: str
    wall_time_s: float
    runs: tuple[JsonObject, ...]  # per seed: its logged series (steps, loss, accuracy, layers by name, ...)
    summary: DriftSummary
    integrity: str | None  # the ticket's masks digest check, None without a ticket
    corpus: JsonObject | None = None  # a character-level model's text: sources, characters, vocab, blocks
    act_control: JsonObject | None = None  # activation control: its spec, per-site and overall means, each run's
    relufy: JsonObject | None = None  # ReLUfication: its spec and the mean of before / swapped / after over runs
    threads: int | None = None
    plot: str | None = None

    @property
    def masked(self) -> bool:
        """Whether only a ticket's kept weights trained."""
        return self.ticket is not None

    @property
    def settings(self) -> JsonObject:
        """The run's settings as its document records them (model, dataset, activation, zero_rule, ...)."""
        return self.spec.to_dict()

    def body(self) -> JsonObject:
        return {
            **self.settings,
            **present(corpus=self.corpus),
            "seeds": list(self.seeds),
            "probe_n": self.probe_n,
            "ticket": self.ticket,
            "masked": self.masked,
            "device": self.device,
            "wall_time_s": self.wall_time_s,
            "runs": named_layers(list(self.runs)),
            "summary": self.summary.to_dict(),
            "integrity": self.integrity,
        } | present(  # named_layers passes None through
            act_control=named_layers(self.act_control),
            relufy=named_layers(self.relufy),
            threads=self.threads,
            plot=self.plot,
        )


@dataclass(frozen=True)
class DriftControlResult(DriftResult):
    """A drift run under activation-sparsity control (`act_control` set)."""

    COMMAND = "drift-control"


@dataclass(frozen=True)
class DriftRelufyResult(DriftResult):
    """A ReLUfication run: the source activation, the swap and the fine-tuning (`relufy` set)."""

    COMMAND = "drift-relufy"


@dataclass(frozen=True)
class TradeoffModel:
    """One model's trade-off curve (a record per target, increasing) and its cliff (None: accuracy never drops)."""

    curve: tuple[JsonObject, ...]  # tradeoff.run_task's records: target, accuracy, achieved_sparsity, layers, ...
    cliff: JsonObject | None

    def to_dict(self) -> JsonObject:
        curve = [
            {k: v for k, v in named_layers(p).items() if k != "achieved_sparsity"}
            | {"sparsity": {"achieved": p["achieved_sparsity"], "requested": p["target"]}}
            for p in self.curve
        ]
        return {"curve": curve, "cliff": self.cliff}


@dataclass(frozen=True)
class TradeoffResult(Result):
    """What `ticket drift --tradeoff` reports: per model its accuracy-vs-sparsity curve and cliff, and the settings
    every run shared (`spec`: the first model's; each model's name is a key of `models`)."""

    COMMAND = "drift-tradeoff"
    spec: DriftSpec
    models: dict[str, TradeoffModel]
    targets: tuple[float, ...]
    mode: str  # topk or percentile
    control: JsonObject  # mode, freeze_after, ema
    seeds: tuple[int, ...]
    workers: int
    threads: int  # torch threads per worker
    chance: float | None  # 1 / the number of classes
    plot: str | None = None

    @property
    def settings(self) -> JsonObject:
        """The settings every run shared, less the model (the document's top-level keys)."""
        return {k: v for k, v in self.spec.to_dict().items() if k != "model"}

    def body(self) -> JsonObject:
        return {
            **self.settings,
            "models": {name: m.to_dict() for name, m in self.models.items()},
            "targets": list(self.targets),
            "mode": self.mode,
            "control": self.control,
            "seeds": list(self.seeds),
            "workers": self.workers,
            "threads": self.threads,
            "chance": self.chance,
        } | present(plot=self.plot)
