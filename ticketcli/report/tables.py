"""Human-readable results on stdout: one table (or a few) per command, from the same dict --json prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from ticketcli.report.console import method_name, pct, stdout

if TYPE_CHECKING:  # the results' classes, for the annotations only: inspect's table must not import torch
    from ticketcli.catalog import ListResult
    from ticketcli.export import ExportResult
    from ticketcli.runs.evaluate import EvaluateResult
    from ticketcli.runs.inspect import InspectResult
    from ticketcli.runs.parts import LayerCount
    from ticketcli.runs.record import ExtractionResult


def extract_table(s: ExtractionResult) -> None:
    """`ticket extract`: accuracies, requested and achieved sparsity, then the per-layer table."""
    out = stdout()
    m, sp = s.metrics, s.sparsity
    t = Table(title=f"{method_name(s.method)} ticket  ->  {s.ticket} ({s.file_bytes} bytes)")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("test accuracy", pct(m.test.accuracy))
    t.add_row("validation accuracy", pct(m.val.accuracy))
    if m.trained is not None:
        t.add_row("trained sparse network test accuracy (info)", pct(m.trained.test.accuracy))
    t.add_row("requested sparsity", pct(sp.requested))
    if sp.aug_density is not None:
        t.add_row("augmented keep density", f"{sp.aug_density:.4f}")
    t.add_row("achieved sparsity", pct(sp.achieved))
    if sp.aux_share is not None:
        t.add_row("kept augmented entries on auxiliary coords", pct(sp.aux_share))
    if sp.projected:
        t.add_row("final mask", "projected onto the original scores")
    for r in sp.rounds or ():
        t.add_row(
            f"round {r['round']}", f"aug density {r['aug_density']:.4f} -> sparsity {pct(r['achieved_sparsity'])}"
        )
    t.add_row("model / seed", f"{s.model} / {s.seed}")
    d = s.data
    t.add_row("data", f"{d['dataset']} ({d['n_extract']}/{d['n_val']}/{d['n_test']})")
    t.add_row("wall time", f"{m.wall_time_s:.1f} s on {m.device}")
    out.print(t)
    out.print(layer_table(sp.layers))


def layer_table(layers: Sequence[LayerCount]) -> Table:
    """Kept / total and achieved sparsity per masked parameter (with the auxiliary share when there is one)."""
    t = Table(title="per layer")
    t.add_column("parameter")
    t.add_column("kept / total", justify="right")
    t.add_column("achieved sparsity", justify="right")
    aux = any(v.aux_share is not None for v in layers)
    if aux:
        t.add_column("aux share", justify="right")
    for v in layers:
        row = [v.name, f"{v.kept} / {v.total}", pct(v.sparsity)]
        if aux:
            row.append(pct(v.aux_share))
        t.add_row(*row)
    return t


def evaluate_table(r: EvaluateResult) -> None:
    """`ticket evaluate`: re-measured accuracy and loss beside the stored ones, and the gate when asked."""
    t = Table(title=f"{r.ticket}: {method_name(r.method)} on {r.model}, seed {r.seed}")
    t.add_column("split")
    t.add_column("accuracy", justify="right")
    t.add_column("loss", justify="right")
    t.add_column("stored accuracy", justify="right")
    t.add_row("test", pct(r.test.accuracy), f"{r.test.loss:.4f}", pct(r.stored.test_accuracy))
    t.add_row("validation", pct(r.val.accuracy), f"{r.val.loss:.4f}", pct(r.stored.val_accuracy))
    out = stdout()
    out.print(t)
    verdict = "reproduces the stored accuracy exactly" if r.reproduced else "differs from the stored accuracy"
    out.print(f"achieved sparsity {pct(r.achieved_sparsity)}; on {r.device} the ticket {verdict}.")
    if r.gate is not None:
        g = r.gate
        asked = [f"test accuracy >= {g.min_accuracy}"] if g.min_accuracy is not None else []
        if g.max_drop is not None and g.drop is not None:
            asked.append(f"drop from the stored {pct(g.stored_accuracy)} <= {g.max_drop} (drop {100 * g.drop:.2f} pts)")
        out.print(f"gate: {'; '.join(asked)}: {'passed' if g.passed else 'FAILED'}")


MASK_ROWS = 500  # inspect's table shows at most this many masks (Rich takes a minute for 100k rows; --json has all)

INTEGRITY_NOTES = {
    "ok": "ok (masks match the recorded masks_sha256)",
    "modified": "MODIFIED: masks were modified after the ticket was written",
    "not recorded": "not recorded (an older ticket without masks_sha256)",
}


def readable(value: object, nested: bool = False) -> str:
    """A metadata value as people read it, never a Python repr: a list as the flags take it (`0.9,0.999`), an object
    as `key value, key value` (in parentheses inside another value), true/false, and `-` for nothing."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        text = ",".join(readable(v, True) for v in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{k} {readable(v, True)}" for k, v in value.items())
    else:
        return str(value)
    return f"({text})" if nested else text


