"""GraSP's two readings x shared/separate data on FashionMNIST with the paper's protocol (docs/results.md).

    python benchmarks/grasp_readings.py --seeds 0,1,2 --threads 1 --json grasp.json

Each run is `ticket extract --method grasp --grasp-direction D --grasp-data X --sparsity S --seed N` with the
defaults (5 minibatches of 512 per collection, temperature 200). Prints test accuracy and achieved sparsity per
run, then mean ± std over the seeds per cell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from ticketcli.runs.extract import extract_ticket
from ticketcli.settings.resolve import build_extract_spec, merge_settings


def mean_std(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs):.1f}" if len(xs) > 1 else f"{xs[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sparsities", default="0.9,0.95")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--directions", default="paper,original")
    ap.add_argument("--data", default="separate,shared")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--json", type=Path, help="also write every run's summary here")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads (1 to share the machine)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cells: dict[tuple[str, str, float], list[float]] = {}
    records = []
    with tempfile.TemporaryDirectory() as d:
        for seed in map(int, args.seeds.split(",")):
            for direction in args.directions.split(","):
                for data in args.data.split(","):
                    for s in map(float, args.sparsities.split(",")):
                        settings = {"method": "grasp", "sparsity": s, "seed": seed, "dataset": args.dataset}
                        settings |= {"grasp_direction": direction, "grasp_data": data}
                        r = extract_ticket(
                            build_extract_spec(merge_settings(settings, None)),
                            out=Path(d) / "t.safetensors",
                            overwrite=True,
                        )
                        acc = 100 * r.metrics.test.accuracy
                        cells.setdefault((direction, data, s), []).append(acc)
                        records.append({**settings, "test": acc, "achieved": r.sparsity.achieved})
                        print(
                            f"  {direction:8s} {data:8s} s={s} seed={seed}: test {acc:.2f}% at "
                            f"{100 * r.sparsity.achieved:.2f}% ({r.metrics.wall_time_s:.1f} s)",
                            flush=True,
                        )
                        if args.json:
                            args.json.write_text(json.dumps(records, indent=1))
    sparsities = list(map(float, args.sparsities.split(",")))
    print("\n| direction | data | " + " | ".join(f"{100 * s:g}% sparsity" for s in sparsities) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sparsities) + " |")
    for direction in args.directions.split(","):
        for data in args.data.split(","):
            row = " | ".join(mean_std(cells[(direction, data, s)]) + "%" for s in sparsities)
            print(f"| {direction} | {data} | {row} |")


if __name__ == "__main__":
    main()
