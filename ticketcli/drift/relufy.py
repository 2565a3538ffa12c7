"""ReLUfication (arXiv 2605.17659, improvement 4): train a network with a smooth activation (GELU, SiLU, ...), swap
a ReLU variant in at every activation site keeping the trained weights, fine-tune for a few epochs, and compare
accuracy and post-activation sparsity before the swap, right after it and after fine-tuning.

One run is two drift_one phases on the same batch stream; its series is both phases end to end (the swap step
logged twice: before and after), so drift's tables and plot show the whole trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from functools import partial
from pathlib import Path

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.drift.inputs import Inputs
from ticketcli.drift.result import DriftRelufyResult
from ticketcli.drift.run import drift_one, run_drift
from ticketcli.drift.spec import DriftSpec, RelufySpec
from ticketcli.methods.base import Progress
from ticketcli.models.masked import MaskedNet
from ticketcli.specs.run import ModelPolicy


def fine_tune_steps(n_examples: int, batch_size: int, epochs: int) -> int:
    """Optimiser steps in `epochs` passes over n_examples (the last partial batch included)."""
    return epochs * math.ceil(n_examples / batch_size)


def point(series: JsonObject, i: int) -> JsonObject:
    """One logged step of a series: probe loss, accuracy and post-activation sparsity per hidden layer and mean."""
    hidden = {la: s["sparsity"][i] for la, s in series["layers"].items() if "sparsity" in s}
    return {
        "step": series["steps"][i],
        "loss": series["loss"][i],
        "accuracy": series["accuracy"][i],
        "sparsity": sum(hidden.values()) / len(hidden) if hidden else None,
        "layers": hidden,
    }


def _join(first: JsonObject, second: JsonObject) -> JsonObject:
    """Both phases as one series: steps of the second continue the first's, drift measured from the very start."""
    out: JsonObject = {
        "steps": first["steps"] + [first["steps"][-1] + s for s in second["steps"]],
        "loss": first["loss"] + second["loss"],
        "accuracy": first["accuracy"] + second["accuracy"],
        "layers": {},
    }
    for layer, a in first["layers"].items():
        b = dict(second["layers"][layer])
        b["weight_drift"] = [m - a["weight_mean"][0] for m in b["weight_mean"]]
        sd = a["initial_std"]
        b["weight_drift_std"] = [d / sd if sd > 0 else None for d in b["weight_drift"]]
        out["layers"][layer] = {k: (v + b[k] if isinstance(v, list) else v) for k, v in a.items()}
    return out


def relufy_one(
    net: MaskedNet,
    masks: dict[str, torch.Tensor] | None,
    spec: DriftSpec,
    inputs: Inputs,
    *,
    relu: RelufySpec,
    on_log: Callable[[int, JsonObject, dict[str, torch.Tensor]], None] | None = None,
    control: object = None,
    on_step: Callable[[int], None] | None = None,
) -> JsonObject:
    """spec.steps with relu.source, then the swap to relu.target and relu.epochs epochs of fine-tuning (drift_one's
    stand-in for run_drift, which passes no control with it: --relufy does not go with --act-sparsity). The record's
    "relufy" holds the three measured points."""
    weights: list[dict[str, torch.Tensor]] = []  # effective weights at the last step of phase 1, first of phase 2

    def watch(phase: int, offset: int) -> Callable[[int, JsonObject, dict[str, torch.Tensor]], None]:
        def log(step: int, m: JsonObject, eff: dict[str, torch.Tensor]) -> None:
            if (phase == 1 and step == spec.steps) or (phase == 2 and step == 0):
                weights.append({n: w.clone() for n, w in eff.items()})
            if on_log is not None:  # the swap step twice, like the series: before and after the swap
                on_log(offset + step, m, eff)

        return log

    def step_at(offset: int) -> Callable[[int], None] | None:
        return None if on_step is None else (lambda step: on_step(offset + step))

    smooth = drift_one(
        net, masks, replace(spec, activation=relu.source), inputs, on_log=watch(1, 0), on_step=step_at(0)
    )
    net.load_weights({**net.weights, **weights[0]})  # the trained weights become the network's (W * M: zeros stay)
    n = int(inputs.y.numel())
    steps = fine_tune_steps(n, spec.batch_size, relu.epochs)
    tuned_spec = replace(spec, activation=relu.target, steps=steps, log_every=min(spec.log_every, steps))
    tuned = drift_one(net, masks, tuned_spec, inputs, on_log=watch(2, spec.steps), on_step=step_at(spec.steps))
    before, swapped, after = point(smooth, -1), point(tuned, 0), point(tuned, -1)
    return {
        **_join(smooth, tuned),
        "relufy": {
            **relu.to_dict(),
            "fine_tune_steps": steps,
            "weights_kept": all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0]),
            "before": before,
            "swapped": swapped,
            "after": after,
            "accuracy_change": after["accuracy"] - before["accuracy"],
        },
    }


def run_relufy(
    spec: DriftSpec,
    relu: RelufySpec,
    *,
    ticket: str | Path | None = None,
    weights: str | None = None,
    progress: Progress | None = None,
    policy: ModelPolicy = ModelPolicy(),
) -> DriftRelufyResult:
    """ReLUfy for every seed (or a ticket's kept weights); drift's result plus `relufy`: the mean over runs."""
    result = run_drift(
        spec, ticket=ticket, weights=weights, progress=progress, policy=policy, run_one=partial(relufy_one, relu=relu)
    )
    records = [r["relufy"] for r in result.runs]

    def mean(stage: str, key: str) -> float:
        return float(sum(r[stage][key] for r in records) / len(records))

    relufy = {
        **relu.to_dict(),
        "fine_tune_steps": records[0]["fine_tune_steps"],
        "weights_kept": all(r["weights_kept"] for r in records),
        **{s: {k: mean(s, k) for k in ("loss", "accuracy", "sparsity")} for s in ("before", "swapped", "after")},
        "accuracy_change": sum(r["accuracy_change"] for r in records) / len(records),
    }
    return DriftRelufyResult(**{f.name: getattr(result, f.name) for f in fields(result)} | {"relufy": relufy})
