"""Claims 1, 2, 3 and 8 of the weight-drift notes (arXiv 2605.17659) with `ticket drift`, one seed at a time
(claims 4-7 are drift_claims_control.py's; benchmarks/drift_claims.py runs both, resumes and prints the table):

1. negative weight drift for relu, gelu, silu, relu2, gelu2 with MSE and cross-entropy, on data and on random
   inputs, across an MLP, a ResNet and a ViT; and the share of negative pre-activations (source: 60-80%);
2. the covariance term of the mean weight gradient against the mean-field term E[g] E[a] (source: orders of
   magnitude smaller);
3. relu2 with LayerNorm / RMSNorm against BatchNorm and no normalisation (source: LN/RMS work, BN/none degrade);
8. relu2-clip (c = 50) against GELU in GPT-nano pretraining on the fortunes text, validation loss (source: clipped
   relu2 improves on the alternative; 3.236 vs 3.251 against unclipped relu2).

MEASURE[unit](settings, seed) makes one seed's runs and returns plain numbers (what a results file holds);
SUMMARISE[unit](settings, {seed: numbers}) turns the seeds' numbers into table rows with their spread. The settings
come from drift_claims_scales.py. "Weights fed by an activation" are the layers whose input is an activation's
output: an MLP's layers after the first, every ResNet convolution after the stem, a transformer block's mlp.fc2.
Drift is the last logged weight mean minus the first, in units of the initial std.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ticketcli.drift.options import build_drift_spec
from ticketcli.drift.result import DriftResult
from ticketcli.drift.run import run_drift
from ticketcli.drift.spec import DriftSpec
from ticketcli.settings.resolve import data_location

Row = dict[str, Any]


def drift_spec(s: dict[str, Any], seed: int, **run: Any) -> DriftSpec:
    """One seed's DriftSpec from a unit's settings `s` and this run's own (model, activation, ...); statistics at the
    first and the last step only (the claims read no series in between)."""
    steps = s["steps"]
    given = {
        "dataset": s.get("dataset"),
        "device": s["device"],
        "seeds": str(seed),
        "steps": steps,
        "log_every": steps,
        "batch_size": s["batch_size"],
        "probe_size": s["probe_size"],
        "optimizer": s["optimizer"],
        "lr": s["lr"],
        **run,
    }
    spec = build_drift_spec(given, data_location(None, False))
    if s.get("n"):
        spec = replace(spec, data=replace(spec.data, n_extract=s["n"][0], n_val=s["n"][1]))
    return spec


def drift(s: dict[str, Any], seed: int, **run: Any) -> DriftResult:
    """One `ticket drift` run (no progress) of one seed."""
    return run_drift(drift_spec(s, seed, **run))


def fed_by_activation(model: str, layer: str) -> bool:
    if model.startswith("mlp"):
        return layer != "layers.0"
    if model.startswith("resnet"):
        return layer != "conv1"  # the stem sees the image; fc sees the pooled last ReLU
    return layer.endswith("mlp.fc2")


def spread(values: list[float], fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """mean ± sample std (min-max) over seeds; one seed: its value."""
    v = [scale * x for x in values]
    if len(v) == 1:
        return fmt.format(v[0])
    mean, std, lo, hi = (fmt.format(x) for x in (statistics.mean(v), statistics.stdev(v), min(v), max(v)))
    return f"{mean} ± {std} ({lo}-{hi})"


def pct(values: list[float]) -> str:
    return spread(values, "{:.1f}", 100.0) + "%"


def verdict(per_seed: list[bool]) -> str:
    """yes when every seed held, no when none did, partly otherwise; with the count when there are several."""
    n, k = len(per_seed), sum(per_seed)
    word = "yes" if k == n else "no" if k == 0 else "partly"
    return word if n == 1 else f"{word} ({k}/{n} seeds)"


def row(claim: str, setting: str, source: str, ours: str, held: str, seeds: list[int]) -> Row:
    return {
        "claim": claim,
        "setting": setting,
        "source": source,
        "ours": ours,
        "held": held,
        "seeds": ",".join(map(str, seeds)),
    }


def where(s: dict[str, Any]) -> str:
    """The shared part of a row's setting: data, steps x batch, optimiser."""
    data = s.get("dataset") or "fortunes text"
    if s.get("n"):
        data += f" ({s['n'][0]}/{s['n'][1]})"
    return f"{data}, {s['steps']} steps x {s['batch_size']}, {s['optimizer']} lr {s['lr']:g}"


# -- claims 1 and 2 ----------------------------------------------------------------------------------------------


