"""What `ticket drift` logs with --log-to (docs/tracking.md lists the tags): per seed a child run with every
measurement as a scalar per step, logged as the run goes (a run dir's checkpoints) or at its end, and the run's
settings, last loss and accuracy, schema and plot. Like track/feed.py, a mistake here is a warning (`guarded`)."""

from __future__ import annotations

from pathlib import Path

from ticketcli.contract.schema import JsonObject
from ticketcli.drift.result import DriftResult, TradeoffResult
from ticketcli.track.base import Tracking, Warn, flat
from ticketcli.track.feed import guarded, weak_info
from ticketcli.track.info import RunInfo, run_name


def drift_info(model: str | None, ticket: Path | None) -> RunInfo:
    """drift's run: named from the model (or the ticket's run) and whether it trains a ticket's weights."""
    if ticket is not None:
        info = weak_info(ticket)
        return RunInfo("drift_" + info.name.removeprefix("weak_"), info.params, {**info.tags, "command": "drift"})
    return RunInfo(run_name("drift", model or "model", "dense"), {}, {"command": "drift"})


def seed_run(seed: int) -> RunInfo:
    """A drift seed's child run, named alike whether it is logged as the run goes (DriftLive) or at its end."""
    return RunInfo(f"seed{seed}", {"seed": seed})


class DriftLive:
    """A run dir's drift run logged as it goes (the keeper's on_kept): each measurement in its seed's child run
    (seed<N>) once a checkpoint keeps it, so that a resume, which reopens the same runs and goes on from its
    checkpoint, logs every step once. `sent` counts the measurements this process logged."""

    def __init__(self, tracking: Tracking, warn: Warn):
        self.tracking, self.children, self.sent = tracking, dict[int, Tracking](), 0
        self.log = guarded(lambda seed, step, m: self.child(seed).scalars(step, scalars(m)), warn)

    def child(self, seed: int) -> Tracking:
        if seed not in self.children:
            self.children[seed] = self.tracking.child(seed_run(seed))
        return self.children[seed]

    def __call__(self, seed: int, step: int, m: JsonObject) -> None:
        self.sent += 1
        self.log(seed, step, m)


def scalars(m: JsonObject) -> dict[str, float]:
    """One measurement's scalars: loss, accuracy (and perplexity) and every site's statistics that are set."""
    values: dict[str, float] = {k: m[k] for k in ("loss", "accuracy", "perplexity") if k in m}
    for site, stats in m["layers"].items():
        values |= {f"{site}/{key}": v for key, v in stats.items() if v is not None}
    return values


def drift_final(
    tracking: Tracking, result: DriftResult | TradeoffResult, warn: Warn, live: DriftLive | None = None
) -> None:
    """Per seed, a child run (seed<N>) with loss and accuracy on the probe and every site's series
    (<site>/neg_preact_share, <site>/sparsity, <site>/weight_mean, <site>/spike_ratio, ...) at each logged step
    (live: logged already, as the run went); the run's settings as parameters, the last step's loss and accuracy
    (not again when a resumed run found the run dir finished, live.sent 0), schema (and a ticket's masks_sha256) as
    tags, the plot as an artifact."""
    if isinstance(result, TradeoffResult):  # a table of finished runs, not series
        warn("--log-to: drift --tradeoff is not logged (only drift's training runs are)")
        return
    for run in result.runs:
        if live is not None:
            live.child(run["seed"]).close("FINISHED")
            continue
        child = tracking.child(seed_run(run["seed"]))
        for i, step in enumerate(run["steps"]):  # each logged step's measurement, as DriftLive logs it
            layers = {
                site: {k: v[i] for k, v in series.items() if isinstance(v, list) and i < len(v)}
                for site, series in run["layers"].items()
            }
            at: JsonObject = {k: run[k][i] for k in ("loss", "accuracy", "perplexity") if k in run}
            child.scalars(int(step), scalars({**at, "layers": layers}))
        child.close("FINISHED")
    hparams = flat({k: v for k, v in result.settings.items() if not isinstance(v, (dict, list))})
    last = result.summary
    metrics: JsonObject = {"loss": last.loss.mean[-1], "accuracy": last.accuracy.mean[-1]}
    if live is None or live.sent:
        tracking.finish(int(last.steps[-1]) if last.steps else 0, metrics, hparams)
    tracking.tags({"schema": result.to_document()["schema"]})
    tracking.artifact(result.plot)
