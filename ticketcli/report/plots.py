"""PNG figures (matplotlib, Agg backend) returned as bytes; the caller writes them with atomic.write_atomic."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ticketcli.report.console import pct

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (no display needed; the backend must be set before pyplot loads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Figure, *, dpi: int) -> bytes:
    """The figure as PNG bytes (written by the caller with atomic.write_atomic); the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()


def sweep_plot(result: dict) -> bytes:
    """sweep_figure as PNG bytes."""
    return png_bytes(sweep_figure(result), dpi=110)


def sweep_figure(result: dict) -> Figure:
    """Figure 2: (left) test accuracy per configuration/method, one point per seed; (right) accuracy vs achieved
    sparsity with the constrained oracle's band shaded. A legend names only markers that are drawn."""
    plt = pyplot()

    records, sm = result["records"], result["summary"]
    labels = list(dict.fromkeys(r["config"] for r in records if r["group"] == "edge-popup"))
    labels += list(
        dict.fromkeys(
            ("fixed" if r["fixed"] else r["group"]) for r in records if r["group"] != "edge-popup" or r["fixed"]
        )
    )
    pos = {lab: i for i, lab in enumerate(labels)}
    seeds = sm["seeds"]
    colors = plt.get_cmap("tab10")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    for i, s in enumerate(seeds):  # one labelled scatter per seed: its legend entry is its own points
        xs, ys = [], []
        for r in (r for r in records if r["seed"] == s):
            keys = [r["config"]] if r["group"] == "edge-popup" else []
            keys += ["fixed"] if r["fixed"] else ([] if r["group"] == "edge-popup" else [r["group"]])
            xs += [pos[k] for k in keys]
            ys += [100 * r["test_accuracy"]] * len(keys)
        if xs:
            ax1.scatter(xs, ys, color=colors(i % 10), s=18, label=f"seed {s}")
    ax1.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax1.set_ylabel("test accuracy (%)")
    ax1.set_title("accuracy per configuration / method")
    ax1.legend(fontsize=8)

    lo, hi = sm["oracle_constrained"]["band"]
    ax2.axvspan(100 * lo, 100 * hi, color="0.9", label=f"band {100 * lo:g}–{100 * hi:g}%")
    markers = {"edge-popup": ("o", "0.5"), "random": ("x", "k")}
    groups = list(dict.fromkeys(r["group"] for r in records))
    for i, g in enumerate(groups):
        rs = [r for r in records if r["group"] == g]
        m, c = markers.get(g, ("D", colors((2 + 2 * i) % 10)))  # clear of the oracles' red and blue
        ax2.scatter(
            [100 * r["achieved_sparsity"] for r in rs],
            [100 * r["test_accuracy"] for r in rs],
            marker=m,
            color=c,
            s=22,
            label="edge-popup sweep" if g == "edge-popup" else g,
        )
    for key, m, lab in (("oracle_constrained", "*", "oracle in band"), ("oracle_unconstrained", "P", "oracle")):
        chosen = [v for v in sm[key]["per_seed"].values() if v is not None]
        if not chosen:  # no run in the band for any seed: no marker, so no legend entry either
            continue
        ax2.scatter(
            [100 * v["achieved_sparsity"] for v in chosen],
            [100 * v["test_accuracy"] for v in chosen],
            marker=m,
            s=120,
            facecolors="none",
            edgecolors="r" if key == "oracle_constrained" else "b",
            label=lab,
        )
    fixed = [r for r in records if r["fixed"]]
    if fixed:
        ax2.scatter(
            [100 * r["achieved_sparsity"] for r in fixed],
            [100 * r["test_accuracy"] for r in fixed],
            marker="s",
            s=50,
            facecolors="none",
            edgecolors="g",
            label="fixed edge-popup",
        )
    ax2.set_xlabel("achieved sparsity (%)")
    ax2.set_ylabel("test accuracy (%)")
    ax2.set_title("accuracy vs achieved sparsity")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def weak_plot(r: dict) -> bytes:
    """PNG of validation accuracy and training loss per epoch, masked vs dense (epoch 0 = before training)."""
    plt = pyplot()

    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for k, style in (("masked", "-o"), ("dense", "--s")):
        if k not in r:
            continue
        run = r[k]
        epochs = [0] + [p["epoch"] for p in run["curve"]]
        acc = [run["initial"]["val"]["accuracy"]] + [p["val_accuracy"] for p in run["curve"]]
        acc_ax.plot(epochs, [100 * a for a in acc], style, markersize=3, label=k)
        loss_ax.plot(epochs[1:], [p["loss"] for p in run["curve"]], style, markersize=3, label=k)
    acc_ax.set(xlabel="epoch", ylabel="validation accuracy (%)", title=f"{r['method']} ticket, seed {r['seed']}")
    loss_ax.set(xlabel="epoch", ylabel="training loss", title=f"sparsity {pct(r['sparsity']['achieved'])}")
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return png_bytes(fig, dpi=100)


def drift_plot(r: dict) -> bytes:
    """PNG: weight mean per layer; negative pre-activation share and activation sparsity per hidden layer."""
    plt = pyplot()

    sm = r["summary"]
    steps = sm["steps"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = (
        ("weight_mean", "weight mean"),
        ("neg_preact_share", "share of negative pre-activations"),
        ("sparsity", f"activation sparsity ({r['zero_rule']})"),
    )
    for ax, (metric, title) in zip(axes, panels):
        for layer, stats in sm["layers"].items():
            if metric not in stats:
                continue
            mean = [float("nan") if v is None else v for v in stats[metric]["mean"]]
            std = [0.0 if v is None else v for v in stats[metric]["std"]]
            ax.plot(steps, mean, label=layer)
            if len(r["seeds"]) > 1:
                ax.fill_between(
                    steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2
                )
        if metric == "weight_mean":
            ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    seeds = f"{len(r['seeds'])} seeds (mean ± std)" if len(r["seeds"]) > 1 else f"seed {r['seeds'][0]}"
    fig.suptitle(
        f"{r['model']} {r['activation']} {r['loss']} inputs={r['inputs']}, {seeds}"
        + (", ticket (kept weights)" if r["masked"] else "")
    )
    fig.tight_layout()
    return png_bytes(fig, dpi=100)
