"""PNG figures (matplotlib, Agg backend): each `*_figure(result)` builds a Figure whose title names the run (dataset,
model, method), and `*_plot(result)` returns it as PNG bytes for the caller to write with atomic.write_atomic."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from ticketcli.report.console import method_name, pct

if TYPE_CHECKING:
    import numpy as np
    from matplotlib.figure import Figure

    from ticketcli.runs.compare import CompareResult
    from ticketcli.runs.inspect import InspectResult
    from ticketcli.sweep.result import OraclePick, SweepRecord, SweepResult
    from ticketcli.weak.result import WeakResult


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


def run_title(*parts: object) -> str:
    """A figure's title: what identifies the run (dataset, model, method, ...), the parts that are set."""
    return ", ".join(str(p) for p in parts if p not in (None, ""))


def sweep_plot(result: SweepResult) -> bytes:
    """sweep_figure as PNG bytes."""
    return png_bytes(sweep_figure(result), dpi=110)


def sweep_figure(result: SweepResult) -> Figure:
    """Figure 2: (left) test accuracy per configuration/method, one point per seed; (right) accuracy vs achieved
    sparsity with the constrained oracle's band shaded. A language model's sweep plots test bits per character in
    place of accuracy (lower is better). A legend names only markers that are drawn."""
    plt = pyplot()

    records, sm = result.records, result.summary
    lm = bool(records) and all(r.language_model for r in records)
    quantity, unit = ("bits per character", "test bits per character") if lm else ("accuracy", "test accuracy (%)")

    def y(r: SweepRecord | OraclePick) -> float:
        """What the figure plots of a run: its test bits per character (a language model's) or accuracy in %."""
        bits = r.test_bits_per_char
        return bits if lm and bits is not None else 100 * r.test_accuracy

    labels = list(dict.fromkeys(r.config for r in records if r.group == "edge-popup"))
    labels += list(
        dict.fromkeys(("fixed" if r.fixed else r.group) for r in records if r.group != "edge-popup" or r.fixed)
    )
    pos = {lab: i for i, lab in enumerate(labels)}
    seeds = sm.seeds
    colors = plt.get_cmap("tab10")
    fig: Figure  # pyplot is loaded at run time (pyplot()), so its results are typed Any
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5))
    for i, s in enumerate(seeds):  # one labelled scatter per seed: its legend entry is its own points
        xs, ys = [], []
        for r in (r for r in records if r.seed == s):
            keys = [r.config] if r.group == "edge-popup" else []
            keys += ["fixed"] if r.fixed else ([] if r.group == "edge-popup" else [r.group])
            xs += [pos[k] for k in keys]
            ys += [y(r)] * len(keys)
        if xs:
            ax1.scatter(xs, ys, color=colors(i % 10), s=18, label=f"seed {s}")
    ax1.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    ax1.set_ylabel(unit)
    ax1.set_title(f"{quantity} per configuration / method")
    ax1.legend(fontsize=8)

    lo, hi = sm.oracle_constrained.band or (0.0, 1.0)
    ax2.axvspan(100 * lo, 100 * hi, color="0.9", label=f"band {100 * lo:g}–{100 * hi:g}%")
    markers = {"edge-popup": ("o", "0.5"), "random": ("x", "k")}
    groups = list(dict.fromkeys(r.group for r in records))
    for i, g in enumerate(groups):
        rs = [r for r in records if r.group == g]
        m, c = markers.get(g, ("D", colors((2 + 2 * i) % 10)))  # clear of the oracles' red and blue
        ax2.scatter(
            [100 * r.achieved_sparsity for r in rs],
            [y(r) for r in rs],
            marker=m,
            color=c,
            s=22,
            label="edge-popup sweep" if g == "edge-popup" else g,
        )
    oracles = ((sm.oracle_constrained, "*", "oracle in band", "r"), (sm.oracle_unconstrained, "P", "oracle", "b"))
    for oracle, m, lab, color in oracles:
        chosen = [v for v in oracle.per_seed.values() if v is not None]
        if not chosen:  # no run in the band for any seed: no marker, so no legend entry either
            continue
        ax2.scatter(
            [100 * v.achieved_sparsity for v in chosen],
            [y(v) for v in chosen],
            marker=m,
            s=120,
            facecolors="none",
            edgecolors=color,
            label=lab,
        )
    fixed = [r for r in records if r.fixed]
    if fixed:
        ax2.scatter(
            [100 * r.achieved_sparsity for r in fixed],
            [y(r) for r in fixed],
            marker="s",
            s=50,
            facecolors="none",
            edgecolors="g",
            label="fixed edge-popup",
        )
    ax2.set_xlabel("achieved sparsity (%)")
    ax2.set_ylabel(unit)
    ax2.set_title(f"{quantity} vs achieved sparsity")
    ax2.legend(fontsize=8)
    others = [m for m in dict.fromkeys(method_name(r.method) for r in records) if m != "edge-popup"]
    methods = "edge-popup sweep" + (f" vs {', '.join(others)}" if others else "")
    st = result.settings  # the command's settings: model, dataset, epochs
    where = (None, None, None) if st is None else (st.dataset, st.model, f"{st.epochs} epochs")
    fig.suptitle(f"sweep-k: {run_title(where[0], where[1], methods, where[2], _seeds(seeds))}")
    fig.tight_layout()
    return fig


