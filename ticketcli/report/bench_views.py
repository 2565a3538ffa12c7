"""`ticket bench`'s tables and plot: per ticket, the forms (agreement, file, load time, memory) and their timings
at each batch size, the forms that cannot run here with the reason, and the verdict; for several tickets one row
each (the fastest form and its speed-up at each batch size). The plot: latency against batch size per form."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING

from ticketcli.report.console import pct, stdout
from ticketcli.report.plots import png_bytes, pyplot, run_title
from ticketcli.report.tables import titled

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ticketcli.bench.result import BenchResult, Pick, TicketBench

MEMORY = {
    "tensors": "memory: the bytes of the form's own tensors (weights, sparse values and indices; ONNX: the model file)",
    "cuda-peak": "memory: torch.cuda's peak allocation while the form loads and runs the largest batch",
}


def seconds(s: float | None) -> str:
    """A duration with its unit, three significant figures: 12.3 us, 4.56 ms, 1.23 s."""
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def size(n: int | None) -> str:
    """Bytes as B, KiB, MiB or GiB, three significant figures."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def rate(per_s: float) -> str:
    """Examples per second, three significant figures (k, M)."""
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.3g}{unit}/s"
    return f"{per_s:.3g}/s"


def bench_tables(r: BenchResult) -> None:
    """`ticket bench`: one ticket's tables, or one row per ticket for several."""
    out = stdout()
    if len(r.tickets) > 1:
        folder_table(r)
    else:
        ticket_tables(r, r.tickets[0])
    timed = "the timing thread's CPU time" if r.clock == "thread" else "wall-clock time"
    out.print(
        f"on {r.device}, {r.threads} torch thread(s), {r.repeats} repeats of {timed}; {MEMORY[r.memory_measure]}."
    )


def ticket_tables(r: BenchResult, t: TicketBench) -> None:
    out = stdout()
    title = f"{t.ticket}: {t.model}" + ("" if t.sparsity is None else f", sparsity {pct(t.sparsity)}")
    lm = t.sequence_length is not None  # a language model: accuracy per character, and its bits per character
    columns = ("form", "max diff", "accuracy", *(("bits/char",) if lm else ()), "file", "load", "memory")
    forms = titled(title, *columns)
    for f in t.forms:
        if not f.available or f.agreement is None:
            continue
        a = f.agreement
        diff = f"{a.max_abs_diff:.1e}" + ("" if a.agrees else " FAIL")
        bits = ("-" if a.bits_per_char is None else f"{a.bits_per_char:.4f}",) if lm else ()
        forms.add_row(f.name, diff, pct(a.accuracy), *bits, size(f.file_bytes), seconds(f.load_s), size(f.memory_bytes))
    out.print(forms)
    per = "batch" if not lm else f"batch of sequences of {t.sequence_length} characters"
    times = titled(f"latency per {per} (median, interquartile range)", ("form", "batch"), "latency", "spread")
    for name in ("throughput", "vs dense"):
        times.add_column(name, justify="right")
    for b in r.batches:
        for f in t.forms:
            x = f.timing(b)
            if x is not None:
                speedup = "-" if x.speedup is None else f"{x.speedup:.2f}x"
                times.add_row(
                    f.name, str(b), seconds(x.median_s), seconds(x.q3_s - x.q1_s), rate(x.throughput), speedup
                )
    out.print(times)
    for f in t.forms:  # whole lines below the tables, never folded into a narrow column
        if f.available and f.detail:
            out.print(f"{f.name}: {f.detail}")
        if not f.available:
            out.print(f"{f.name}: not available: {f.reason}")
        elif f.reason is not None and f.agreement is not None:
            a = f.agreement
            out.print(
                f"{f.name}: {f.reason} (largest difference {a.max_abs_diff:.2e} against at most {a.tolerance:.2e}; "
                f"accuracy {pct(a.accuracy)} against {pct(a.reference_accuracy)})"
            )
    out.print(t.verdict_line())


def cell(p: Pick | None) -> str:
    if p is None:
        return "-"
    if p.recommended == "dense" or p.speedup is None:
        return p.recommended
    return f"{p.recommended} {p.speedup:.2f}x"


def folder_table(r: BenchResult) -> None:
    """One row per ticket: its sparsity and the recommended form (with its speed-up over dense) at each batch."""
    parents = {str(PurePath(t.ticket).parent) for t in r.tickets}
    names = [PurePath(t.ticket).name if len(parents) == 1 else t.ticket for t in r.tickets]
    table = titled(f"{len(r.tickets)} tickets: the recommended form per batch size", "ticket", "sparsity")
    for b in r.batches:
        table.add_column(f"batch {b}", justify="right")
    for t, name in zip(r.tickets, names):
        picks = {p.batch: p for p in t.verdict}
        table.add_row(name, pct(t.sparsity) if t.error is None else "ERROR", *(cell(picks.get(b)) for b in r.batches))
    out = stdout()
    out.print(table)
    for t in r.tickets:
        if t.error is not None:
            out.print(f"error: {t.ticket}: {t.error}")


def bench_plot(r: BenchResult) -> bytes:
    """bench_figure as PNG bytes."""
    return png_bytes(bench_figure(r), dpi=110)


def bench_figure(r: BenchResult) -> Figure:
    """Median latency against batch size, one line per form (and ticket), both axes logarithmic, the spread as
    error bars."""
    plt = pyplot()
    fig: Figure
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in r.tickets:
        for f in t.forms:
            if not f.timings:
                continue
            label = f.name if len(r.tickets) == 1 else f"{PurePath(t.ticket).name}: {f.name}"
            xs = [x.batch for x in f.timings]
            ms = [1e3 * x.median_s for x in f.timings]
            err = [[1e3 * (x.median_s - x.q1_s) for x in f.timings], [1e3 * (x.q3_s - x.median_s) for x in f.timings]]
            ax.errorbar(xs, ms, yerr=err, marker="o", markersize=3, capsize=2, label=label)
    lm = any(t.sequence_length is not None for t in r.tickets)
    xlabel = "batch size (sequences, for a language model)" if lm else "batch size"
    ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="latency per forward pass (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    model = r.tickets[0].model if len(r.tickets) == 1 else f"{len(r.tickets)} tickets"
    fig.suptitle(f"bench: {run_title(model, r.device, f'{r.threads} thread(s)')}")
    fig.tight_layout()
    return fig
