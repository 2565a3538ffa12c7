"""The eight claims of the weight-drift study (arXiv 2605.17659), each checked by a small, honest CPU-sized run of
`ticket drift`, printed as one table: claim, setting, the source's number, ours, and whether it held.

    python benchmarks/drift_claims.py            # the stated settings (tens of minutes on 2 cores)
    python benchmarks/drift_claims.py --quick    # fewer steps and seeds, to check that everything runs
    python benchmarks/drift_claims.py --markdown docs/claims.md   # also write the table as Markdown

Claims 1, 2, 3 and 8 (which models drift, the covariance term, normalisation, GPT-nano) live in
drift_claims_models.py; claims 4-7 (activation-sparsity control, the cliff, centering, ReLUfication) in
drift_claims_control.py. Each row says its own settings and seeds. A claim that does not hold here is reported as
such: the point is to measure, not to agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import drift_claims_control  # noqa: E402
import drift_claims_models  # noqa: E402

COLUMNS = ("claim", "setting", "source", "ours", "held")


def cell(value: object) -> str:
    """A table cell: held as yes/no whichever module wrote it, "|" kept out of the Markdown."""
    text = {True: "yes", False: "no"}.get(value, value) if isinstance(value, bool) else value
    return str(text).replace("|", "/")


def table(rows: list[dict]) -> str:
    """A Markdown table of the rows, in claim order."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in sorted(rows, key=lambda r: str(r["claim"])):
        lines.append("| " + " | ".join(cell(r.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and seeds (a smoke run, not the measurement)")
    ap.add_argument("--markdown", type=Path, help="also write the table to this Markdown file")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this file")
    args = ap.parse_args()
    rows = drift_claims_models.claims(args.quick) + drift_claims_control.claims(args.quick)
    text = table(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
