"""Tables and plots of drift's control features: activation-sparsity control, ReLUfication and the trade-off sweep
(stdout tables for people; the --json documents carry the same numbers), and `show`/`figure`: a drift result's
tables and plot, chosen by the result's class."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.table import Table

from ticketcli.drift.result import DriftControlResult, DriftRelufyResult, DriftResult, TradeoffResult
from ticketcli.report.console import stdout
from ticketcli.report.plots import drift_data, drift_method, drift_plot, png_bytes, pyplot, run_title
from ticketcli.report.study_tables import drift_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def show(r: DriftResult | TradeoffResult) -> None:
    """A drift result's tables on stdout: drift's per-step tables, then the control's or ReLUfication's; the
    trade-off's own."""
    if isinstance(r, TradeoffResult):
        tradeoff_table(r)
        return
    drift_tables(r)
    if isinstance(r, DriftControlResult):
        control_table(r)
    elif isinstance(r, DriftRelufyResult):
        relufy_table(r)


def figure(r: DriftResult | TradeoffResult) -> bytes:
    """A drift result's plot as PNG bytes: the trade-off curves, or drift's statistics per step."""
    return tradeoff_plot(r) if isinstance(r, TradeoffResult) else drift_plot(r)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _points(x: float | None) -> str:
    """A difference of two shares, in percentage points."""
    return "-" if x is None else f"{100 * x:+.1f} pts"


def control_table(r: DriftResult) -> None:
    """Achieved activation sparsity against the target, and the negative shares, per site and overall."""
    c = r.act_control
    assert c is not None, "a run under activation control"
    how = "top-k per example" if c["mode"] == "topk" else f"percentile centering, {c['statistic']}"
    if c.get("freeze_after"):
        how += f", statistics frozen after {c['freeze_after']} steps"
    seeds = f"mean of {len(c['runs'])} runs" if len(c["runs"]) > 1 else "one run"
    t = Table(title=f"activation-sparsity control: {how}; target {_pct(c['target'])} ({seeds}, probe batch)")
    for h in ("site", "achieved sparsity", "achieved - target", "h < 0", "activation input < 0", "mean centering q"):
        t.add_column(h, justify="left" if h == "site" else "right")
    rows = [*c["sites"].items(), ("overall", {**c["overall"], "centering_mean": None})]
    for site, s in rows:
        q = s.get("centering_mean")
        t.add_row(
            site,
            _pct(s["sparsity"]),
            _points(s["error"]),
            _pct(s["neg_preact_share"]),
            _pct(s["neg_act_input_share"]),
            "-" if q is None else f"{q:.3g}",
        )
    stdout().print(t)


def relufy_table(r: DriftResult) -> None:
    """Accuracy and post-activation sparsity before the swap, right after it and after fine-tuning."""
    u = r.relufy
    assert u is not None, "a ReLUfication run"
    n = len(r.runs)
    t = Table(
        title=f"ReLUfication {u['source']} -> {u['target']}: {u['epochs']} epoch(s) = {u['fine_tune_steps']} "
        f"fine-tuning steps; weights kept at the swap: {'yes' if u['weights_kept'] else 'NO'}"
        + (f" (mean of {n} runs)" if n > 1 else "")
    )
    for h in ("stage", "activation", "probe accuracy", "probe loss", "post-activation sparsity"):
        t.add_column(h, justify="left" if h in ("stage", "activation") else "right")
    stages = (
        ("trained", "before", u["source"]),
        ("swapped", "swapped", u["target"]),
        ("fine-tuned", "after", u["target"]),
    )
    for label, key, act in stages:
        s = u[key]
        t.add_row(label, act, _pct(s["accuracy"]), f"{s['loss']:.4f}", _pct(s["sparsity"]))
    stdout().print(t)
    stdout().print(
        f"accuracy change {_points(u['accuracy_change'])}; a smooth activation counts as zero when "
        f"{r.settings['zero_rule']}, a ReLU variant when a == 0"
    )


def tradeoff_table(r: TradeoffResult) -> None:
    """Per model: accuracy against the achieved activation sparsity for every target, and the cliff."""
    out = stdout()
    for model, m in r.models.items():
        t = Table(title=f"trade-off {model}: {r.mode}, {r.spec.steps} steps, seeds {','.join(map(str, r.seeds))}")
        for h in ("target", "achieved sparsity", "h < 0", "probe accuracy", "probe loss"):
            t.add_column(h, justify="right")
        for p in m.curve:
            t.add_row(
                _pct(p["target"]),
                _pct(p["achieved_sparsity"]),
                _pct(p["neg_preact_share"]),
                _pct(p["accuracy"]),
                f"{p['loss']:.4f}",
            )
        out.print(t)
        c = m.cliff
        out.print(
            "no cliff: accuracy never drops between neighbouring targets"
            if c is None
            else f"cliff: {_pct(c['from_accuracy'])} -> {_pct(c['to_accuracy'])} "
            f"({_points(-c['drop'])}) between targets {_pct(c['from_target'])} and {_pct(c['to_target'])}"
        )
    if r.chance is not None:
        out.print(f"chance accuracy {_pct(r.chance)}")
    if r.plot is not None:
        out.print(f"plot written to {r.plot}")


def tradeoff_plot(r: TradeoffResult) -> bytes:
    """tradeoff_figure as PNG bytes."""
    return png_bytes(tradeoff_figure(r), dpi=100)


def tradeoff_figure(r: TradeoffResult) -> Figure:
    """Accuracy against achieved activation sparsity, one line per model, the cliff marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model, m in r.models.items():
        xs = [p["achieved_sparsity"] for p in m.curve]
        (line,) = ax.plot(xs, [p["accuracy"] for p in m.curve], marker="o", label=model)
        c = m.cliff
        if c is not None:
            ax.plot(
                [c["from_sparsity"], c["to_sparsity"]],
                [c["from_accuracy"], c["to_accuracy"]],
                color=line.get_color(),
                lw=7,
                alpha=0.3,
            )
    if r.chance is not None:
        ax.axhline(r.chance, color="grey", lw=0.8, ls="--", label="chance")
    ax.set_xlabel("achieved activation sparsity (probe batch)")
    ax.set_ylabel("probe accuracy")
    how = run_title(drift_data(r.settings), ", ".join(r.models), drift_method(r.settings), f"control {r.mode}")
    ax.set_title(f"drift trade-off: {how}\n(thick segment: the cliff)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return cast("Figure", fig)  # pyplot is imported lazily, untyped
