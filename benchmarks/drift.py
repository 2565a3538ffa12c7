"""The drift report: the paper's MLP (784-256-256-256-10) on FashionMNIST and on Gaussian random inputs, ReLU and
GELU, seeds 0,1,2: first- and last-step weight mean per layer, negative pre-activation share, activation sparsity.

    PYTHONPATH=. python benchmarks/drift.py [--steps 500] [--log-every 50] [--out drift-bench.json]

Not run by the test suite. Prints one markdown table per (inputs, activation) and writes the full results as JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from ticketcli.drift.options import build_drift_spec
from ticketcli.drift.run import run_drift
from ticketcli.settings.resolve import data_location


def fmt(stats: dict, i: int, pct: bool = False) -> str:
    m, s = stats["mean"][i], stats["std"][i]
    if m is None:
        return "-"
    return f"{100 * m:.1f}% ± {100 * s:.1f}" if pct else f"{m:+.5f} ± {s:.5f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--inputs", default="data,gaussian")
    ap.add_argument("--activations", default="relu,gelu")
    ap.add_argument("--loss", default="cross-entropy")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="drift-bench.json")
    a = ap.parse_args()
    torch.set_num_threads(2)
    results = []
    for inputs in a.inputs.split(","):
        for act in a.activations.split(","):
            spec = build_drift_spec(
                dict(
                    inputs=inputs,
                    activation=act,
                    steps=a.steps,
                    log_every=a.log_every,
                    seeds=a.seeds,
                    loss=a.loss,
                    device=a.device,
                ),
                data_location(None, False),
            )
            t0 = time.perf_counter()
            r = run_drift(spec)
            wall = time.perf_counter() - t0
            results.append(r.to_document())
            sm = r.summary.to_dict() | {"layers": {n: la.to_dict() for n, la in r.summary.layers.items()}}
            print(
                f"\n### {r['model']}, {act}, {r['loss']}, inputs {inputs}, Adam lr 1e-3, batch 512, "
                f"{a.steps} steps, seeds {a.seeds} (mean ± std; zero rule {r['zero_rule']}; {wall:.0f} s)\n"
            )
            print(
                f"loss {fmt(sm['loss'], 0)} -> {fmt(sm['loss'], -1)}, "
                f"probe accuracy {fmt(sm['accuracy'], 0, True)} -> {fmt(sm['accuracy'], -1, True)}\n"
            )
            print(
                "| layer | W mean step 0 | W mean last | drift/σ₀ last | seeds W mean fell | h<0 step 0 | h<0 last "
                "| sparsity step 0 | sparsity last |"
            )
            print("|---|---|---|---|---|---|---|---|---|")
            for layer, st in sm["layers"].items():
                hid = "neg_preact_share" in st
                print(
                    f"| {layer} | {fmt(st['weight_mean'], 0)} | {fmt(st['weight_mean'], -1)} | "
                    f"{fmt(st['weight_drift_std'], -1)} | {round(st['negative_drift_share'] * len(r['seeds']))}"
                    f"/{len(r['seeds'])} | "
                    + (
                        f"{fmt(st['neg_preact_share'], 0, True)} | {fmt(st['neg_preact_share'], -1, True)} | "
                        f"{fmt(st['sparsity'], 0, True)} | {fmt(st['sparsity'], -1, True)} |"
                        if hid
                        else "- | - | - | - |"
                    )
                )
    with open(a.out, "w") as f:
        json.dump(results, f)
    print(f"\nfull series in {a.out}")


if __name__ == "__main__":
    main()
