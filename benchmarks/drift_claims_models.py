"""Claims 1, 2, 3 and 8 of the weight-drift notes (arXiv 2605.17659), each in a small, honest CPU-sized
version with `ticket drift` (claims 4-7 are another script's; benchmarks/drift_claims.py combines them):

1. negative weight drift for relu, gelu, silu, relu2, gelu2 with MSE and cross-entropy, on data and on random
   inputs, across an MLP, ResNet-20 and a ViT; and the share of negative pre-activations (source: 60-80%);
2. the covariance term of the mean weight gradient against the mean-field term E[g] E[a] (source: orders of
   magnitude smaller);
3. relu2 with LayerNorm / RMSNorm against BatchNorm and no normalisation (source: LN/RMS work, BN/none degrade);
8. relu2-clip (c = 50) against GELU in GPT-nano pretraining on the fortunes text, validation loss (source: clipped
   relu2 improves on the alternative; 3.236 vs 3.251 against unclipped relu2).

Settings: digits (8x8, sklearn) for the image models, the Debian fortunes files for GPT-nano; Adam lr 1e-3; seeds
0 and 1 (quick: seed 0); steps and sizes in SETTINGS below. "Weights fed by an activation" are the layers whose
input is an activation's output: an MLP's layers after the first, every ResNet convolution after the stem, a
transformer block's mlp.fc2. Drift is the last logged weight mean minus the first, in units of the initial std.

    PYTHONPATH=. python benchmarks/drift_claims_models.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from ticketcli.drift.result import DriftResult
from ticketcli.drift.run import run_drift
from ticketcli.settings.drift_options import build_drift_spec
from ticketcli.settings.resolve import data_location

ACTS = ("relu", "gelu", "silu", "relu2", "gelu2")
LOSSES = ("mse", "cross-entropy")
MODELS = ("mlp:64-32-32-32-10", "resnet20", "vit:p4-d32-l2-h2")
SETTINGS = {  # quick / full
    "claim1": {"steps": (30, 100), "batch_size": 64, "probe_size": 128},
    "claim3": {"steps": (150, 400), "batch_size": 64, "probe_size": 256},
    "claim8": {"steps": (150, 500), "batch_size": 32, "probe_size": 128},
}


def drift(quick: bool, **settings) -> DriftResult:
    """One `ticket drift` run (CPU, no progress) with these settings."""
    s = {"dataset": "digits", "device": "cpu", "seeds": "0" if quick else "0,1", **settings}
    spec = build_drift_spec(s, data_location(None, False))
    return run_drift(spec)


def fed_by_activation(model: str, layer: str) -> bool:
    if model.startswith("mlp"):
        return layer != "layers.0"
    if model.startswith("resnet"):
        return layer != "conv1"  # the stem sees the image; fc sees the pooled last ReLU
    return layer.endswith("mlp.fc2")


def claim1_and_2(quick: bool, models: tuple[str, ...] = MODELS) -> list[dict]:
    """Claims 1 and 2 from the same runs: every model x activation x loss x inputs (quick: fewer)."""
    steps = SETTINGS["claim1"]["steps"][0 if quick else 1]
    drifts: dict[tuple, list[float]] = {}
    negs: dict[tuple, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    for model in models:
        acts = ACTS if model.startswith("mlp") or not quick else ("relu", "gelu")
        losses = LOSSES if model.startswith("mlp") or not quick else ("cross-entropy",)
        for inputs in ("data", "gaussian"):
            for act in acts:
                for loss in losses:
                    r = drift(quick, model=model, activation=act, loss=loss, inputs=inputs, steps=steps,
                              log_every=steps, batch_size=64, probe_size=128)  # fmt: skip
                    layers = {n: {k: v.to_dict() for k, v in la.series.items()} for n, la in r.summary.layers.items()}
                    fed = [la for la in layers if fed_by_activation(model, la)]
                    drifts.setdefault((model, inputs), []).append(
                        statistics.mean(layers[la]["weight_drift_std"]["mean"][-1] for la in fed)
                    )
                    negs.setdefault((model, inputs), []).extend(
                        s["neg_preact_share"]["mean"][-1] for s in layers.values() if "neg_preact_share" in s
                    )
                    for la in fed:
                        outer, cov = layers[la]["grad_outer"]["mean"][0], layers[la]["grad_cov"]["mean"][0]
                        if outer:
                            ratios.setdefault(model, []).append(abs(cov) / abs(outer))
    rows = []
    for (model, inputs), d in drifts.items():
        n_neg = sum(v < 0 for v in d)
        rows.append(row("1", f"{model}, {inputs} inputs, {steps} steps, acts x losses", "negative drift",
                        f"{n_neg}/{len(d)} runs negative (median {statistics.median(d):+.3f} std0)",
                        "yes" if n_neg == len(d) else "partly" if n_neg > len(d) / 2 else "no"))  # fmt: skip
        neg = negs[(model, inputs)]
        lo, hi = min(neg), max(neg)
        inside = sum(0.6 <= v <= 0.8 for v in neg)
        rows.append(row("1", f"{model}, {inputs}: share of h < 0 at the end", "60-80%",
                        f"{100 * lo:.0f}-{100 * hi:.0f}% ({inside}/{len(neg)} sites in 60-80%)",
                        "yes" if inside == len(neg) else "partly" if inside else "no"))  # fmt: skip
    for model, rs in ratios.items():
        med = statistics.median(rs)
        small = sum(v < 0.1 for v in rs)
        rows.append(row("2", f"{model}: |Cov(g,a)| / |E[g]E[a]| at step 0, layers fed by an activation",
                        "orders of magnitude smaller", f"median {med:.2g}, {small}/{len(rs)} below 0.1",
                        "yes" if med < 0.01 else "partly" if med < 1 else "no"))  # fmt: skip
    return rows


def claim3(quick: bool) -> list[dict]:
    steps = SETTINGS["claim3"]["steps"][0 if quick else 1]
    acc = {}
    for norm in ("layer", "rms", "batch", None):
        model = "mlp:64-64-64-64-10" + (f"+norm={norm}" if norm else "")
        r = drift(quick, model=model, activation="relu2", steps=steps, log_every=steps, batch_size=64, probe_size=256)
        acc[norm or "none"] = r["summary"]["accuracy"]["mean"][-1]
    good, bad = min(acc["layer"], acc["rms"]), max(acc["batch"], acc["none"])
    ours = ", ".join(f"{k} {100 * v:.1f}%" for k, v in acc.items())
    return [row("3", f"mlp:64-64-64-64-10, relu2, digits, {steps} steps, validation accuracy",
                "LN/RMS work; BN, none degrade", ours, "yes" if good > bad else "no")]  # fmt: skip


def claim8(quick: bool) -> list[dict]:
    steps = SETTINGS["claim8"]["steps"][0 if quick else 1]
    model = "gpt-nano:l1-d32-h2-c32" if quick else "gpt-nano:l2-d64-h4-c64"
    loss = {}
    for act in ("relu2-clip", "gelu", "relu2"):
        r = drift(quick, model=model, activation=act, steps=steps, log_every=steps, batch_size=32, probe_size=128,
                  dataset=None)  # fmt: skip
        loss[act] = r["summary"]["loss"]["mean"][-1]
    ours = ", ".join(f"{k} {v:.3f}" for k, v in loss.items())
    return [row("8", f"{model}, fortunes, {steps} steps, validation loss (nats/char)",
                "relu2-clip < gelu (3.236 vs 3.251 vs relu2)", ours,
                "yes" if loss["relu2-clip"] < loss["gelu"] else "no")]  # fmt: skip


def row(claim: str, setting: str, source: str, ours: str, held: str) -> dict:
    return {"claim": claim, "setting": setting, "source": source, "ours": ours, "held": held}


def claims(quick: bool) -> list[dict]:
    """Rows {claim, setting, source, ours, held} for claims 1, 2, 3 and 8."""
    torch.set_num_threads(2)
    return [*claim1_and_2(quick), *claim3(quick), *claim8(quick)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seed 0, fewer steps and settings")
    ap.add_argument("--only", default="1,3,8", help="which of the claims to run (1 also gives 2)")
    ap.add_argument("--models", default=",".join(MODELS), help="claims 1 and 2: these models")
    a = ap.parse_args()
    torch.set_num_threads(2)
    print("| claim | setting | source | ours | held |")
    print("|---|---|---|---|---|")
    parts = {
        "1": lambda: claim1_and_2(a.quick, tuple(a.models.split(","))),
        "3": lambda: claim3(a.quick),
        "8": lambda: claim8(a.quick),
    }
    for key in a.only.split(","):
        for r in parts[key]():  # each claim's rows as soon as they are measured
            print(f"| {r['claim']} | {r['setting']} | {r['source']} | {r['ours']} | {r['held']} |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