def method_text(method: Mapping[str, Any]) -> str:
    """A ticket's method record on one line: `name=augmented, sparsity=0.9, betas=0.9,0.999, score_params=(trainable
    1, total 2)`; how the scores started is left out, and options that are not set."""
    parts = []
    for k, v in method.items():
        if k == "score_init" or v is None:
            continue
        parts.append(f"{k}=({readable(v)})" if isinstance(v, dict) else f"{k}={readable(v)}")
    return ", ".join(parts)


def inspect_table(r: InspectResult) -> None:
    """`ticket inspect`: the metadata, then one row per mask (at most MASK_ROWS)."""
    t = Table(title=f"{r.ticket} ({r.file_bytes} bytes; packed masks {r.packed_mask_bytes} bytes)")
    t.add_column("field")
    t.add_column("value")
    t.add_row("model", r.model["spec"])
    init = r.init
    if "k" in init:
        t.add_row("init", f"{readable(init['scheme'])} (k={readable(init['k'])}, seed {readable(init['seed'])})")
    else:  # --init module: the factory's own weights, drawn under its fixed seed; no k shaped them
        factory = readable(init.get("factory_seed"))
        t.add_row("init", f"{readable(init['scheme'])} (factory seed {factory}, seed {readable(init['seed'])})")
    t.add_row("weights sha256", r.weights_sha256)
    if r.checkpoint:
        digest = r.checkpoint.get("sha256")
        short = digest[:16] + "..." if isinstance(digest, str) and digest else "not recorded"
        t.add_row("checkpoint", f"{readable(r.checkpoint.get('path'))} (sha256 {short})")
    method = method_text(r.method)
    if r.method.get("name") == "grasp" and "grasp_direction" not in r.method:
        method += " (written before grasp had two readings: paper reading, separate data)"
    t.add_row("method", method)
    d = r.data
    t.add_row(
        "data",
        f"{readable(d['dataset'])}: {readable(d['n_extract'])} extraction / {readable(d['n_val'])} validation / "
        f"{readable(d.get('n_test', '?'))} test, split seed {readable(d['split_seed'])}",
    )
    sp = r.sparsity
    t.add_row("sparsity", f"requested {pct(sp.get('requested'))}, achieved {pct(1 - r.density)}")
    m = r.metrics
    if "test" in m or "val" in m:  # each split is optional (a hand-made or foreign ticket may lack one)
        test, val = m.get("test") or {}, m.get("val") or {}
        t.add_row(
            "accuracy at extraction",
            f"test {pct(test.get('accuracy'))}, val {pct(val.get('accuracy'))} on {m.get('device', '-')}",
        )
    t.add_row("created by", readable(r.created_by))
    t.add_row("masks integrity", INTEGRITY_NOTES.get(str(r.integrity), str(r.integrity)))
    out = stdout()
    out.print(t)
    lt = Table(title="masks")
    lt.add_column("parameter")
    lt.add_column("shape")
    lt.add_column("kept / total", justify="right")
    lt.add_column("density", justify="right")
    shown = r.masks[:MASK_ROWS]
    for v in shown:
        lt.add_row(v.name, "x".join(map(str, v.shape)), f"{v.kept} / {v.total}", pct(v.density))
    out.print(lt)
    if len(r.masks) > len(shown):
        out.print(f"... and {len(r.masks) - len(shown)} more masks (--json lists every one)")


NO_SPREAD = "—"  # the std of fewer than two runs (one seed): there is no spread, and 0.00 would claim one


