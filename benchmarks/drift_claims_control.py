"""Claims 4-7 of arXiv 2605.17659 (activation-sparsity control), one seed at a time (benchmarks/drift_claims.py
runs them, resumes and prints the table; the settings of each scale are drift_claims_scales.py's):

4. plain MLPs collapse to chance beyond ~80% activation sparsity; residual MLPs keep accuracy (~32.7% at 90%);
5. a sparsity-accuracy trade-off with a sharp cliff above ~70% activation sparsity;
6. percentile centering reaches a target as precisely as top-k, with the same negative pre-activation share (unit
   "6"), and its statistics can be frozen after N steps, the accumulation stop (unit "6stop");
7. ReLUfication (GELU/SiLU -> ReLU, one epoch of fine-tuning) gives 55-74% post-activation sparsity, < 1% loss.

Claims 4 and 5 share one top-k trade-off sweep over the plain MLP and its `+res` twin. Accuracy is the probe
accuracy of the controlled network after the last step. MEASURE and SUMMARISE as in drift_claims_models.py.
"""

from __future__ import annotations

from typing import Any

from drift_claims_models import Measure, Row, Summarise, drift_spec, pct, row, verdict, where

from ticketcli.drift.relufy import run_relufy
from ticketcli.drift.run import run_drift
from ticketcli.drift.spec import ControlSpec, RelufySpec
from ticketcli.drift.tradeoff import find_cliff


def controlled(s: dict[str, Any], seed: int, model: str, control: ControlSpec) -> dict[str, float]:
    """One controlled run: achieved sparsity, negative shares and probe accuracy at the end."""
    r = run_drift(drift_spec(s, seed, model=model), control=control)
    assert r.act_control is not None
    overall = r.act_control["overall"]
    out = {
        "accuracy": r.summary.accuracy.mean[-1],
        "sparsity": overall["sparsity"],
        "neg_preact_share": overall["neg_preact_share"],
    }
    if "neg_act_input_share" in overall:  # percentile: the share of h - q below zero
        out["neg_act_input_share"] = overall["neg_act_input_share"]
    return out


# -- claims 4 and 5: one top-k trade-off sweep -------------------------------------------------------------------


def measure_sweep(s: dict[str, Any], seed: int) -> dict[str, Any]:
    curves = {m: {str(t): controlled(s, seed, m, ControlSpec("topk", t)) for t in s["targets"]} for m in s["models"]}
    return {"curves": curves, "chance": 0.1}  # ten classes, digits and FashionMNIST alike


