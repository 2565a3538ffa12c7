"""Human-readable results of the studies on stdout: sweep-k's stability table and train-weak's masked vs dense runs,
each from the command's typed result."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.table import Table

from ticketcli.report.console import method_name, pct, stdout

if TYPE_CHECKING:  # the results' types only: reading them imports no torch
    from ticketcli.sweep.result import GroupSummary, OracleSummary, SweepResult
    from ticketcli.weak.result import WeakResult, WeakRun


NO_SPREAD = "—"  # the std of fewer than two runs (one seed): there is no spread, and 0.00 would claim one


def sweep_table(result: SweepResult) -> None:
    """The stability table: one row per quantity of Section 6.3."""
    sm, st = result.summary, result.settings
    lo, hi = sm.oracle_constrained.band or (0.0, 1.0)  # the constrained oracle always has its band
    where = "" if st is None else f": requested sparsity {pct(st.sparsity)}, seeds {list(st.seeds)}, "
    where += "" if st is None else f"{st.model} on {st.dataset}, {st.epochs} epochs"
    t = Table(title=f"sweep-k{where}")
    t.add_column("method / selection")
    t.add_column("test accuracy", justify="right")
    t.add_column("std (points)", justify="right")
    t.add_column("achieved sparsity", justify="right")
    ep = sm.edge_popup
    t.add_row(
        f"edge-popup sweep ({ep.configs} runs)",
        f"{pct(ep.test.min)} – {pct(ep.test.max)}",
        NO_SPREAD if ep.test.std is None else f"{100 * ep.test.std:.2f}",
        f"{pct(ep.achieved_sparsity.min)} – {pct(ep.achieved_sparsity.max)}",
    )
    rows: list[tuple[str, GroupSummary | OracleSummary]] = [
        (f"oracle, val-selected in {100 * lo:g}–{100 * hi:g}%", sm.oracle_constrained),
        ("oracle, val-selected, unconstrained", sm.oracle_unconstrained),
        ("fixed edge-popup", sm.fixed_edge_popup),
        *((name, g) for name, g in sm.methods.items()),
    ]
    for label, g in rows:
        t.add_row(
            label,
            pct(g.test.mean),
            NO_SPREAD if g.test.std is None else f"{100 * g.test.std:.2f}",
            "-" if g.achieved_sparsity.mean is None else pct(g.achieved_sparsity.mean),
        )
    out = stdout()
    out.print(t)
    missing = sm.oracle_constrained.seeds_without_candidate
    if missing:
        out.print(f"no edge-popup run fell in the band for seed(s) {', '.join(missing)}")
    runs = len(result.records)
    out_dir = None if st is None else st.out_dir
    out.print(f"{runs} runs ({len(result.resumed)} resumed from {out_dir})" if out_dir else f"{runs} runs")
    if result.plot is not None:
        out.print(f"plot -> {result.plot}")


def weak_table(r: WeakResult) -> None:
    """`ticket train-weak`: masked vs dense training, a column each."""
    runs = [("masked", r.masked)] + ([("dense", r.dense)] if r.dense is not None else [])
    t = Table(
        title=f"{r.ticket}: {method_name(r.method)} ticket on {r.model}, seed {r.seed}, "
        f"trained {r.spec.epochs} epochs (lr {r.spec.optim.lr:g}, batch {r.spec.batch_size})"
    )
    t.add_column("quantity")
    for k, _ in runs:
        t.add_column(k, justify="right")
    rows: list[tuple[str, Callable[[WeakRun], str]]] = [
        ("initial test accuracy", lambda x: pct(x.initial.test.accuracy)),
        ("final test accuracy", lambda x: pct(x.final.test.accuracy)),
        ("gain", lambda x: f"{100 * x.gain:+.2f} pts"),
        ("initial / final validation", lambda x: f"{pct(x.initial.val.accuracy)} / {pct(x.final.val.accuracy)}"),
        ("best validation (epoch)", lambda x: f"{pct(x.best_val_accuracy)} ({x.best_val_epoch})"),
        ("final train loss", lambda x: f"{x.curve[-1].loss:.4f}"),
        ("wall time", lambda x: f"{x.wall_time_s:.1f} s"),
    ]
    for name, cell in rows:
        t.add_row(name, *(cell(run) for _, run in runs))
    out = stdout()
    out.print(t)
    sp = r.sparsity
    out.print(
        f"sparsity {pct(sp.achieved)} ({sp.kept} / {sp.total} kept), unchanged: "
        f"{r.weights_check.masked_nonzero_after} masked weights nonzero after training, on {r.device}."
    )
    if r.out is not None:
        out.print(f"trained weights -> {r.out.path} ({r.out.file_bytes} bytes)")
    if r.plot:
        out.print(f"curves -> {r.plot}")
