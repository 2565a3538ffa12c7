"""Human-readable results on stdout: one table (or a few) per command, from the same dict --json prints."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from rich.box import SIMPLE_HEAD
from rich.table import Table

from ticketcli.report.aggregate_tables import aggregate_csv, aggregate_table
from ticketcli.report.console import method_name, pct, results, stdout
from ticketcli.report.values import (
    INTEGRITY_NOTES,
    MASK_ROWS,
    common_folder,
    csv_cell,
    method_text,
    readable,
    sparsity_note,
    structure_text,
)

if TYPE_CHECKING:  # the results' classes, for the annotations only: inspect's table must not import torch
    from ticketcli.export.run import ExportResult
    from ticketcli.runs.evaluate import EvaluateResult
    from ticketcli.runs.folder import InspectFolderResult
    from ticketcli.runs.inspect import InspectResult
    from ticketcli.runs.parts import LayerCount
    from ticketcli.runs.summary import ExtractionResult
    from ticketcli.settings.listing import ListResult


def titled(title: str, left: str | tuple[str, ...], *right: str) -> Table:
    """A table under `title`: its `left` column(s) (names, text), then its `right`-aligned ones (numbers)."""
    t = Table(title=title)
    for name in (left,) if isinstance(left, str) else left:
        t.add_column(name)
    for name in right:
        t.add_column(name, justify="right")
    return t


def extract_table(s: ExtractionResult) -> None:
    """`ticket extract`: accuracies, requested and achieved sparsity, then the per-layer table."""
    out = stdout()
    m, sp = s.metrics, s.sparsity
    t = titled(f"{method_name(s.method)} ticket  ->  {s.ticket} ({s.file_bytes} bytes)", "quantity", "value")
    t.add_row("test accuracy", pct(m.test.accuracy))
    t.add_row("validation accuracy", pct(m.val.accuracy))
    if m.test.bits_per_char is not None and m.val.bits_per_char is not None:  # a language model's ticket
        for split, sm in (("test", m.test), ("validation", m.val)):
            t.add_row(f"{split} bits per character", f"{sm.bits_per_char:.4f} (perplexity {sm.perplexity:.2f})")
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
        again = f", selected again at {r['reselected_density']:.4f}" if "reselected_density" in r else ""
        t.add_row(
            f"round {r['round']}",
            f"aug density {r['aug_density']:.4f}{again} -> sparsity {pct(r['achieved_sparsity'])}",
        )
    t.add_row("model / seed", f"{s.model} / {s.seed}")
    d = s.data
    t.add_row("data", f"{d['dataset']} ({d['n_extract']}/{d['n_val']}/{d['n_test']})")
    t.add_row("wall time", f"{m.wall_time_s:.1f} s on {m.device}")
    out.print(t)
    out.print(layer_table(sp.layers))
    note = sparsity_note(s)
    if note is not None:
        out.print(note)


def layer_table(layers: Sequence[LayerCount]) -> Table:
    """Kept / total and achieved sparsity per masked parameter (with the auxiliary share when there is one)."""
    t = titled("per layer", "parameter", "kept / total", "achieved sparsity")
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
    title = f"{r.ticket}: {method_name(r.method)}{structure_text(r.method)} on {r.model}, seed {r.seed}"
    t = titled(title, "split", "accuracy", "loss")
    lm = r.test.bits_per_char is not None  # a language model's ticket: loss in nats, bits per character, perplexity
    if lm:
        t.add_column("bits/char", justify="right")
        t.add_column("perplexity", justify="right")
    t.add_column("stored accuracy", justify="right")
    for name, sm, stored in (("test", r.test, r.stored.test_accuracy), ("validation", r.val, r.stored.val_accuracy)):
        lm_cells = [f"{sm.bits_per_char:.4f}", f"{sm.perplexity:.2f}"] if lm else []
        t.add_row(name, pct(sm.accuracy), f"{sm.loss:.4f}", *lm_cells, pct(stored))
    out = stdout()
    out.print(t)
    verdict = "reproduces the stored accuracy exactly" if r.reproduced else "differs from the stored accuracy"
    out.print(f"achieved sparsity {pct(r.achieved_sparsity)}; on {r.device} the ticket {verdict}.")
    if r.gate is not None:
        g = r.gate
        asked = [f"test accuracy >= {g.min_accuracy}"] if g.min_accuracy is not None else []
        if g.max_drop is not None and g.drop is not None:
            asked.append(f"drop from the stored {pct(g.stored_accuracy)} <= {g.max_drop} (drop {100 * g.drop:.2f} pts)")
        if g.max_bits_per_char is not None:
            asked.append(f"test bits per character <= {g.max_bits_per_char}")
        out.print(f"gate: {'; '.join(asked)}: {'passed' if g.passed else 'FAILED'}")


def inspect_table(r: InspectResult) -> None:
    """`ticket inspect`: the metadata, then one row per mask (at most MASK_ROWS)."""
    t = titled(f"{r.ticket} ({r.file_bytes} bytes; packed masks {r.packed_mask_bytes} bytes)", ("field", "value"))
    tk = r.record
    t.add_row("model", tk.model.spec)
    init = tk.init
    if init.recorded("k"):
        t.add_row("init", f"{readable(init.scheme)} (k={readable(init.k)}, seed {readable(init.seed)})")
    else:  # --init module: the factory's own weights, drawn under its fixed seed; no k shaped them
        factory = readable(init.factory_seed)
        t.add_row("init", f"{readable(init.scheme)} (factory seed {factory}, seed {readable(init.seed)})")
    t.add_row("weights sha256", tk.weights_sha256)
    if tk.checkpoint:
        digest = tk.checkpoint.sha256 or "not recorded"
        t.add_row("checkpoint", f"{readable(tk.checkpoint.path)} (sha256 {digest})")
    method = method_text(tk.method)
    if tk.method.name == "grasp" and not tk.method.recorded("grasp_direction"):
        method += " (written before grasp had two readings: paper reading, separate data)"
    t.add_row("method", method)
    d = tk.data
    t.add_row(
        "data",
        f"{readable(d.dataset)}: {readable(d.n_extract)} extraction / {readable(d.n_val)} validation / "
        f"{readable(d.n_test if d.recorded('n_test') else '?')} test, split seed {readable(d.split_seed)}",
    )
    t.add_row("sparsity", f"requested {pct(tk.sparsity.requested)}, achieved {pct(1 - r.density)}")
    m = tk.metrics
    if m.recorded("test") or m.recorded("val"):  # each split is optional (a hand-made or foreign ticket may lack one)
        device = "-" if m.device is None else m.device
        t.add_row(
            "accuracy at extraction",
            f"test {pct(m.accuracy('test'))}, val {pct(m.accuracy('val'))} on {device}",
        )
    t.add_row("created by", readable(tk.created_by.to_json()))
    t.add_row("masks integrity", INTEGRITY_NOTES.get(str(tk.integrity), str(tk.integrity)))
    out = stdout()
    out.print(t)
    lt = titled("masks", ("parameter", "shape"), "kept / total", "density")
    shown = r.masks[:MASK_ROWS]
    for v in shown:
        lt.add_row(v.name, "x".join(map(str, v.shape)), f"{v.kept} / {v.total}", pct(v.density))
    out.print(lt)
    if len(r.masks) > len(shown):
        out.print(f"... and {len(r.masks) - len(shown)} more masks (--json lists every one)")


def inspect_folder_table(r: InspectFolderResult) -> None:
    """`ticket inspect DIR`: one row per ticket (what it is, what it stored, whether it is intact), then a count;
    with --aggregate, one row per group of seeds instead of the tickets."""
    if r.aggregate is not None:
        aggregate_table(r.aggregate, "stored")
    else:
        _inspect_rows(r)
    out = stdout()
    for row in r.tickets:  # the reader's one line for each file it refused, below the table: whole, never folded
        if row.error is not None:
            out.print(f"invalid: {row.error}")
    bad = len(r.failed)
    out.print(
        f"{len(r.tickets) - bad} of {len(r.tickets)} tickets intact" + (f", {bad} failed validation" if bad else "")
    )


def _inspect_rows(r: InspectFolderResult) -> None:
    folder, names = common_folder([row.ticket for row in r.tickets])
    where = f" in {folder}" if folder else ""
    lm = any(row.test_bits_per_char is not None for row in r.tickets)  # language models' tickets: bits/char too
    # no vertical rules: at 80 columns the names need the room, and a row stays one ticket
    t = Table(
        title=f"{len(r.tickets)} tickets{where}: sparsity asked and achieved, stored test accuracy"
        + (" and bits per character" if lm else ""),
        box=SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        show_edge=False,
    )
    for name, justify, width in FOLDER_COLUMNS[:7] + ((("bits/char", "right", 9),) if lm else ()) + FOLDER_COLUMNS[7:]:
        t.add_column(name, justify=justify, overflow="fold", min_width=width)
    for row, name in zip(r.tickets, names):
        bits = row.test_bits_per_char
        t.add_row(
            name,
            readable(row.method),
            readable(row.model),
            readable(row.seed),
            pct(row.requested_sparsity),
            pct(row.achieved_sparsity),
            pct(row.test_accuracy),
            *(("-" if bits is None else f"{bits:.4f}",) if lm else ()),
            readable(row.file_bytes),
            row.integrity,
        )
    stdout().print(t)


FOLDER_COLUMNS: tuple[tuple[str, Literal["left", "right"], int], ...] = (  # header, justify, min width
    ("ticket", "left", 8),
    ("method", "left", 6),
    ("model", "left", 6),
    ("seed", "right", 4),
    ("asked", "right", 6),  # requested sparsity
    ("achieved", "right", 8),  # achieved sparsity, counted from the masks
    ("test", "right", 6),  # stored test accuracy
    ("bytes", "right", 5),
    ("integrity", "left", 9),
)


CSV_COLUMNS: tuple[str, ...] = ("ticket", "method", "model", "seed", "requested_sparsity", "achieved_sparsity")
CSV_COLUMNS += ("test_accuracy", "val_accuracy", "file_bytes", "integrity", "error", "masks_sha256")
CSV_LM_COLUMNS = ("test_bits_per_char", "val_bits_per_char")  # only when a listed ticket is a language model's


def inspect_folder_csv(r: InspectFolderResult) -> None:
    """`ticket inspect DIR --csv`: the tickets (inspect_rows_csv), or with --aggregate their groups over seeds."""
    if r.aggregate is not None:
        aggregate_csv(r.aggregate)
    else:
        inspect_rows_csv(r)


def inspect_rows_csv(r: InspectFolderResult) -> None:
    """`ticket inspect DIR --csv`: a header line, then one line per ticket, quoted by the csv module wherever a value
    needs it (commas, quotes); numbers at full precision, empty cells for what a refused file lacks, the method and
    integrity from their fixed vocabularies, and text from files and paths shown literally (control characters
    escaped, as in every output of ticket) and never as a spreadsheet formula (values.csv_cell)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    lm = any(row.test_bits_per_char is not None for row in r.tickets)  # language models' tickets among them
    columns = (*CSV_COLUMNS, *CSV_LM_COLUMNS) if lm else CSV_COLUMNS
    writer.writerow(columns)
    for row in r.tickets:
        writer.writerow([csv_cell(c, getattr(row, c)) for c in columns])
    results().write(buffer.getvalue())