def summarise_sweep(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    plain, res = s["models"]
    chance = by_seed[seeds[0]]["chance"]

    def at(model: str, t: float, key: str) -> list[float]:
        return [by_seed[sd]["curves"][model][str(t)][key] for sd in seeds]

    base = f"top-k 80% and 90%, {plain} vs +res, {where(s)}; chance {100 * chance:.0f}%"
    rows = [
        row(
            "4a plain MLP collapses beyond ~80%",
            base,
            "plain MLP near chance beyond ~80% activation sparsity",
            f"plain {pct(at(plain, 0.8, 'accuracy'))} at {pct(at(plain, 0.8, 'sparsity'))}, "
            f"{pct(at(plain, 0.9, 'accuracy'))} at {pct(at(plain, 0.9, 'sparsity'))}",
            verdict([a <= chance + 0.05 for a in at(plain, 0.9, "accuracy")]),
            seeds,
        ),
        row(
            "4b residual MLP keeps accuracy at 90%",
            base,
            "+res keeps ~32.7% at 90% (plain at chance)",
            f"+res {pct(at(res, 0.8, 'accuracy'))} at {pct(at(res, 0.8, 'sparsity'))}, "
            f"{pct(at(res, 0.9, 'accuracy'))} at {pct(at(res, 0.9, 'sparsity'))} "
            f"(plain {pct(at(plain, 0.9, 'accuracy'))})",
            verdict(
                [r >= 0.327 and r >= p + 0.05 for r, p in zip(at(res, 0.9, "accuracy"), at(plain, 0.9, "accuracy"))]
            ),
            seeds,
        ),
    ]
    for m in (plain, res):
        cliffs = []
        for sd in seeds:
            curve = [
                {"target": float(t), "accuracy": p["accuracy"], "achieved_sparsity": p["sparsity"]}
                for t, p in by_seed[sd]["curves"][m].items()
            ]
            cliffs.append(find_cliff(curve))
        where_drop = "; ".join(
            "no drop" if c is None else f"{100 * c['drop']:.1f} pts {c['from_target']:g}->{c['to_target']:g}"
            for c in cliffs
        )
        accs = ", ".join(f"{100 * t:.0f}%:{pct(at(m, t, 'accuracy'))}" for t in s["targets"])
        rows.append(
            row(
                f"5 cliff above ~70% ({'+res' if m == res else 'plain'})",
                f"top-k targets {','.join(f'{t:g}' for t in s['targets'])}, {m}, {where(s)}",
                "sharp accuracy cliff above ~70% activation sparsity (79 configs)",
                f"largest drop per seed: {where_drop} [{accs}]",
                verdict([c is not None and c["from_target"] >= 0.7 and c["drop"] >= 0.05 for c in cliffs]),
                seeds,
            )
        )
    return rows


# -- claim 6: percentile centering against top-k; the accumulation stop ------------------------------------------


def measure_centering(s: dict[str, Any], seed: int) -> dict[str, Any]:
    return {
        str(t): {mode: controlled(s, seed, s["plain"], ControlSpec(mode, t)) for mode in s["modes"]}
        for t in s["control_targets"]
    }


def summarise_centering(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    rows = []
    for t in s["control_targets"]:
        pc = [by_seed[sd][str(t)]["percentile"] for sd in seeds]
        tk = [by_seed[sd][str(t)]["topk"] for sd in seeds]
        setting = f"{s['plain']}, {where(s)}; percentile: EMA 0.5 of the batch quantile"
        rows.append(
            row(
                f"6a percentile as precise as top-k at {100 * t:.0f}%",
                setting,
                "same sparsity at equivalent targets",
                f"achieved: percentile {pct([p['sparsity'] for p in pc])} (acc {pct([p['accuracy'] for p in pc])})"
                f", top-k {pct([k['sparsity'] for k in tk])} (acc {pct([k['accuracy'] for k in tk])})",
                verdict([abs(p["sparsity"] - t) <= 0.03 and abs(k["sparsity"] - t) <= 0.03 for p, k in zip(pc, tk)]),
                seeds,
            )
        )
        rows.append(
            row(
                f"6b same negative fraction at {100 * t:.0f}%",
                setting,
                "same negative-value fraction at equivalent targets",
                f"h<0: percentile {pct([p['neg_preact_share'] for p in pc])} (centred h-q<0: "
                f"{pct([p.get('neg_act_input_share', float('nan')) for p in pc])}), "
                f"top-k {pct([k['neg_preact_share'] for k in tk])}",
                verdict([abs(p["neg_preact_share"] - k["neg_preact_share"]) <= 0.05 for p, k in zip(pc, tk)]),
                seeds,
            )
        )
    return rows


def measure_stop(s: dict[str, Any], seed: int) -> dict[str, Any]:
    """Percentile centering at the target with live statistics and with them frozen after freeze_after steps."""
    out = {}
    for variant in s["variants"]:
        freeze = s["freeze_after"] if variant == "frozen" else None
        out[variant] = controlled(s, seed, s["plain"], ControlSpec("percentile", s["target"], freeze_after=freeze))
    return out


def summarise_stop(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    live, frozen = [by_seed[sd]["live"] for sd in seeds], [by_seed[sd]["frozen"] for sd in seeds]
    t = s["target"]
    return [
        row(
            "6 accumulation stop",
            f"percentile {100 * t:.0f}%, statistics frozen after {s['freeze_after']} of {s['steps']} steps, "
            f"{s['plain']}, {where(s)}",
            "centering statistics can be frozen early (50k steps) at no cost",
            f"frozen: sparsity {pct([f['sparsity'] for f in frozen])}, acc {pct([f['accuracy'] for f in frozen])}; "
            f"live: sparsity {pct([v['sparsity'] for v in live])}, acc {pct([v['accuracy'] for v in live])}",
            verdict(
                [abs(f["sparsity"] - t) <= 0.03 and f["accuracy"] >= v["accuracy"] - 0.02 for f, v in zip(frozen, live)]
            ),
            seeds,
        )
    ]


# -- claim 7: ReLUfication ---------------------------------------------------------------------------------------


def measure_relufy(s: dict[str, Any], seed: int) -> dict[str, Any]:
    out = {}
    for source in s["sources"]:
        spec = drift_spec(s, seed, model=s["plain"], activation=source)
        r = run_relufy(spec, RelufySpec(source, s["relufy_to"], s["relufy_epochs"])).relufy
        out[source] = {
            "fine_tune_steps": r["fine_tune_steps"],
            **{f"{stage}_{k}": r[stage][k] for stage in ("before", "after") for k in ("accuracy", "sparsity")},
        }
    return out


def summarise_relufy(s: dict[str, Any], by_seed: dict[int, dict[str, Any]]) -> list[Row]:
    seeds = sorted(by_seed)
    rows = []
    for source in s["sources"]:
        r = [by_seed[sd][source] for sd in seeds]
        loss = [x["before_accuracy"] - x["after_accuracy"] for x in r]
        rows.append(
            row(
                f"7 ReLUfication {source} -> {s['relufy_to']}",
                f"{s['plain']}, {where(s)}, then 1 epoch ({r[0]['fine_tune_steps']} steps)",
                "55-74% post-activation sparsity, < 1% accuracy loss",
                f"sparsity {pct([x['before_sparsity'] for x in r])} -> {pct([x['after_sparsity'] for x in r])}; "
                f"accuracy {pct([x['before_accuracy'] for x in r])} -> {pct([x['after_accuracy'] for x in r])} "
                f"(loss {pct(loss).removesuffix('%')} pts)",
                verdict([x["after_sparsity"] >= 0.55 and d < 0.01 for x, d in zip(r, loss)]),
                seeds,
            )
        )
    return rows


MEASURE: dict[str, Measure] = {"4": measure_sweep, "6": measure_centering, "6stop": measure_stop, "7": measure_relufy}
SUMMARISE: dict[str, Summarise] = {
    "4": summarise_sweep,
    "6": summarise_centering,
    "6stop": summarise_stop,
    "7": summarise_relufy,
}


if __name__ == "__main__":  # claims 4-7 alone, with every option of drift_claims.py
    import drift_claims

    drift_claims.main(only="4,6,6stop,7")
