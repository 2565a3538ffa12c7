"""conv6 and vgg strong tickets on FashionMNIST: augmented vs edge-popup at requested 90%, seed 0.

    python benchmarks/conv_tickets.py --epochs 3                      # conv6 and vgg:64-64-M-128-128-M-256-256-M
    python benchmarks/conv_tickets.py --models conv6 --epochs 100     # the full Appendix B budget

Each run is `ticket extract --model M --method X --sparsity 0.9 --seed 0 --epochs E` with the other defaults
(Adam 1e-2, batch 512, 5000/5000 split, full test set). Time per epoch is score training only (wall time of the
method / epochs); evaluation of the 5000 validation + 10000 test examples is reported separately.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from ticketcli.runs.extract import extract_ticket
from ticketcli.settings.resolve import build_extract_spec, merge_settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="conv6,vgg:64-64-M-128-128-M-256-256-M")
    ap.add_argument("--methods", default="augmented,edge-popup")
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--init", default="scaled-kaiming-uniform")
    ap.add_argument("--init-k", type=float, default=0.5)
    ap.add_argument("--json", type=Path, help="also write every run's summary here")
    args = ap.parse_args()

    records = []
    with tempfile.TemporaryDirectory() as d:
        for model in args.models.split(","):
            for method in args.methods.split(","):
                spec = build_extract_spec(
                    merge_settings(
                        {
                            "model": model,
                            "method": method,
                            "sparsity": args.sparsity,
                            "seed": args.seed,
                            "epochs": args.epochs,
                            "device": args.device,
                            "init": args.init,
                            "init_k": args.init_k,
                        },
                        None,
                    )
                )
                t0 = time.perf_counter()
                r = extract_ticket(
                    spec,
                    out=Path(d) / f"{len(records)}.safetensors",
                    progress=lambda p: print(
                        f"    epoch {p['epoch']}: loss {p['loss']:.3f} train acc {p['accuracy']:.3f}", flush=True
                    ),
                )
                r = {**r.to_document(), "total_s": time.perf_counter() - t0}  # the --json document
                r["epoch_s"] = r["wall_time_s"] / args.epochs
                records.append(r)
                print(
                    f"  {r['model']} {method}: test {100 * r['metrics']['test']['accuracy']:.2f}% at "
                    f"{100 * r['sparsity']['achieved']:.2f}% ({r['epoch_s']:.1f} s/epoch)",
                    flush=True,
                )

    print(
        f"\nFashionMNIST, seed {args.seed}, requested sparsity {args.sparsity:.0%}, {args.epochs} epochs, "
        f"init {args.init} k={args.init_k}, device {records[0]['device']}"
    )
    print("| model | method | test acc % | val acc % | achieved sparsity % | s/epoch | eval+setup s |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        m = r["metrics"]
        print(
            f"| {r['model']} | {r['method']['name']} | {100 * m['test']['accuracy']:.2f} "
            f"| {100 * m['val']['accuracy']:.2f} "
            f"| {100 * r['sparsity']['achieved']:.2f} | {r['epoch_s']:.1f} | {r['total_s'] - r['wall_time_s']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(records, indent=2))


if __name__ == "__main__":
    main()