def export_table(r: ExportResult) -> None:
    """`ticket export`: the file written and its size beside the dense float32 checkpoint (per layer for csr)."""
    t = titled(f"{r.format} export  ->  {r.out}", "quantity", "value")
    t.add_row("file size", f"{r.file_bytes:,} bytes")
    t.add_row("dense float32 checkpoint", f"{r.dense_float32_bytes:,} bytes")
    t.add_row("size / dense", f"{r.ratio:.3f}")
    t.add_row("ticket file", f"{r.ticket_bytes:,} bytes")
    t.add_row("kept / total masked entries", f"{r.kept:,} / {r.total:,} ({pct(r.density)})")
    if r.layout is not None:  # sparse: how its sparse layers are stored (--layout)
        t.add_row("layout", r.layout)
    if r.onnx is not None:
        shape = ", ".join(map(str, r.onnx.input_shape))
        t.add_row("input", f"{r.onnx.input} ({shape}) {r.onnx.input_dtype}")
        t.add_row("output", f"{r.onnx.output} ({', '.join(map(str, r.onnx.output_shape))})")
        t.add_row("onnxruntime max |logit difference|", f"{r.onnx.max_abs_diff:.2e}")
    out = stdout()
    out.print(t)
    if r.layers:
        lt = titled("csr per layer", ("parameter", "shape"), "nnz", "csr bytes", "dense bytes")
        for v in r.layers:
            lt.add_row(v.name, "x".join(map(str, v.shape)), f"{v.nnz:,}", f"{v.csr_bytes:,}", f"{v.dense_bytes:,}")
        out.print(lt)


def list_table(r: ListResult) -> None:
    """`ticket list`: one row per name, with its description (settings: also the default, range and readers)."""
    settings = r.kind == "settings"
    title = f"{r.kind} ({len(r.entries)})" + (": flags, config keys and tc.extract keywords" if settings else "")
    table = Table(title=title)
    columns = ("name", "default", "range", "read by", "description") if settings else ("name", "description")
    for column in columns:
        table.add_column(column, no_wrap=column == "name", overflow="fold")
    for item in r.entries:
        if settings:
            readers = ", ".join(item.methods) or "every method"
            table.add_row(item.name, item.default, item.range, readers, item.description)
        else:
            table.add_row(item.name, item.description)
    stdout().print(table)
