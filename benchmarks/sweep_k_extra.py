"""Add the runs of some groups (e.g. iterated, which landed after a sweep was run) to a finished sweep-k result.

Runs only those groups' tasks with the current code into the sweep's --out-dir, first re-running one of the
sweep's own tasks (--check) to show that the current code still reproduces the stored record bit for bit, then
writes the combined result (records + summary) and its plot.

    PYTHONPATH=. python benchmarks/sweep_k_extra.py DIR --groups iterated --epochs 20 --check seed0-edge-popup-k0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from ticketcli.report import plots as report_plots
from ticketcli.report import study_tables as report_study_tables
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.sweep import plan as sweep_plan
from ticketcli.sweep import records as sweep_records
from ticketcli.sweep import result as sweep_result
from ticketcli.sweep import run as sweep_run
from ticketcli.sweep import summary as sweep_summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path, help="benchmarks/sweep_k.sh's OUT_DIR (stability.json, runs/)")
    ap.add_argument("--groups", default="iterated")
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--check", default=None, help="a task id to re-run and compare with its stored record")
    a = ap.parse_args()
    old = json.loads((a.dir / "stability.json").read_text())  # sweep-k's --json document (docs/json.md)
    # back as the sweep's records, beside the new ones
    old["records"] = [sweep_result.SweepRecord.from_document(r) for r in old["records"]]
    st = old["settings"]
    base = build_extract_spec(
        merge_settings(
            dict(
                method="edge-popup",
                dataset=st["dataset"],
                sparsity=st["sparsity"],
                epochs=a.epochs,
                device="cpu",
                seed=st["seeds"][0],
            ),
            None,
        )
    )
    plan = sweep_plan.build_plan(
        base,
        seeds=st["seeds"],
        densities=tuple(st["densities"]),
        layerwise=st["layerwise"],
        double_scoring=sweep_plan.double_scoring_methods(),
    )
    groups = set(a.groups.split(","))
    todo = [t for t in plan if t.group in groups]
    check = {}
    if a.check:
        stored = next(r for r in old["records"] if r.id == a.check)
        again = sweep_run.run_sweep([t for t in plan if t.id == a.check], threads=st["threads"]).records[0]
        keep = lambda r: {k: v for k, v in r.flat().items() if k not in sweep_records.VOLATILE}  # noqa: E731
        check = {"id": a.check, "identical": keep(stored) == keep(again)}
        print(json.dumps(check))
    new = sweep_run.run_sweep(todo, workers=a.workers, threads=st["threads"], out_dir=a.dir / "runs")
    records = [r for r in old["records"] if r.group not in groups] + new.records
    flat = [r.flat() for r in records]
    result = {
        "settings": {**st, "double_scoring": sweep_plan.double_scoring_methods(), "added_groups": sorted(groups)},
        "records": flat,
        "resumed": new.resumed,
        "reproduction_check": check,
        "summary": sweep_summary.summarize(flat, band=tuple(st["band"])),
    }
    (a.dir / "stability_combined.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    typed = sweep_result.SweepResult.of(records, new.resumed, band=tuple(st["band"]))
    names = [f.name for f in dataclasses.fields(sweep_result.SweepSettings)]
    typed = dataclasses.replace(
        typed,
        settings=sweep_result.SweepSettings(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in result["settings"].items() if k in names}
        ),
    )
    (a.dir / "stability_combined.png").write_bytes(report_plots.sweep_plot(typed))
    report_study_tables.sweep_table(typed)


if __name__ == "__main__":
    main()
