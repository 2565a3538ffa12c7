"""Rich tables and progress on stderr for people; exactly one JSON document on stdout with --json."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

# C0 controls (ESC starts terminal commands, CR/BS overwrite what was shown), DEL, C1 controls (CSI is \x9b) and
# the bidirectional overrides that reorder what a reader sees
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def literal(value: object) -> str:
    """Text that came from a file or the user, made safe to show: every control character escaped (\\x1b, \\x0d,
    \\u202e), so a ticket's metadata, a path or a --model string can never move the cursor, recolour or rewrite the
    terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(value))


class LiteralConsole(Console):
    """A Console that shows every string as it is: no markup ('[bold red]' or '[/oops]' in a ticket is text, not a
    style or a crash), no emoji codes, no highlighting, control characters escaped. Tables, titles and prints all
    turn their strings into Text through render_str, so this one override covers them all."""

    def render_str(self, text: str, **kwargs) -> Text:
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(literal(text), **kwargs)


def stdout() -> Console:
    return LiteralConsole(file=sys.stdout, soft_wrap=True)


def stderr() -> Console:
    return LiteralConsole(file=sys.stderr, soft_wrap=True)


def finite_json(obj: object) -> object:
    """NaN and ±Infinity as null: strict JSON has no such numbers, and CI parsers (jq, JSON.parse) reject them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def print_json(obj: dict) -> None:
    """Exactly one strict JSON document on stdout (non-finite numbers as null, non-ASCII and controls escaped)."""
    sys.stdout.write(json.dumps(finite_json(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def _line(text: str) -> str:
    return literal(text.replace("\r\n", " ").replace("\n", " ")) + "\n"


def error(message: str, hint: str | None = None) -> None:
    """One line on stderr, shown literally (a message quotes paths and file contents)."""
    sys.stderr.write(_line(f"error: {message}" + (f" (hint: {hint})" if hint else "")))
    sys.stderr.flush()


def internal_error(e: BaseException, *, traceback_shown: bool = False) -> None:
    """The one line of an unexpected exception (a bug): its type and first line, and how to see the traceback."""
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    what = type(e).__name__ + (f": {first}" if first else "")
    how = "the traceback is above" if traceback_shown else "rerun with TICKET_DEBUG=1 for the traceback"
    sys.stderr.write(_line(f"internal error: {what}; {how}"))
    sys.stderr.flush()


def warn(message: str) -> None:
    """One line on stderr (only from rank 0 under torchrun: every rank would say the same)."""
    from ticketcli.distributed import quiet_rank

    if not quiet_rank():
        sys.stderr.write(_line(f"warning: {message}"))


@contextmanager
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator:
    """A progress bar over epochs (loss, running accuracy, current achieved sparsity), shown from the first epoch
    on, so that errors before training (bad data, bad spec) are not preceded by an empty bar."""
    if quiet:
        yield None
        return
    columns = [
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}  sparsity {task.fields[sparsity]}", markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    bar = Progress(*columns, console=stderr(), transient=False)
    task = None

    def update(stats: dict) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total, loss="-", acc="-", sparsity="-")
        if "round" in stats:  # iterated: the bar restarts each round
            bar.update(task, description=f"{label} round {stats['round']}")
        bar.update(
            task,
            completed=stats["epoch"],
            loss=f"{stats['loss']:.4f}",
            acc=f"{stats['accuracy']:.2%}",
            sparsity=f"{stats['sparsity']:.2%}",
        )

    try:
        yield update
    finally:
        if task is not None:
            bar.stop()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def extract_table(s: dict) -> None:
    out = stdout()
    m, sp = s["metrics"], s["sparsity"]
    t = Table(title=f"{s['method']} ticket  ->  {s['ticket']} ({s['file_bytes']} bytes)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("test accuracy", _pct(m["test"]["accuracy"]))
    t.add_row("validation accuracy", _pct(m["val"]["accuracy"]))
    if "trained" in m:
        t.add_row("trained sparse network test accuracy (info)", _pct(m["trained"]["test"]["accuracy"]))
    t.add_row("requested sparsity", _pct(sp["requested"]))
    if "aug_density" in sp:
        t.add_row("augmented keep density", f"{sp['aug_density']:.4f}")
    t.add_row("achieved sparsity", _pct(sp["achieved"]))
    if "aux_share" in sp:
        t.add_row("kept augmented entries on auxiliary coords", _pct(sp["aux_share"]))
    if sp.get("projected"):
        t.add_row("final mask", "projected onto the original scores")
    for r in sp.get("rounds", []):
        t.add_row(
            f"round {r['round']}", f"aug density {r['aug_density']:.4f} -> sparsity {_pct(r['achieved_sparsity'])}"
        )
    t.add_row("model / seed", f"{s['model']} / {s['seed']}")
    t.add_row("data", f"{s['data']['dataset']} ({s['data']['n_extract']}/{s['data']['n_val']}/{s['data']['n_test']})")
    t.add_row("wall time", f"{m['wall_time_s']:.1f} s on {m['device']}")
    out.print(t)
    out.print(layer_table(sp))


def layer_table(sp: dict) -> Table:
    t = Table(title="per layer")
    t.add_column("parameter")
    t.add_column("kept / total", justify="right")
    t.add_column("achieved sparsity", justify="right")
    aux = any("aux_share" in v for v in sp["per_layer"].values())
    if aux:
        t.add_column("aux share", justify="right")
    for name, v in sp["per_layer"].items():
        row = [name, f"{v['kept']} / {v['total']}", _pct(v["achieved"])]
        if aux:
            row.append(_pct(v.get("aux_share")))
        t.add_row(*row)
    return t


def evaluate_table(r: dict) -> None:
    t = Table(title=f"{r['ticket']}: {r['method']} on {r['model']}, seed {r['seed']}")
    t.add_column("split")
    t.add_column("accuracy", justify="right")
    t.add_column("loss", justify="right")
    t.add_column("stored accuracy", justify="right")
    t.add_row("test", _pct(r["test"]["accuracy"]), f"{r['test']['loss']:.4f}", _pct(r["stored"]["test_accuracy"]))
    t.add_row("validation", _pct(r["val"]["accuracy"]), f"{r['val']['loss']:.4f}", _pct(r["stored"]["val_accuracy"]))
    out = stdout()
    out.print(t)
    verdict = "reproduces the stored accuracy exactly" if r["reproduced"] else "differs from the stored accuracy"
    out.print(f"achieved sparsity {_pct(r['sparsity']['achieved'])}; on {r['device']} the ticket {verdict}.")
    if "gate" in r:
        g = r["gate"]
        out.print(f"gate: test accuracy >= {g['min_accuracy']}: {'passed' if g['passed'] else 'FAILED'}")


MASK_ROWS = 500  # inspect's table shows at most this many masks (Rich takes a minute for 100k rows; --json has all)
INTEGRITY_NOTES = {
    "ok": "ok (masks match the recorded masks_sha256)",
    "modified": "MODIFIED: masks were modified after the ticket was written",
    "not recorded": "not recorded (an older ticket without masks_sha256)",
}


def inspect_table(r: dict) -> None:
    t = Table(title=f"{r['ticket']} ({r['file_bytes']} bytes; packed masks {r['packed_mask_bytes']} bytes)")
    t.add_column("field")
    t.add_column("value")
    t.add_row("model", r["model"]["spec"])
    init = r["init"]
    t.add_row("init", f"{init['scheme']} (k={init.get('k')}, seed {init['seed']})")
    t.add_row("weights sha256", r["weights_sha256"])
    if r["checkpoint"]:
        t.add_row("checkpoint", f"{r['checkpoint'].get('path')} (sha256 {r['checkpoint']['sha256'][:16]}...)")
    method = ", ".join(f"{k}={v}" for k, v in r["method"].items() if k != "score_init" and v is not None)
    t.add_row("method", method)
    d = r["data"]
    t.add_row(
        "data",
        f"{d['dataset']}: {d['n_extract']} extraction / {d['n_val']} validation / "
        f"{d.get('n_test', '?')} test, split seed {d['split_seed']}",
    )
    sp = r["sparsity"]
    t.add_row("sparsity", f"requested {_pct(sp.get('requested'))}, achieved {_pct(1 - r['density'])}")
    m = r["metrics"]
    if "test" in m:
        t.add_row(
            "accuracy at extraction",
            f"test {_pct(m['test'].get('accuracy'))}, val {_pct(m['val'].get('accuracy'))} on {m.get('device')}",
        )
    t.add_row("created by", ", ".join(f"{k} {v}" for k, v in r["created_by"].items()))
    t.add_row("masks integrity", INTEGRITY_NOTES.get(r.get("integrity"), str(r.get("integrity"))))
    out = stdout()
    out.print(t)
    lt = Table(title="masks")
    lt.add_column("parameter")
    lt.add_column("shape")
    lt.add_column("kept / total", justify="right")
    lt.add_column("density", justify="right")
    shown = list(r["masks"].items())[:MASK_ROWS]
    for name, v in shown:
        lt.add_row(name, "x".join(map(str, v["shape"])), f"{v['kept']} / {v['total']}", _pct(v["density"]))
    out.print(lt)
    if len(r["masks"]) > len(shown):
        out.print(f"... and {len(r['masks']) - len(shown)} more masks (--json lists every one)")


# ---- sweep-k ----


@contextmanager
def sweep_progress(total: int, *, quiet: bool) -> Iterator:
    """A progress bar over a sweep's configurations (resumed ones count as done at once), with ETA."""
    if quiet:
        yield None
        return
    columns = [
        TextColumn("sweep-k", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("last {task.fields[last]}", markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    with Progress(*columns, console=stderr(), transient=False) as bar:
        task = bar.add_task("sweep-k", total=total, last="-")

        def update(record: dict, resumed: bool) -> None:
            how = "resumed" if resumed else f"{_pct(record['test_accuracy'])} test"
            bar.update(task, advance=1, last=literal(f"{record['id']} ({how})"))  # ids come from --out-dir files too

        yield update


def sweep_table(result: dict) -> None:
    """The stability table: one row per quantity of Section 6.3."""
    sm, st = result["summary"], result["settings"]
    lo, hi = sm["oracle_constrained"]["band"]
    t = Table(
        title=f"sweep-k: requested sparsity {_pct(st['sparsity'])}, seeds {st['seeds']}, "
        f"{st['model']} on {st['dataset']}, {st['epochs']} epochs"
    )
    t.add_column("method / selection")
    t.add_column("test accuracy", justify="right")
    t.add_column("std (points)", justify="right")
    t.add_column("achieved sparsity", justify="right")
    ep = sm["edge_popup"]
    t.add_row(
        f"edge-popup sweep ({ep['configs']} runs)",
        f"{_pct(ep['test']['min'])} – {_pct(ep['test']['max'])}",
        "-" if ep["test"]["std"] is None else f"{100 * ep['test']['std']:.2f}",
        f"{_pct(ep['achieved_sparsity']['min'])} – {_pct(ep['achieved_sparsity']['max'])}",
    )
    rows = [
        (f"oracle, val-selected in {100 * lo:g}–{100 * hi:g}%", sm["oracle_constrained"]),
        ("oracle, val-selected, unconstrained", sm["oracle_unconstrained"]),
        ("fixed edge-popup", sm["fixed_edge_popup"]),
        *((name, g) for name, g in sm["methods"].items()),
    ]
    for label, g in rows:
        t.add_row(
            label,
            _pct(g["test"]["mean"]),
            "-" if g["test"]["std"] is None else f"{100 * g['test']['std']:.2f}",
            "-" if g["achieved_sparsity"]["mean"] is None else _pct(g["achieved_sparsity"]["mean"]),
        )
    out = stdout()
    out.print(t)
    missing = sm["oracle_constrained"]["seeds_without_candidate"]
    if missing:
        out.print(f"no edge-popup run fell in the band for seed(s) {', '.join(missing)}")
    out.print(
        f"{len(result['records'])} runs ({len(result['resumed'])} resumed from {st['out_dir']})"
        if st["out_dir"]
        else f"{len(result['records'])} runs"
    )


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed; the backend must be set before pyplot loads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig, *, dpi: int) -> bytes:
    """The figure as PNG bytes (written by the caller with ticket.write_atomic); the figure is closed."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()


def sweep_plot(result: dict) -> bytes:
    """Figure 2: (left) test accuracy per configuration/method, one point per seed; (right) accuracy vs achieved
    sparsity with the constrained oracle's band shaded."""
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
    for r in records:
        c = colors(seeds.index(r["seed"]) % 10)
        keys = [r["config"]] if r["group"] == "edge-popup" else []
        keys += ["fixed"] if r["fixed"] else ([] if r["group"] == "edge-popup" else [r["group"]])
        for k in keys:
            ax1.scatter(pos[k], 100 * r["test_accuracy"], color=c, s=18)
    for s in seeds:
        ax1.scatter([], [], color=colors(seeds.index(s) % 10), s=18, label=f"seed {s}")
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
    return png_bytes(fig, dpi=110)


@contextmanager
def runs_progress(total: int, *, quiet: bool) -> Iterator:
    """One progress bar per training run (stats["run"]: masked, dense), each over epochs, with loss and
    validation accuracy."""
    if quiet:
        yield None
        return
    columns = [
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}  val acc {task.fields[acc]}", markup=False),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    bar = Progress(*columns, console=stderr(), transient=False)
    tasks: dict[str, int] = {}

    def update(stats: dict) -> None:
        if not tasks:
            bar.start()
        if stats["run"] not in tasks:
            tasks[stats["run"]] = bar.add_task(stats["run"], total=total, loss="-", acc="-")
        bar.update(
            tasks[stats["run"]],
            completed=stats["epoch"],
            loss=f"{stats['loss']:.4f}",
            acc=f"{stats['val_accuracy']:.2%}",
        )

    try:
        yield update
    finally:
        if tasks:
            bar.stop()


def weak_table(r: dict) -> None:
    runs = [k for k in ("masked", "dense") if k in r]
    t = Table(
        title=f"{r['ticket']}: {r['method']} ticket on {r['model']}, seed {r['seed']}, trained {r['epochs']} "
        f"epochs (lr {r['optimizer']['lr']:g}, batch {r['batch_size']})"
    )
    t.add_column("quantity")
    for k in runs:
        t.add_column(k, justify="right")
    rows = [
        ("initial test accuracy", lambda x: _pct(x["initial"]["test"]["accuracy"])),
        ("final test accuracy", lambda x: _pct(x["final"]["test"]["accuracy"])),
        ("gain", lambda x: f"{100 * x['gain']:+.2f} pts"),
        (
            "initial / final validation",
            lambda x: f"{_pct(x['initial']['val']['accuracy'])} / {_pct(x['final']['val']['accuracy'])}",
        ),
        ("best validation (epoch)", lambda x: f"{_pct(x['best_val_accuracy'])} ({x['best_val_epoch']})"),
        ("final train loss", lambda x: f"{x['curve'][-1]['loss']:.4f}"),
        ("wall time", lambda x: f"{x['wall_time_s']:.1f} s"),
    ]
    for name, cell in rows:
        t.add_row(name, *(cell(r[k]) for k in runs))
    out = stdout()
    out.print(t)
    sp = r["sparsity"]
    out.print(
        f"sparsity {_pct(sp['achieved'])} ({sp['kept']} / {sp['total']} kept), unchanged: "
        f"{sp['masked_nonzero_after']} masked weights nonzero after training, on {r['device']}."
    )
    if "out" in r:
        out.print(f"trained weights -> {r['out']['path']} ({r['out']['file_bytes']} bytes)")
    if r.get("plot"):
        out.print(f"curves -> {r['plot']}")


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
    loss_ax.set(xlabel="epoch", ylabel="training loss", title=f"sparsity {_pct(r['sparsity']['achieved'])}")
    for ax in (acc_ax, loss_ax):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return png_bytes(fig, dpi=100)


# --- ticket drift ---------------------------------------------------------------------------------------------

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


def _cell(metric: str, s: dict, i: int, seeds: int) -> str:
    mean = s["mean"][i]
    if seeds == 1 or mean is None:
        return _num(metric, mean)
    std = s["std"][i]
    spread = f"{100 * std:.1f}%" if metric in SHARES else f"{std:.2g}"
    return f"{_num(metric, mean)} ± {spread}"


def drift_tables(r: dict) -> None:
    """One table per logged step (first, every k-th, last): a row per statistic, a column per layer, mean ± std
    across seeds; then the drift from the first to the last step."""
    out = stdout()
    sm, n_seeds = r["summary"], len(r["seeds"])
    what = f"ticket {r['ticket']} (kept weights only)" if r["masked"] else f"seeds {','.join(map(str, r['seeds']))}"
    clip = f" (c = {r['clip']:g})" if r["activation"] == "relu2-clip" else ""
    corpus = r.get("corpus")  # a character-level model's text: the probe is validation characters
    source = (
        f"({r['dataset']})"
        if corpus is None
        else f"(text, {corpus['characters']} characters, {corpus['vocab']} distinct)"
    )
    out.print(
        f"drift: {r['model']}, {r['activation']}{clip}, {r['loss']}, inputs {r['inputs']} "
        f"{source}, {r['optimizer']['name']} lr {r['optimizer']['lr']:g}, batch {r['batch_size']}, "
        f"{r['steps']} steps, {what}. Statistics on a fixed probe batch of {r['probe_n']}; an activation "
        f"counts as zero when {r['zero_rule']}; g = per-example dℓ/dh; a positive mean gradient pushes the "
        f"weight mean down."
    )
    layers = list(sm["layers"])
    for i in compact_indices(len(sm["steps"])):
        t = Table(
            title=f"step {sm['steps'][i]}: loss {_cell('loss', sm['loss'], i, n_seeds)}, "
            f"accuracy {_cell('accuracy', sm['accuracy'], i, n_seeds)}"
            + (f", perplexity {_cell('loss', sm['perplexity'], i, n_seeds)}" if "perplexity" in sm else "")
        )
        t.add_column("statistic")
        for layer in layers:
            t.add_column(layer, justify="right")
        for metric, header in DRIFT_COLUMNS:
            t.add_row(
                header,
                *(
                    _cell(metric, sm["layers"][la][metric], i, n_seeds) if metric in sm["layers"][la] else ""
                    for la in layers
                ),
            )
        out.print(t)
    t = Table(title="weight drift from step 0 to the last step")
    for header in ("layer", "W mean first", "W mean last", "drift/σ₀", "seeds with negative drift"):
        t.add_column(header, justify="left" if header == "layer" else "right")
    for layer, stats in sm["layers"].items():
        wm = stats["weight_mean"]
        t.add_row(
            layer,
            _cell("weight_mean", wm, 0, n_seeds),
            _cell("weight_mean", wm, -1, n_seeds),
            _cell("weight_drift_std", stats["weight_drift_std"], -1, n_seeds),
            f"{round(stats['negative_drift_share'] * n_seeds)} of {n_seeds}",
        )
    out.print(t)
    if "plot" in r:
        out.print(f"plot written to {r['plot']}")


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


def export_table(r: dict) -> None:
    """`ticket export`: the file written and its size beside the dense float32 checkpoint (per layer for csr)."""
    t = Table(title=f"{r['format']} export  ->  {r['out']}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("file size", f"{r['file_bytes']:,} bytes")
    t.add_row("dense float32 checkpoint", f"{r['dense_float32_bytes']:,} bytes")
    t.add_row("size / dense", f"{r['ratio']:.3f}")
    t.add_row("ticket file", f"{r['ticket_bytes']:,} bytes")
    t.add_row("kept / total masked entries", f"{r['kept']:,} / {r['total']:,} ({_pct(r['kept'] / r['total'])})")
    out = stdout()
    out.print(t)
    if "layers" in r:
        lt = Table(title="csr per layer")
        lt.add_column("parameter")
        lt.add_column("shape")
        lt.add_column("nnz", justify="right")
        lt.add_column("csr bytes", justify="right")
        lt.add_column("dense bytes", justify="right")
        for name, v in r["layers"].items():
            lt.add_row(
                name, "x".join(map(str, v["shape"])), f"{v['nnz']:,}", f"{v['csr_bytes']:,}", f"{v['dense_bytes']:,}"
            )
        out.print(lt)
