"""Rich tables and progress on stderr for people; exactly one JSON document on stdout with --json."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


def stdout() -> Console:
    return Console(file=sys.stdout, soft_wrap=True)


def stderr() -> Console:
    return Console(file=sys.stderr, soft_wrap=True)


def print_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def error(message: str, hint: str | None = None) -> None:
    """One line on stderr."""
    text = f"error: {message}" + (f" (hint: {hint})" if hint else "")
    sys.stderr.write(text.replace("\n", " ") + "\n")


def warn(message: str) -> None:
    sys.stderr.write(f"warning: {message}\n")


@contextmanager
def epoch_progress(total: int, *, quiet: bool, label: str) -> Iterator:
    """A progress bar over epochs (loss, running accuracy, current achieved sparsity), shown from the first epoch
    on, so that errors before training (bad data, bad spec) are not preceded by an empty bar."""
    if quiet:
        yield None
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]}  acc {task.fields[acc]}  sparsity {task.fields[sparsity]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    bar = Progress(*columns, console=stderr(), transient=False)
    task = None

    def update(stats: dict) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task(label, total=total, loss="-", acc="-", sparsity="-")
        bar.update(task, completed=stats["epoch"], loss=f"{stats['loss']:.4f}",
                   acc=f"{stats['accuracy']:.2%}", sparsity=f"{stats['sparsity']:.2%}")

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
    t.add_row("requested sparsity", _pct(sp["requested"]))
    if "aug_density" in sp:
        t.add_row("augmented keep density", f"{sp['aug_density']:.4f}")
    t.add_row("achieved sparsity", _pct(sp["achieved"]))
    if "aux_share" in sp:
        t.add_row("kept augmented entries on auxiliary coords", _pct(sp["aux_share"]))
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
    t.add_row("data", f"{d['dataset']}: {d['n_extract']} extraction / {d['n_val']} validation / "
                      f"{d.get('n_test', '?')} test, split seed {d['split_seed']}")
    sp = r["sparsity"]
    t.add_row("sparsity", f"requested {_pct(sp.get('requested'))}, achieved {_pct(1 - r['density'])}")
    m = r["metrics"]
    if "test" in m:
        t.add_row("accuracy at extraction", f"test {_pct(m['test'].get('accuracy'))}, val {_pct(m['val'].get('accuracy'))}"
                                            f" on {m.get('device')}")
    t.add_row("created by", ", ".join(f"{k} {v}" for k, v in r["created_by"].items()))
    out = stdout()
    out.print(t)
    lt = Table(title="masks")
    lt.add_column("parameter")
    lt.add_column("shape")
    lt.add_column("kept / total", justify="right")
    lt.add_column("density", justify="right")
    for name, v in r["masks"].items():
        lt.add_row(name, "x".join(map(str, v["shape"])), f"{v['kept']} / {v['total']}", _pct(v["density"]))
    out.print(lt)


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
            lt.add_row(name, "x".join(map(str, v["shape"])), f"{v['nnz']:,}", f"{v['csr_bytes']:,}",
                       f"{v['dense_bytes']:,}")
        out.print(lt)
