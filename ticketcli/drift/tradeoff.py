"""The sparsity-accuracy trade-off (arXiv 2605.17659: a sharp cliff above ~70% activation sparsity): one drift run
per (model, target activation sparsity) under top-k or percentile control, accuracy against the achieved sparsity,
and the cliff: the largest accuracy drop between neighbouring targets.

Runs are independent tasks, in-process or in a local spawn pool; each sets a fixed torch thread count, so its
numbers do not depend on the number of workers (as in sweep-k).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

from ticketcli.contract.schema import JsonObject
from ticketcli.drift.result import TradeoffModel, TradeoffResult
from ticketcli.drift.run import run_drift
from ticketcli.drift.spec import ControlSpec, DriftSpec
from ticketcli.runtime.pool import run_pool
from ticketcli.runtime.threads import using


@dataclass(frozen=True)
class TradeoffTask:
    index: int  # position in the plan: records come back in this order whatever finishes first
    spec: DriftSpec  # the model and every training setting
    control: ControlSpec  # the target of this run


def plan(specs: list[DriftSpec], targets: tuple[float, ...], mode: str, freeze_after: int | None) -> list[TradeoffTask]:
    """One task per (model, target), models in the given order, targets increasing."""
    runs = product(specs, (ControlSpec(mode=mode, target=t, freeze_after=freeze_after) for t in targets))
    return [TradeoffTask(i, spec, control) for i, (spec, control) in enumerate(runs)]


def run_task(task: TradeoffTask, threads: int) -> JsonObject:
    """One controlled drift run with exactly `threads` torch threads; its record (means over seeds)."""
    with using(threads):
        r = run_drift(task.spec, control=task.control)
    ctl, sm = r.act_control, r.summary
    assert ctl is not None  # a controlled run
    return {
        "model": r.spec.model.to_string(),
        "target": task.control.target,
        "accuracy": sm.accuracy.mean[-1],
        "accuracy_std": sm.accuracy.std[-1],
        "loss": sm.loss.mean[-1],
        "achieved_sparsity": ctl["overall"]["sparsity"],
        "neg_preact_share": ctl["overall"]["neg_preact_share"],
        "layers": {s: v["sparsity"] for s, v in ctl["sites"].items()},
        "seeds": list(r.seeds),
        "threads": threads,
    }


def find_cliff(curve: list[JsonObject]) -> JsonObject | None:
    """The largest accuracy drop between neighbouring targets of one model's curve (sorted by target); None when
    accuracy never drops."""
    pts = sorted(curve, key=lambda p: p["target"])
    best = None
    for a, b in zip(pts, pts[1:]):
        drop = a["accuracy"] - b["accuracy"]
        if drop > 0 and (best is None or drop > best["drop"]):
            best = {
                "from_target": a["target"],
                "to_target": b["target"],
                "from_sparsity": a["achieved_sparsity"],
                "to_sparsity": b["achieved_sparsity"],
                "from_accuracy": a["accuracy"],
                "to_accuracy": b["accuracy"],
                "drop": drop,
            }
    return best


def run_tradeoff(
    tasks: list[TradeoffTask],
    *,
    workers: int = 1,
    threads: int = 1,
    on_result: Callable[[JsonObject], None] | None = None,
) -> TradeoffResult:
    """Every task (in parallel with workers > 1), then per model its curve and cliff."""
    records: dict[int, JsonObject] = {}
    done = run_pool(
        run_task, tasks, workers=workers, threads=threads, describe=lambda t: f"target {t.control.target:g}"
    )
    for task, record in done:
        records[task.index] = record
        if on_result is not None:
            on_result(record)
    curves: dict[str, list[JsonObject]] = {}
    for t in tasks:
        curves.setdefault(records[t.index]["model"], []).append(records[t.index])
    first = tasks[0]
    return TradeoffResult(
        spec=first.spec,
        models={name: TradeoffModel(curve=tuple(c), cliff=find_cliff(c)) for name, c in curves.items()},
        targets=tuple(sorted({t.control.target for t in tasks})),
        mode=first.control.mode,
        control={k: v for k, v in first.control.to_dict().items() if k in ("mode", "freeze_after", "ema")},
        seeds=first.spec.seeds,
        workers=workers,
        threads=threads,
        chance=1.0 / first.spec.model.widths[-1] if first.spec.model.widths else None,
    )
