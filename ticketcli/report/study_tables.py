"""Human-readable results of the studies on stdout: sweep-k's stability table, train-weak's masked vs dense runs and
drift's per-step statistics, each from the command's typed result."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.table import Table

from ticketcli.report.console import method_name, pct, stdout

if TYPE_CHECKING:  # the results' types only: reading them imports no torch
    from ticketcli.drift.result import DriftResult, MeanStd
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


DRIFT_COLUMNS = (  # (metric, row label); hidden-layer statistics are blank for the output layer
    ("weight_mean", "W mean"),
    ("weight_drift_std", "drift / σ₀"),
    ("neg_weight_share", "W < 0"),
    ("neg_preact_share", "h < 0"),
    ("sparsity", "a = 0 (sparsity)"),
    ("dead_units", "dead units"),
    ("grad_pos_preact", "E[g | h > 0]"),
    ("grad_mean", "mean dL/dW"),
    ("grad_outer", "  outer(E g, E a)"),
    ("grad_cov", "  + Cov(g, a)"),
    ("spike_ratio", "max|a| / RMS(a)"),
)

SHARES = {"neg_weight_share", "neg_preact_share", "sparsity", "accuracy"}


def compact_indices(n: int, rows: int = 5) -> list[int]:
    """First, every k-th and last of n logged steps, at most about `rows` of them."""
    k = max(1, -(-(n - 1) // max(1, rows - 1)))  # ceil
    return sorted(set(range(0, n, k)) | {n - 1})


def _num(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    if metric in SHARES:
        return f"{100 * v:.1f}%"
    if metric == "dead_units":
        return f"{v:.3g}"
    if metric == "loss":
        return f"{v:.4f}"
    return f"{v:.3g}" if metric in ("spike_ratio", "weight_drift_std") else f"{v:+.3g}"


def _cell(metric: str, s: MeanStd, i: int, seeds: int) -> str:
    mean = s.mean[i]
    if seeds == 1 or mean is None:
        return _num(metric, mean)
    std = s.std[i]
    if std is None:
        return _num(metric, mean)
    spread = f"{100 * std:.1f}%" if metric in SHARES else f"{std:.2g}"
    return f"{_num(metric, mean)} ± {spread}"


def drift_tables(r: DriftResult) -> None:
    """One table per logged step (first, every k-th, last): a row per statistic, a column per layer, mean ± std
    across seeds; then the drift from the first to the last step."""
    out = stdout()
    sm, n_seeds, st = r.summary, len(r.seeds), r.settings
    what = f"ticket {r.ticket} (kept weights only)" if r.masked else f"seeds {','.join(map(str, r.seeds))}"
    clip = f" (c = {r.spec.clip:g})" if r.spec.activation == "relu2-clip" else ""
    corpus = r.corpus  # a character-level model's text: the probe is validation characters
    source = (
        f"({st['dataset']})"
        if corpus is None
        else f"(text, {corpus['characters']} characters, {corpus['vocab']} distinct)"
    )
    out.print(
        f"drift: {st['model']}, {r.spec.activation}{clip}, {r.spec.loss}, inputs {r.spec.inputs} "
        f"{source}, {r.spec.optim.name} lr {r.spec.optim.lr:g}, batch {r.spec.batch_size}, "
        f"{r.spec.steps} steps, {what}. Statistics on a fixed probe batch of {r.probe_n}; an activation "
        f"counts as zero when {st['zero_rule']}; g = per-example dℓ/dh; a positive mean gradient pushes the "
        f"weight mean down."
    )
    layers = list(sm.layers)
    for i in compact_indices(len(sm.steps)):
        t = Table(
            title=f"step {sm.steps[i]}: loss {_cell('loss', sm.loss, i, n_seeds)}, "
            f"accuracy {_cell('accuracy', sm.accuracy, i, n_seeds)}"
            + (f", perplexity {_cell('loss', sm.perplexity, i, n_seeds)}" if sm.perplexity is not None else "")
        )
        t.add_column("statistic")
        for layer in layers:
            t.add_column(layer, justify="right")
        for metric, header in DRIFT_COLUMNS:
            t.add_row(
                header,
                *(
                    _cell(metric, sm.layers[la].series[metric], i, n_seeds) if metric in sm.layers[la].series else ""
                    for la in layers
                ),
            )
        out.print(t)
    t = Table(title="weight drift from step 0 to the last step")
    for header in ("layer", "W mean first", "W mean last", "drift/σ₀", "seeds with negative drift"):
        t.add_column(header, justify="left" if header == "layer" else "right")
    for layer, stats in sm.layers.items():
        wm = stats.series["weight_mean"]
        t.add_row(
            layer,
            _cell("weight_mean", wm, 0, n_seeds),
            _cell("weight_mean", wm, -1, n_seeds),
            _cell("weight_drift_std", stats.series["weight_drift_std"], -1, n_seeds),
            f"{round(stats.negative_drift_share * n_seeds)} of {n_seeds}",
        )
    out.print(t)
    if r.plot is not None:
        out.print(f"plot written to {r.plot}")
