"""What a structured mask costs a strong ticket: the paper protocol (FashionMNIST, the paper MLP, 100 epochs) with
unstructured masks against 2:4 at 50% sparsity, and against 1:4 and 4x4 blocks at 75%, for edge-popup and
augmented, over seeds; a markdown table of mean ± std test accuracy and achieved sparsity (docs/results.md).

    python benchmarks/structured.py                                  # the full run: 3 seeds, 100 epochs
    nice -n 10 python benchmarks/structured.py --threads 1 --out structured.md --json structured.json
    python benchmarks/structured.py --dataset digits --epochs 2 --seeds 0   # a smoke run in seconds
    python benchmarks/structured.py --tables-from a.json b.json             # the table of runs split by seed

Each run is `ticket extract --method M --seed N` with the defaults and `--sparsity S` (unstructured, blocks) or
`--structure N:M` (which implies S = 1 - N/M). Seeds are the outer loop, so an interrupted run still has every
configuration for the first seeds; --json and --out are rewritten after every run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ticketcli.runs.extract import extract_ticket
from ticketcli.settings.resolve import build_extract_spec, merge_settings

# (label, requested sparsity, the settings that make it)
CONFIGS: tuple[tuple[str, float, dict[str, Any]], ...] = (
    ("unstructured", 0.5, {"sparsity": 0.5}),
    ("2:4", 0.5, {"structure": "2:4"}),
    ("unstructured", 0.75, {"sparsity": 0.75}),
    ("1:4", 0.75, {"structure": "1:4"}),
    ("4x4 blocks", 0.75, {"sparsity": 0.75, "block": "4x4"}),
)


def mean_std(xs: list[float]) -> str:
    m = statistics.mean(xs)
    return f"{m:.1f} ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else f"{m:.1f}"


def run_one(settings: dict[str, Any], out: Path) -> dict[str, Any]:
    """One `ticket extract` with these settings on top of the defaults: its --json document."""
    spec = build_extract_spec(merge_settings(settings, None))
    t0 = time.perf_counter()
    r = extract_ticket(spec, out=out).to_document()
    return {**r, "total_s": time.perf_counter() - t0}


def table(records: list[dict[str, Any]], methods: list[str]) -> str:
    """The markdown table: one row per method and configuration, in CONFIGS' order."""
    lines = [
        "| method | sparsity | mask | seeds | test accuracy % | achieved sparsity % |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for method in methods:
        for label, s, _ in CONFIGS:
            rs = [r for r in records if r["method"]["name"] == method and r["config"] == [label, s]]
            if not rs:
                continue
            acc = [100 * r["metrics"]["test"]["accuracy"] for r in rs]
            ach = [100 * r["sparsity"]["achieved"] for r in rs]
            lines.append(f"| {method} | {100 * s:.0f}% | {label} | {len(rs)} | {mean_std(acc)} | {mean_std(ach)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--methods", default="edge-popup,augmented")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--out", type=Path, help="write the markdown table here (rewritten after every run)")
    ap.add_argument("--json", type=Path, help="also write every run's summary here")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (1 to share the machine)")
    ap.add_argument("--tables-from", type=Path, nargs="+", help="only print the table of these --json files' runs")
    args = ap.parse_args()
    if args.tables_from:  # runs split over processes (one per seed), put together
        merged = [r for path in args.tables_from for r in json.loads(path.read_text())]
        print(table(merged, args.methods.split(",")), end="")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    methods = args.methods.split(",")
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for seed in map(int, args.seeds.split(",")):
            for method in methods:
                for label, s, settings in CONFIGS:
                    given = {"method": method, "seed": seed, "epochs": args.epochs, "dataset": args.dataset}
                    r = run_one(
                        {**given, **settings}, Path(d) / f"{method}-{seed}-{label.replace(' ', '-')}-{s}.safetensors"
                    )
                    records.append({**r, "config": [label, s]})
                    print(
                        f"  {method} {label} at {s:g}, seed {seed}: test {100 * r['metrics']['test']['accuracy']:.2f}%"
                        f" at {100 * r['sparsity']['achieved']:.2f}% ({r['total_s']:.1f} s)",
                        flush=True,
                    )
                    if args.json:
                        args.json.write_text(json.dumps(records, indent=2))
                    if args.out:
                        args.out.write_text(table(records, methods))
    print()
    print(table(records, methods), end="")


if __name__ == "__main__":
    main()
