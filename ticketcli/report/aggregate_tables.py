"""`--aggregate`'s table and CSV: the tickets of a folder over their seeds, one row per method, model and requested
sparsity (or matched folder), each value as `mean ± std` (the sample standard deviation, in percentage points);
and `evaluate DIR`'s table and `--csv` rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.box import SIMPLE_HEAD
from rich.table import Table

from ticketcli.report.console import method_name, pct, results, stdout
from ticketcli.report.values import common_folder, csv_cell, csv_number, csv_text

if TYPE_CHECKING:  # for the annotations only: inspect's table must not import torch
    from ticketcli.runs.aggregate import MeanStd, PairGroup, SeedGroup
    from ticketcli.runs.evaluate_folder import EvaluateFolderResult


def mean_std(m: MeanStd) -> str:
    """`91.20% ± 0.35` (the std in percentage points), `91.20%` for one value, `-` for none."""
    if m.mean is None:
        return "-"
    return pct(m.mean) + ("" if m.std is None else f" ± {100 * m.std:.2f}")


def bits_mean_std(m: MeanStd) -> str:
    """Bits per character over seeds: `2.3456 ± 0.0123`, `2.3456` for one value, `-` for none."""
    if m.mean is None:
        return "-"
    return f"{m.mean:.4f}" + ("" if m.std is None else f" ± {m.std:.4f}")


def asked(g: SeedGroup) -> str:
    return "matched" if g.matched_in is not None else pct(g.requested_sparsity)


def aggregate_table(groups: Sequence[SeedGroup], what: str) -> None:
    """One row per group: method, model, requested sparsity, seeds, and mean ± std of the achieved sparsity and
    the accuracies (`what`: stored or re-measured); with a language model's groups, of the test bits per character
    too."""
    # no vertical rules: at 80 columns the seven columns need the room, and a row stays one group
    t = Table(
        title=f"over seeds: mean ± std (percentage points) of the {what} values",
        box=SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    lm = any(g.bits_per_char is not None for g in groups)
    for name in ("method", "model", "asked", "seeds", "achieved", "test", "val", *(("bits/char",) if lm else ())):
        t.add_column(name, justify="left" if name in ("method", "model", "asked", "seeds") else "right")
    for g in groups:
        seeds = " ".join(map(str, g.seeds)) or "-"
        bits = ("-" if g.bits_per_char is None else bits_mean_std(g.bits_per_char[0]),) if lm else ()
        t.add_row(
            g.method,
            g.model,
            asked(g),
            seeds,
            mean_std(g.achieved_sparsity),
            mean_std(g.test_accuracy),
            mean_std(g.val_accuracy),
            *bits,
        )
    out = stdout()
    out.print(t)
    for folder in dict.fromkeys(g.matched_in for g in groups if g.matched_in is not None):
        out.print(f"matched: each seed run at the achieved sparsity of the same seed's ticket in {folder}")


def pairs_table(groups: Sequence[PairGroup]) -> None:
    """compare --aggregate: for each two methods, the Jaccard of their same-seed tickets' masks, mean ± std."""
    out = stdout()
    if not groups:
        out.print("no two tickets share a seed and a model: no same-seed overlap to aggregate")
        return
    t = Table(title="same-seed mask overlap over seeds: Jaccard mean ± std", box=SIMPLE_HEAD, collapse_padding=True)
    t.pad_edge = t.show_edge = False
    for name in ("method A", "method B", "model", "seeds", "Jaccard"):
        t.add_column(name, justify="right" if name == "Jaccard" else "left")
    for g in groups:
        m = g.jaccard
        jaccard = "-" if m.mean is None else f"{m.mean:.4f}" + ("" if m.std is None else f" ± {m.std:.4f}")
        t.add_row(g.method_a, g.method_b, g.model, " ".join(map(str, g.seeds)), jaccard)
    out.print(t)


CSV_COLUMNS = (
    "method",
    "model",
    "requested_sparsity",
    "matched_in",
    "count",
    "seeds",
    "achieved_sparsity_mean",
    "achieved_sparsity_std",
    "test_accuracy_mean",
    "test_accuracy_std",
    "val_accuracy_mean",
    "val_accuracy_std",
)
CSV_LM_COLUMNS = (
    "test_bits_per_char_mean",
    "test_bits_per_char_std",
    "val_bits_per_char_mean",
    "val_bits_per_char_std",
)