def measure_claim1(s: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every model x inputs x activation x loss of the unit, one seed: the drift of the layers fed by an activation,
    every hidden site's share of h < 0 at the end, and claim 2's |Cov| / |E[g]E[a]| ratios at step 0."""
    runs = []
    for model in s["models"]:
        for inputs in s["inputs"]:
            for act in s["acts"]:
                for loss in s["losses"]:
                    r = drift(s, seed, model=model, activation=act, loss=loss, inputs=inputs)
                    layers = {n: {k: v.to_dict() for k, v in la.series.items()} for n, la in r.summary.layers.items()}
                    fed = [la for la in layers if fed_by_activation(model, la)]
                    ratios = []
                    for la in fed:
                        outer, cov = layers[la]["grad_outer"]["mean"][0], layers[la]["grad_cov"]["mean"][0]
                        if outer:
                            ratios.append(abs(cov) / abs(outer))
                    runs.append(
                        {
                            "model": model,
                            "inputs": inputs,
                            "act": act,
                            "loss": loss,
                            "drift": statistics.mean(layers[la]["weight_drift_std"]["mean"][-1] for la in fed),
                            "neg": [
                                v["neg_preact_share"]["mean"][-1] for v in layers.values() if "neg_preact_share" in v
                            ],
                            "ratios": ratios,
                        }
                    )
    return {"runs": runs}


def summarise_claim1(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    rows = []
    for model in s["models"]:
        for inputs in s["inputs"]:
            per = {
                sd: [r for r in by_seed[sd]["runs"] if r["model"] == model and r["inputs"] == inputs] for sd in seeds
            }
            d = [r["drift"] for sd in seeds for r in per[sd]]
            n_neg = sum(v < 0 for v in d)
            by = ", ".join(f"{sum(r['drift'] < 0 for r in per[sd])}/{len(per[sd])}" for sd in seeds)
            setting = f"{model}, {inputs} inputs, {len(s['acts'])} acts x {len(s['losses'])} losses, {where(s)}"
            rows.append(
                row(
                    "1",
                    setting,
                    "negative drift",
                    f"{n_neg}/{len(d)} runs negative (per seed {by}; median {statistics.median(d):+.3f} std0)",
                    "yes" if n_neg == len(d) else "partly" if n_neg > len(d) / 2 else "no",
                    seeds,
                )
            )
            neg = [v for sd in seeds for r in per[sd] for v in r["neg"]]
            inside = sum(0.6 <= v <= 0.8 for v in neg)
            rows.append(
                row(
                    "1",
                    f"{model}, {inputs}: share of h < 0 at the end",
                    "60-80%",
                    f"{100 * min(neg):.0f}-{100 * max(neg):.0f}% ({inside}/{len(neg)} sites in 60-80%)",
                    "yes" if inside == len(neg) else "partly" if inside else "no",
                    seeds,
                )
            )
        rs = [v for sd in seeds for r in by_seed[sd]["runs"] if r["model"] == model for v in r["ratios"]]
        med = statistics.median(rs)
        medians = ", ".join(
            f"{statistics.median([v for r in by_seed[sd]['runs'] if r['model'] == model for v in r['ratios']]):.2g}"
            for sd in seeds
        )
        rows.append(
            row(
                "2",
                f"{model}: /Cov(g,a)/ / /E[g]E[a]/ at step 0, layers fed by an activation",
                "orders of magnitude smaller",
                f"median {med:.2g} (per seed {medians}), {sum(v < 0.1 for v in rs)}/{len(rs)} below 0.1",
                "yes" if med < 0.01 else "partly" if med < 1 else "no",
                seeds,
            )
        )
    return rows


# -- claim 3 -----------------------------------------------------------------------------------------------------


def measure_claim3(s: dict[str, Any], seed: int) -> dict[str, Any]:
    """relu2 under each normalisation: probe accuracy after the last step."""
    acc = {}
    for norm in s["norms"]:
        model = s["models"][0] + ("" if norm == "none" else f"+norm={norm}")
        acc[norm] = drift(s, seed, model=model, activation=s["activation"]).summary.accuracy.mean[-1]
    return {"accuracy": acc}


def summarise_claim3(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    acc = {n: [by_seed[sd]["accuracy"][n] for sd in seeds] for n in s["norms"]}
    held = [
        min(by_seed[sd]["accuracy"]["layer"], by_seed[sd]["accuracy"]["rms"])
        > max(by_seed[sd]["accuracy"]["batch"], by_seed[sd]["accuracy"]["none"])
        for sd in seeds
    ]
    ours = ", ".join(f"{n} {pct(v)}" for n, v in acc.items())
    return [
        row(
            "3",
            f"{s['models'][0]}, relu2, {where(s)}, validation accuracy",
            "LN/RMS work; BN, none degrade",
            ours,
            verdict(held),
            seeds,
        )
    ]


# -- claim 8 -----------------------------------------------------------------------------------------------------


def measure_claim8(s: dict[str, Any], seed: int) -> dict[str, Any]:
    """GPT-nano on the fortunes text under each activation: validation loss (nats per character) at the end."""
    loss = {}
    for act in s["acts"]:
        r = drift(s, seed, model=s["model"], activation=act, clip=s["clip"])
        loss[act] = r.summary.loss.mean[-1]
    return {"loss": loss}


def summarise_claim8(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    loss = {a: [by_seed[sd]["loss"][a] for sd in seeds] for a in s["acts"]}
    held = [by_seed[sd]["loss"]["relu2-clip"] < by_seed[sd]["loss"]["gelu"] for sd in seeds]
    ours = ", ".join(f"{a} {spread(v, '{:.3f}')}" for a, v in loss.items())
    return [
        row(
            "8",
            f"{s['model']}, {where(s)}, validation loss (nats/char)",
            "relu2-clip < gelu (3.236 vs 3.251 vs relu2)",
            ours,
            verdict(held),
            seeds,
        )
    ]


Measure = Callable[[dict[str, Any], int], dict[str, Any]]
Summarise = Callable[[dict[str, Any], dict[int, dict[str, Any]]], list[Row]]
MEASURE: dict[str, Measure] = {
    "1mlp": measure_claim1,
    "1resnet": measure_claim1,
    "1vit": measure_claim1,
    "3": measure_claim3,
    "8": measure_claim8,
}
SUMMARISE: dict[str, Summarise] = {
    "1mlp": summarise_claim1,
    "1resnet": summarise_claim1,
    "1vit": summarise_claim1,
    "3": summarise_claim3,
    "8": summarise_claim8,
}


if __name__ == "__main__":  # claims 1, 2, 3 and 8 alone, with every option of drift_claims.py
    import drift_claims

    drift_claims.main(only="1,3,8")
