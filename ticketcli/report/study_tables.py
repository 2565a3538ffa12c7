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
    """The stability table: one row per quantity of Section 6.3 (a language model's sweep: test bits per character
    in place of accuracy, lower is better, and the oracles select by validation bits per character)."""
    sm, st = result.summary, result.settings
    lm = sm.edge_popup.test_bits is not None  # a language model's runs
    lo, hi = sm.oracle_constrained.band or (0.0, 1.0)  # the constrained oracle always has its band
    where = "" if st is None else f": requested sparsity {pct(st.sparsity)}, seeds {list(st.seeds)}, "
    where += "" if st is None else f"{st.model} on {st.dataset}, {st.epochs} epochs"
    t = Table(title=f"sweep-k{where}")
    t.add_column("method / selection")
    t.add_column("test bits/char" if lm else "test accuracy", justify="right")
    t.add_column("std" if lm else "std (points)", justify="right")
    t.add_column("achieved sparsity", justify="right")
    ep = sm.edge_popup
    shown = _bits if lm else _accuracy
    t.add_row(
        f"edge-popup sweep ({ep.configs} runs)",
        *shown(ep, spread=True),
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
            *shown(g, spread=False),
            "-" if g.achieved_sparsity.mean is None else pct(g.achieved_sparsity.mean),
        )
    out = stdout()
    out.print(t)
    if lm:
        out.print("the oracles select the lowest validation bits per character")
    missing = sm.oracle_constrained.seeds_without_candidate
    if missing:
        out.print(f"no edge-popup run fell in the band for seed(s) {', '.join(missing)}")
    runs = len(result.records)
    out_dir = None if st is None else st.out_dir
    out.print(f"{runs} runs ({len(result.resumed)} resumed from {out_dir})" if out_dir else f"{runs} runs")
    if result.plot is not None:
        out.print(f"plot -> {result.plot}")


def _accuracy(g: GroupSummary | OracleSummary, *, spread: bool) -> tuple[str, str]:
    """A group's test accuracy (its range over runs with `spread`, else its mean) and std in points."""
    s = g.test
    value = f"{pct(s.min)} – {pct(s.max)}" if spread else pct(s.mean)
    return value, NO_SPREAD if s.std is None else f"{100 * s.std:.2f}"


def _bits(g: GroupSummary | OracleSummary, *, spread: bool) -> tuple[str, str]:
    """A language model's group: its test bits per character (range or mean) and their std."""
    s = g.test_bits
    if s is None or s.mean is None or s.min is None or s.max is None:
        return "-", NO_SPREAD
    value = f"{s.min:.4f} – {s.max:.4f}" if spread else f"{s.mean:.4f}"
    return value, NO_SPREAD if s.std is None else f"{s.std:.4f}"


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