def aggregate_csv(groups: Sequence[SeedGroup]) -> None:
    """A header line, then one line per group; fractions at full precision, the seeds separated by spaces."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = CSV_COLUMNS + CSV_LM_COLUMNS if any(g.bits_per_char is not None for g in groups) else CSV_COLUMNS
    writer.writerow(columns)
    for g in groups:
        values: dict[str, object] = {
            "method": g.method,
            "model": g.model,
            "requested_sparsity": g.requested_sparsity,
            "matched_in": g.matched_in,
            "count": len(g.seeds),
            "seeds": " ".join(map(str, g.seeds)),
        }
        for name, m in (("achieved_sparsity", g.achieved_sparsity), ("test_accuracy", g.test_accuracy)):
            values |= {f"{name}_mean": m.mean, f"{name}_std": m.std}
        values |= {"val_accuracy_mean": g.val_accuracy.mean, "val_accuracy_std": g.val_accuracy.std}
        for split, m in zip(("test", "val"), g.bits_per_char or ()):  # a language model's group
            values |= {f"{split}_bits_per_char_mean": m.mean, f"{split}_bits_per_char_std": m.std}
        writer.writerow([_cell(c, values.get(c)) for c in columns])
    results().write(buffer.getvalue())


def _cell(column: str, value: object) -> str:
    """The method from its vocabulary, paths, the model, errors and seeds as neutralised text, the rest numbers."""
    if column == "method":
        return csv_cell(column, value)
    if column in ("model", "matched_in", "seeds", "ticket", "error"):
        return "" if value is None else csv_text(value)
    if column in ("reproduced", "gate"):  # their own vocabularies: yes/no, passed/FAILED
        return value if value in ("yes", "no", "passed", "FAILED") else ""
    return csv_number(value)


EVALUATE_CSV = (
    "ticket",
    "method",
    "model",
    "seed",
    "requested_sparsity",
    "achieved_sparsity",
    "test_accuracy",
    "stored_test_accuracy",
    "val_accuracy",
    "reproduced",
    "gate",
    "error",
)
EVALUATE_LM_CSV = ("test_bits_per_char", "val_bits_per_char")  # re-measured; only when a language model's is listed


def evaluate_folder_csv(r: EvaluateFolderResult) -> None:
    """`ticket evaluate DIR --csv`: one line per ticket (re-measured beside the stored test accuracy, whether it
    reproduced, the gate: passed, FAILED or empty), or with --aggregate one line per group (aggregate_csv)."""
    if r.aggregate is not None:
        aggregate_csv(r.aggregate)
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = (*EVALUATE_CSV, *EVALUATE_LM_CSV) if r.language_model else EVALUATE_CSV
    writer.writerow(columns)
    for row in r.tickets:
        e = row.result
        values: dict[str, object] = {"ticket": row.ticket, "error": row.error}
        if e is not None:
            gate = None if e.gate is None else "passed" if e.gate.passed else "FAILED"
            values |= {
                "method": e.method.name,
                "model": e.model,
                "seed": e.seed,
                "requested_sparsity": e.requested_sparsity,
                "achieved_sparsity": e.achieved_sparsity,
                "test_accuracy": e.test.accuracy,
                "stored_test_accuracy": e.stored.test_accuracy,
                "val_accuracy": e.val.accuracy,
                "reproduced": "yes" if e.reproduced else "no",
                "gate": gate,
                "test_bits_per_char": e.test.bits_per_char,
                "val_bits_per_char": e.val.bits_per_char,
            }
        writer.writerow([_cell(c, values.get(c)) for c in columns])
    results().write(buffer.getvalue())


def evaluate_folder_table(r: EvaluateFolderResult) -> None:
    """`ticket evaluate DIR`: one row per ticket (re-measured beside stored accuracy, the gate), then a summary."""
    if r.aggregate is not None:
        aggregate_table(r.aggregate, "re-measured")
    else:
        _evaluate_rows(r)
    out = stdout()
    for row in r.tickets:  # why each failed, below the table: whole lines, never folded into a narrow column
        if row.error is not None:
            out.print(f"error: {row.error}")
        elif row.failures:
            out.print(f"FAILED {row.ticket}: {'; '.join(row.failures)}")
    s = r.summary()
    line = (
        f"{s['evaluated']} of {s['count']} tickets evaluated, {s['reproduced']} reproduce their stored accuracy exactly"
    )
    if r.gated:
        line += f"; gate passed by {s['passed']}, failed by {s['failed']}"
    if s["errors"]:
        line += f"; {s['errors']} could not be evaluated"
    out.print(line + ".")


def _evaluate_rows(r: EvaluateFolderResult) -> None:
    folder, names = common_folder([row.ticket for row in r.tickets])
    t = Table(title=f"{len(r.tickets)} tickets" + (f" in {folder}" if folder else ""))
    lm = r.language_model  # language models' tickets among them: their re-measured test bits per character too
    columns = ("ticket", "method", "test acc", "stored", "val acc", *(("bits/char",) if lm else ()), "reproduced")
    for name in (*columns, "gate"):
        left = name in ("ticket", "method", "gate")
        t.add_column(name, justify="left" if left else "right", overflow="fold", min_width=max(len(name), 7))
    for row, name in zip(r.tickets, names):
        e = row.result
        if e is None:
            t.add_row(name, *["-"] * (len(columns) - 1), "ERROR")
            continue
        gate = "-" if e.gate is None else "passed" if e.gate.passed else "FAILED"
        reproduced = "yes" if e.reproduced else "no"
        bits = e.test.bits_per_char
        t.add_row(
            name,
            method_name(e.method),
            pct(e.test.accuracy),
            pct(e.stored.test_accuracy),
            pct(e.val.accuracy),
            *((("-" if bits is None else f"{bits:.4f}"),) if lm else ()),
            reproduced,
            gate,
        )
    stdout().print(t)
