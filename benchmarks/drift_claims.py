"""The eight claims of the weight-drift study (arXiv 2605.17659), each checked with `ticket drift` at one of three
scales, printed as one table: claim, setting, the source's number, ours (mean ± std and range over seeds), whether
it held, and the seeds.

    python benchmarks/drift_claims.py                       # --scale default: CPU-sized (tens of minutes, 2 cores)
    python benchmarks/drift_claims.py --quick               # = --scale quick: a smoke run, not the measurement
    python benchmarks/drift_claims.py --scale source --only 7,3 --results-dir drift-claims
    python benchmarks/drift_claims.py --scale source --device cuda --only 1,8   # ResNet-18, ViT, GPT-nano
    python benchmarks/drift_claims.py --estimate-only       # the time per unit, then stop

Before running, it prints each unit's estimated time: short timing runs of the unit's own setting (one entry of
each list it loops over, 20 and 120 steps after a warm-up), their CPU time extrapolated to its steps, lists and
seeds and divided by the share of a core the timing runs got (on a shared machine the share moves, and so does
the estimate). Each
finished (unit, seed) is written atomically as JSON under --results-dir and skipped on the next start when its
settings match, so an interrupted run resumes at the first unfinished (unit, seed). Units and scales:
drift_claims_scales.py; claims 1, 2, 3 and 8: drift_claims_models.py; 4-7: drift_claims_control.py. A claim that
does not hold is reported as such: the point is to measure, not to agree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drift_claims_control  # noqa: E402
import drift_claims_models  # noqa: E402
import drift_claims_scales as scales  # noqa: E402
import torch  # noqa: E402

COLUMNS = ("claim", "setting", "source", "ours", "held", "seeds")
MEASURE = {**drift_claims_models.MEASURE, **drift_claims_control.MEASURE}
SUMMARISE = {**drift_claims_models.SUMMARISE, **drift_claims_control.SUMMARISE}
FORMAT = 1  # the results files' layout; a file of another layout is measured again


def cell(value: object) -> str:
    """A table cell: held as yes/no whichever module wrote it, "|" kept out of the Markdown."""
    text = {True: "yes", False: "no"}.get(value, value) if isinstance(value, bool) else value
    return str(text).replace("|", "/")


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the rows, in the order given."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def result_path(results: Path, unit: str, seed: int) -> Path:
    return results / f"{unit}-seed{seed}.json"


def load_result(path: Path, s: dict[str, Any]) -> dict[str, Any] | None:
    """A finished run's numbers when the file holds this layout and exactly these settings; else None."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("settings") == s
    return doc if ok and isinstance(doc.get("result"), dict) else None


def write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write beside the destination, flush to disk, then rename: a reader sees the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def estimate(unit: str, s: dict[str, Any]) -> tuple[float, float]:
    """Seconds for one seed of the unit, and the share of a core the timing runs got: two timing runs (20 and 120
    steps, one entry of each list) after a warm-up, a line through their CPU times (wall times on a shared machine
    are too noisy to fit a line through), extrapolated to the unit's steps and runs, divided by that share."""
    cpu, wall = [], []
    for steps in (10, 20, 120):  # the first warms up (imports, data loading caches) and is not counted
        small, factor = scales.shrink(s, steps)
        c0, t0 = time.process_time(), time.perf_counter()
        MEASURE[unit](small, small["seeds"][0])
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    per_step = max(0.0, (cpu[2] - cpu[1]) / 100)
    fixed = max(0.0, cpu[1] - 20 * per_step)
    share = min(1.0, (cpu[1] + cpu[2]) / (wall[1] + wall[2]))
    return factor * (fixed + per_step * s["steps"]) / share, share


def clock(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def main(only: str | None = None) -> None:
    """The command line; `only` is --only's default (drift_claims_models.py and drift_claims_control.py run their
    own claims through here)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--scale", choices=scales.SCALES, default="default", help="settings of every unit (default: default)"
    )
    ap.add_argument("--quick", action="store_true", help="the same as --scale quick")
    ap.add_argument(
        "--only",
        default=only,
        help="claims or units to run, comma-separated (1 also gives 2, 4 also gives 5): " + ",".join(scales.UNITS),
    )
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where every run trains (default: cpu)")
    ap.add_argument(
        "--results-dir",
        type=Path,
        default=Path("drift-claims-results"),
        help="one JSON file per finished (unit, seed); those with matching settings are not rerun",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--estimate-only", action="store_true", help="print the estimated time per unit and stop")
    ap.add_argument("--no-estimate", action="store_true", help="skip the timing runs")
    ap.add_argument("--markdown", type=Path, help="also write the table to this Markdown file")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args()
    if args.quick and args.scale not in ("default", "quick"):
        ap.error("--quick is --scale quick; give one of them")
    scale = "quick" if args.quick else args.scale
    torch.set_num_threads(args.threads)
    chosen = scales.units(args.only)
    plan = {u: scales.settings(u, scale, args.device) for u in chosen}
    todo = {
        u: [sd for sd in s["seeds"] if load_result(result_path(args.results_dir, u, sd), s) is None]
        for u, s in plan.items()
    }

    if not args.no_estimate:
        total = 0.0
        print(
            f"# estimated time ({scale} scale, {args.device}, {args.threads} thread(s)); timing runs first", flush=True
        )
        for u, s in plan.items():
            per_seed, share = estimate(u, s)
            left = per_seed * len(todo[u])
            total += left
            print(
                f"  {u:8s} {clock(per_seed)} per seed x {len(todo[u])} seeds to run "
                f"(of {len(s['seeds'])}) = {clock(left)} "
                f"(at {100 * share:.0f}% of a core; {clock(per_seed * share)} of CPU per seed)",
                flush=True,
            )
        print(f"  total    {clock(total)}", flush=True)
    if args.estimate_only:
        return

    rows = []
    for u, s in plan.items():
        by_seed = {}
        for sd in s["seeds"]:
            path = result_path(args.results_dir, u, sd)
            doc = load_result(path, s)
            if doc is None:
                t0 = time.perf_counter()
                result = MEASURE[u](s, sd)
                wall = time.perf_counter() - t0
                doc = {"format": FORMAT, "unit": u, "seed": sd, "settings": s, "result": result, "wall_s": wall}
                write_atomic(path, doc)
                print(f"# {u} seed {sd}: {wall:.0f} s -> {path}", flush=True)
            else:
                print(f"# {u} seed {sd}: kept from {path} ({doc['wall_s']:.0f} s then)", flush=True)
            by_seed[sd] = doc["result"]
        rows += SUMMARISE[u](s, by_seed)
    text = table(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
