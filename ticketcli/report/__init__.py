"""Reporting, split by concern: console (stdout/stderr, --json, --quiet, errors, warnings, progress bars), tables
(each command's human-readable result; sweep-k's, train-weak's and drift's in study_tables) and plots (PNG figures).
Callers use the names below as `report.<name>`."""

from ticketcli.report.console import (
    drift_progress,
    epoch_progress,
    error,
    flush_results,
    internal_error,
    literal,
    phases_of,
    print_json,
    runs_progress,
    sweep_progress,
    tolerate_encodings,
    warn,
    working,
    write_stderr,
)
from ticketcli.report.plots import drift_plot, sweep_plot, weak_plot
from ticketcli.report.study_tables import drift_tables, sweep_table, weak_table
from ticketcli.report.tables import (
    evaluate_table,
    export_table,
    extract_table,
    inspect_table,
)

__all__ = [
    "drift_plot",
    "drift_progress",
    "drift_tables",
    "epoch_progress",
    "error",
    "flush_results",
    "evaluate_table",
    "export_table",
    "extract_table",
    "inspect_table",
    "internal_error",
    "literal",
    "phases_of",
    "print_json",
    "runs_progress",
    "sweep_plot",
    "sweep_progress",
    "sweep_table",
    "tolerate_encodings",
    "warn",
    "weak_plot",
    "weak_table",
    "working",
    "write_stderr",
]
