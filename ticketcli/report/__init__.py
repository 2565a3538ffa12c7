"""Reporting, split by concern: console (stdout and stderr, --json, errors, warnings, literal text), progress (each
command's progress display, --quiet) over plain (plain progress lines off a terminal), tables (each command's
human-readable result) and plots (PNG figures). Callers use the names below as `report.<name>`; each is imported
here from the module that defines it."""

from ticketcli.report.console import (
    error,
    flush_results,
    internal_error,
    literal,
    print_json,
    tolerate_encodings,
    warn,
    write_stderr,
)
from ticketcli.report.plots import drift_plot, sweep_plot, weak_plot
from ticketcli.report.progress import (
    drift_progress,
    epoch_progress,
    phases_of,
    runs_progress,
    sweep_progress,
    working,
)
from ticketcli.report.tables import (
    drift_tables,
    evaluate_table,
    export_table,
    extract_table,
    inspect_table,
    sweep_table,
    weak_table,
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
