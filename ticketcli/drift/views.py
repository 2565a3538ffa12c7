"""drift's tables and plots (stdout tables for people; the --json documents carry the same numbers): the per-step
statistics of a run and their figure, the tables of the control features (activation-sparsity control,
ReLUfication, the trade-off sweep) and the trade-off's plot, and `show`/`figure`: a drift result's tables and plot,
chosen by the result's class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ticketcli.drift.result import DriftControlResult, DriftRelufyResult, DriftResult, MeanStd, TradeoffResult
from ticketcli.report.console import stdout
from ticketcli.report.plots import png_bytes, pyplot, run_title
from ticketcli.report.tables import titled

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
    return png_bytes(tradeoff_figure(r) if isinstance(r, TradeoffResult) else drift_figure(r), dpi=100)


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
    t = titled(
        f"activation-sparsity control: {how}; target {_pct(c['target'])} ({seeds}, probe batch)",
        "site",
        *("achieved sparsity", "achieved - target", "h < 0", "activation input < 0", "mean centering q"),
    )
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
    t = titled(
        f"ReLUfication {u['source']} -> {u['target']}: {u['epochs']} epoch(s) = {u['fine_tune_steps']} "
        f"fine-tuning steps; weights kept at the swap: {'yes' if u['weights_kept'] else 'NO'}"
        + (f" (mean of {n} runs)" if n > 1 else ""),
        ("stage", "activation"),
        *("probe accuracy", "probe loss", "post-activation sparsity"),
    )
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
        title = f"trade-off {model}: {r.mode}, {r.spec.steps} steps, seeds {','.join(map(str, r.seeds))}"
        t = titled(title, (), "target", "achieved sparsity", "h < 0", "probe accuracy", "probe loss")
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
    mean, std = s.mean[i], s.std[i]
    if seeds == 1 or mean is None or std is None:
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
        t = titled(
            f"step {sm.steps[i]}: loss {_cell('loss', sm.loss, i, n_seeds)}, "
            f"accuracy {_cell('accuracy', sm.accuracy, i, n_seeds)}"
            + (f", perplexity {_cell('loss', sm.perplexity, i, n_seeds)}" if sm.perplexity is not None else ""),
            "statistic",
            *layers,
        )
        for metric, header in DRIFT_COLUMNS:
            t.add_row(
                header,
                *(
                    _cell(metric, sm.layers[la].series[metric], i, n_seeds) if metric in sm.layers[la].series else ""
                    for la in layers
                ),
            )
        out.print(t)
    t = titled("weight drift from step 0 to the last step", "layer", "W mean first", "W mean last", "drift/σ₀")
    t.add_column("seeds with negative drift", justify="right")
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


def relu_panels_coincide(r: DriftResult) -> bool:
    """Whether activation sparsity equals the negative pre-activation share in every layer at every step: so for
    ReLU under the exact-zero rule (relu(h) == 0 exactly when h <= 0), unless a pre-activation is exactly 0 (a unit
    whose weights the mask removed), which counts as sparse but not as negative."""
    if r.spec.activation != "relu" or r.settings["zero_threshold"] != 0.0:
        return False
    for stats in r.summary.layers.values():
        if "sparsity" not in stats.series:
            continue
        pairs = zip(stats.series["sparsity"].mean, stats.series["neg_preact_share"].mean, strict=True)
        if any(
            (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 1e-12) for a, b in pairs
        ):
            return False
    return True


def drift_data(settings: Mapping[str, Any]) -> str:
    """What a drift run trained on (its settings: inputs, dataset): the dataset, the text corpus, or random inputs."""
    if settings.get("inputs", "data") != "data":
        return f"{settings['inputs']} inputs"
    return "text corpus" if settings.get("dataset") == "text" else str(settings.get("dataset", ""))


def drift_method(settings: Mapping[str, Any], masked: bool = False) -> str:
    """How a drift run trained (its settings): optimiser, learning rate, loss and activation (`masked`: the ticket's
    kept weights only)."""
    opt = settings.get("optimizer") or {}
    how = f"{opt.get('name', '?')} lr {opt.get('lr', '?'):g}" if opt else None
    what = "ticket's kept weights" if masked else "weight training"
    return run_title(what, how, settings.get("loss"), settings.get("activation"))


def drift_figure(r: DriftResult) -> Figure:
    """Weight mean per layer; negative pre-activation share and activation sparsity per hidden layer, in one panel
    for ReLU, where the two are the same numbers (relu_panels_coincide)."""
    plt = pyplot()

    sm, zero_rule = r.summary, r.settings["zero_rule"]
    steps = list(sm.steps)
    panels: tuple[tuple[str, str], ...] = (
        ("weight_mean", "weight mean"),
        ("neg_preact_share", "share of negative pre-activations"),
        ("sparsity", f"activation sparsity ({zero_rule})"),
    )
    if relu_panels_coincide(r):
        panels = (
            panels[0],
            ("sparsity", f"activation sparsity ({zero_rule})\n= share of negative pre-activations (ReLU)"),
        )
    fig: Figure  # pyplot is loaded at run time (pyplot()), so its results are typed Any
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2))
    for ax, (metric, title) in zip(axes, panels):
        for layer, stats in sm.layers.items():
            if metric not in stats.series:
                continue
            mean = [float("nan") if v is None else v for v in stats.series[metric].mean]
            std = [0.0 if v is None else v for v in stats.series[metric].std]
            ax.plot(steps, mean, label=layer)
            if len(r.seeds) > 1:
                ax.fill_between(
                    steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2
                )
        if metric == "weight_mean":
            ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    seeds = f"{len(r.seeds)} seeds (mean ± std)" if len(r.seeds) > 1 else f"seed {r.seeds[0]}"
    title = run_title(drift_data(r.settings), r.settings["model"], drift_method(r.settings, r.masked), seeds)
    fig.suptitle(f"drift: {title}")
    fig.tight_layout()
    return fig