def _seeds(seeds: Sequence[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"{len(seeds)} seeds"


def weak_plot(r: WeakResult) -> bytes:
    """weak_figure as PNG bytes."""
    return png_bytes(weak_figure(r), dpi=100)


def weak_figure(r: WeakResult) -> Figure:
    """Validation accuracy and training loss per epoch, masked vs dense (epoch 0 = before training)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig: Figure  # pyplot is loaded at run time (pyplot()), so its results are typed Any
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for k, style, run in (("masked", "-o", r.masked), ("dense", "--s", r.dense)):
        if run is None:
            continue
        epochs = [0] + [p.epoch for p in run.curve]
        acc = [run.initial.val.accuracy] + [p.val_accuracy for p in run.curve]
        acc_ax.plot(epochs, [100 * a for a in acc], style, markersize=3, label=k)
        loss_ax.plot(epochs[1:], [p.loss for p in run.curve], style, markersize=3, label=k)
    acc_ax.set(xlabel="epoch", ylabel="validation accuracy (%)", title="validation accuracy")
    loss_ax.set(xlabel="epoch", ylabel="training loss", title="training loss")
    for ax in (acc_ax, loss_ax):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # an epoch is whole: no 0.5 or 2.5 ticks
        ax.grid(alpha=0.3)
        ax.legend()
    data = r.data.get("dataset")
    ticket = f"{method_name(r.method)} ticket (seed {r.seed}, sparsity {pct(r.sparsity.achieved)})"
    fig.suptitle(f"train-weak: {run_title(data, r.model, ticket, f'{r.spec.epochs} epochs')}")
    fig.tight_layout()
    return fig


def overlap_plot(r: CompareResult) -> bytes:
    """overlap_figure as PNG bytes."""
    return png_bytes(overlap_figure(r), dpi=110)


def overlap_figure(r: CompareResult) -> Figure:
    """`compare --plot`: the pairwise Jaccard over every masked weight as a heat map, each ticket labelled by its
    number, method and seed, its file named under the map (with a reference, beyond 8 tickets, its one row)."""
    from pathlib import PurePath

    plt = pyplot()
    matrix = r.jaccard_matrix()
    n = len(r.tickets)
    short = [f"{i}: {method_name(t.method)}, seed {t.seed}" for i, t in enumerate(r.tickets)]
    files = [f"{i}: {PurePath(t.ticket).name}" for i, t in enumerate(r.tickets)]
    side = 2.5 + 0.55 * n
    fig: Figure
    fig, ax = plt.subplots(figsize=(side + 3.0, 0.55 * len(matrix) + 2.5 + 0.2 * n), layout="constrained")
    image = ax.imshow(matrix, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(n), [str(i) for i in range(n)])
    rows = [r.reference] if r.reference is not None else list(range(n))
    ax.set_yticks(range(len(rows)), [short[i] for i in rows], fontsize=8)
    for y, row in enumerate(matrix):
        for x, value in enumerate(row):
            ax.text(x, y, f"{value:.2f}", ha="center", va="center", fontsize=7, color="w" if value < 0.6 else "k")
    fig.colorbar(image, ax=ax, label="Jaccard: kept by both / kept by either", shrink=0.8)
    ax.set_xlabel("ticket\n" + "\n".join(files), fontsize=8, loc="left")
    models = sorted({t.model for t in r.tickets})
    ax.set_title(run_title("compare: mask overlap", ", ".join(models)), fontsize=10)
    return fig


def inspect_plot(r: InspectResult, filters: dict[str, np.ndarray]) -> bytes:
    """inspect_figure as PNG bytes."""
    return png_bytes(inspect_figure(r, filters), dpi=110)


def inspect_figure(r: InspectResult, filters: dict[str, np.ndarray]) -> Figure:
    """`inspect --plot`: each mask's density (a bar per masked parameter, the overall density dashed) and, for a
    convolution, the kept-filter map: the share of each (output, input) kernel it keeps."""
    from pathlib import PurePath

    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    names = list(filters)
    fig: Figure
    fig, axes = plt.subplots(1, 1 + len(names), figsize=(6 + 3.5 * len(names), 4.5), squeeze=False)
    ax = axes[0][0]
    ax.bar(range(len(r.masks)), [100 * m.density for m in r.masks], color="tab:blue")
    ax.axhline(100 * r.density, color="k", linestyle="--", linewidth=1, label=f"overall {pct(r.density)}")
    ax.set_xticks(range(len(r.masks)), [m.name for m in r.masks], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("density: kept / total (%)")
    ax.set_title("density per layer")
    ax.legend(fontsize=8)
    for ax, name in zip(axes[0][1:], names, strict=True):
        image = ax.imshow(filters[name], vmin=0.0, vmax=1.0, cmap="magma", aspect="auto", interpolation="nearest")
        ax.set_title(f"{name}: kept share per filter", fontsize=9)
        ax.set_xlabel("input channel")
        ax.set_ylabel("output channel")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.colorbar(image, ax=ax)
    tk = r.record
    fig.suptitle(
        run_title(
            f"inspect {PurePath(r.ticket).name}", tk.data.dataset, tk.model.spec, tk.method.name, f"seed {tk.init.seed}"
        )
    )
    fig.tight_layout()
    return fig