def sweep_table(result: dict) -> None:
    """The stability table: one row per quantity of Section 6.3."""
    sm, st = result["summary"], result["settings"]
    lo, hi = sm["oracle_constrained"]["band"]
    t = Table(
        title=f"sweep-k: requested sparsity {pct(st['sparsity'])}, seeds {st['seeds']}, "
        f"{st['model']} on {st['dataset']}, {st['epochs']} epochs"
    )
    t.add_column("method / selection")
    t.add_column("test accuracy", justify="right")
    t.add_column("std (points)", justify="right")
    t.add_column("achieved sparsity", justify="right")
    ep = sm["edge_popup"]
    t.add_row(
        f"edge-popup sweep ({ep['configs']} runs)",
        f"{pct(ep['test']['min'])} – {pct(ep['test']['max'])}",
        NO_SPREAD if ep["test"]["std"] is None else f"{100 * ep['test']['std']:.2f}",
        f"{pct(ep['achieved_sparsity']['min'])} – {pct(ep['achieved_sparsity']['max'])}",
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
            pct(g["test"]["mean"]),
            NO_SPREAD if g["test"]["std"] is None else f"{100 * g['test']['std']:.2f}",
            "-" if g["achieved_sparsity"]["mean"] is None else pct(g["achieved_sparsity"]["mean"]),
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


def weak_table(r: dict) -> None:
    """`ticket train-weak`: masked vs dense training, a column each."""
    runs = [k for k in ("masked", "dense") if k in r]
    t = Table(
        title=f"{r['ticket']}: {method_name(r['method'])} ticket on {r['model']}, seed {r['seed']}, "
        f"trained {r['epochs']} epochs (lr {r['optimizer']['lr']:g}, batch {r['batch_size']})"
    )
    t.add_column("quantity")
    for k in runs:
        t.add_column(k, justify="right")
    rows = [
        ("initial test accuracy", lambda x: pct(x["initial"]["test"]["accuracy"])),
        ("final test accuracy", lambda x: pct(x["final"]["test"]["accuracy"])),
        ("gain", lambda x: f"{100 * x['gain']:+.2f} pts"),
        (
            "initial / final validation",
            lambda x: f"{pct(x['initial']['val']['accuracy'])} / {pct(x['final']['val']['accuracy'])}",
        ),
        ("best validation (epoch)", lambda x: f"{pct(x['best_val_accuracy'])} ({x['best_val_epoch']})"),
        ("final train loss", lambda x: f"{x['curve'][-1]['loss']:.4f}"),
        ("wall time", lambda x: f"{x['wall_time_s']:.1f} s"),
    ]
    for name, cell in rows:
        t.add_row(name, *(cell(r[k]) for k in runs))
    out = stdout()
    out.print(t)
    sp = r["sparsity"]
    out.print(
        f"sparsity {pct(sp['achieved'])} ({sp['kept']} / {sp['total']} kept), unchanged: "
        f"{sp['masked_nonzero_after']} masked weights nonzero after training, on {r['device']}."
    )
    if "out" in r:
        out.print(f"trained weights -> {r['out']['path']} ({r['out']['file_bytes']} bytes)")
    if r.get("plot"):
        out.print(f"curves -> {r['plot']}")


def export_table(r: ExportResult) -> None:
    """`ticket export`: the file written and its size beside the dense float32 checkpoint (per layer for csr)."""
    t = Table(title=f"{r.format} export  ->  {r.out}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    t.add_row("file size", f"{r.file_bytes:,} bytes")
    t.add_row("dense float32 checkpoint", f"{r.dense_float32_bytes:,} bytes")
    t.add_row("size / dense", f"{r.ratio:.3f}")
    t.add_row("ticket file", f"{r.ticket_bytes:,} bytes")
    t.add_row("kept / total masked entries", f"{r.kept:,} / {r.total:,} ({pct(r.density)})")
    out = stdout()
    out.print(t)
    if r.layers:
        lt = Table(title="csr per layer")
        lt.add_column("parameter")
        lt.add_column("shape")
        lt.add_column("nnz", justify="right")
        lt.add_column("csr bytes", justify="right")
        lt.add_column("dense bytes", justify="right")
        for v in r.layers:
            lt.add_row(v.name, "x".join(map(str, v.shape)), f"{v.nnz:,}", f"{v.csr_bytes:,}", f"{v.dense_bytes:,}")
        out.print(lt)


def list_table(r: ListResult) -> None:
    """`ticket list`: one row per name, with its description."""
    table = Table(title=f"{r.kind} ({len(r.entries)})")
    table.add_column("name", no_wrap=True)
    table.add_column("description")
    for item in r.entries:
        table.add_row(item.name, item.description)
    stdout().print(table)


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
