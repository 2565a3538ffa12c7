"""`ticket compare`'s tables: two tickets side by side with their overlap per layer, or for more tickets one row
each and the pairwise matrices (Jaccard over every masked weight, same init or not)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

from ticketcli.report.console import method_name, pct, stdout
from ticketcli.report.values import MASK_ROWS, readable

if TYPE_CHECKING:  # for the annotations only: compare's tables must not import torch
    from ticketcli.runs.compare import CompareResult, Difference, Overlap, PairComparison


def compare_table(r: CompareResult) -> None:
    """`ticket compare`: one pair in full (two tickets), or the tickets and their pairwise matrices (more); with
    --aggregate, the tickets over their seeds and the same-seed pairs' overlap over seeds."""
    if r.aggregate is not None:
        from ticketcli.report.aggregate_tables import aggregate_table, pairs_table

        aggregate_table(r.aggregate, "stored")
        pairs_table(r.aggregate_pairs or ())
    elif len(r.tickets) == 2:
        _two(r, r.pairs[0])
    else:
        _many(r)


def points(x: float | None) -> str:
    """A change of a fraction in percentage points, signed ("-" when either side is missing)."""
    return "-" if x is None else f"{100 * x:+.2f} pp"


def bits(x: float | None) -> str:
    """Bits per character, as evaluate prints them ("-" for a ticket without: an image model's)."""
    return "-" if x is None else f"{x:.4f}"


def signed(x: float | None) -> str:
    """A change of bits per character, signed ("-" when either side is missing)."""
    return "-" if x is None else f"{x:+.4f}"


def share(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def differences_text(diffs: tuple[Difference, ...]) -> str:
    """`weights_sha256 5e0203c3...(64 digits) vs 796ebe5b...; init.seed 0 vs 1`: every value whole, a fingerprint
    included (a line wraps in the terminal, it is never cut)."""
    return "; ".join(f"{d.field} {readable(d.a)} vs {readable(d.b)}" for d in diffs)


def run_text(run: dict[str, Any]) -> str:
    """Where and how a ticket was extracted, as it records it: `cpu, 2 processes, bf16`."""
    parts = [str(run.get("device", "-"))]
    if "processes" in run:
        parts.append(f"{run['processes']} process{'es' if run['processes'] != 1 else ''}")
    if "precision" in run:
        parts.append(str(run["precision"]))
    return ", ".join(parts)


def init_text(p: PairComparison) -> str:
    if p.same_init:
        return "same init (weights fingerprint, model and init settings agree)"
    return f"differs: {differences_text(p.init_differences)}"


MATRIX_CELL = 9  # columns a matrix cell takes ("0.0672" and its borders)
NAME_WIDTH = 32  # a parameter name up to this long keeps its line whole; the numbers' headers wrap instead


def _columns(t: Table, *names: str, right_from: int = 1, first_width: int | None = None) -> None:
    """Columns that fold a long value onto more lines instead of cutting it (nothing a reader needs is lost at 80
    columns); the columns from right_from on are right-aligned numbers, the first at least first_width wide."""
    for i, name in enumerate(names):
        width = first_width if i == 0 else None
        t.add_column(name, overflow="fold", justify="right" if i >= right_from else "left", min_width=width)


def _overlap_row(t: Table, name: str, o: Overlap) -> None:
    counts, shares = (o.total, o.kept_a, o.kept_b, o.both), (o.jaccard, o.a_kept_in_b, o.b_kept_in_a)
    t.add_row(name, *map(str, counts), *map(share, shares))


def _two(r: CompareResult, p: PairComparison) -> None:
    a, b = r.tickets
    out = stdout()
    out.print(f"A: {a.ticket}")
    out.print(f"B: {b.ticket}")
    t = Table()
    _columns(t, "field", "A", "B", "change B - A", right_from=3)
    t.add_row("model", a.model, b.model, "")
    t.add_row("seed", str(a.seed), str(b.seed), "")
    t.add_row("method", method_name(a.method), method_name(b.method), "")
    for split in ("test", "val"):
        t.add_row(
            f"{split} accuracy (stored)",
            pct(a.accuracy(split)),
            pct(b.accuracy(split)),
            points(p.change["accuracy"][split]),
        )
    for split in ("test", "val") if "bits_per_char" in p.change else ():  # language models' tickets
        t.add_row(
            f"{split} bits/char (stored)",
            bits(a.bits_per_char(split)),
            bits(b.bits_per_char(split)),
            signed(p.change["bits_per_char"][split]),
        )
    t.add_row("requested sparsity", pct(a.requested), pct(b.requested), points(p.change["sparsity"]["requested"]))
    t.add_row("achieved sparsity", pct(a.achieved), pct(b.achieved), points(p.change["sparsity"]["achieved"]))
    t.add_row("run", run_text(a.run), run_text(b.run), "")
    t.add_row("masks integrity", a.integrity, b.integrity, "")
    out.print(t)
    # the fingerprints whole, each on its own row: two beside each other would not fit 80 columns
    ht = Table(title="weights sha256 (the initial weights' fingerprint)")
    _columns(ht, "ticket", "sha256", right_from=2)
    if a.weights_sha256 == b.weights_sha256:
        ht.add_row("A and B", readable(a.weights_sha256))
    else:
        ht.add_row("A", readable(a.weights_sha256))
        ht.add_row("B", readable(b.weights_sha256))
    out.print(ht)
    out.print(f"init: {init_text(p)}")
    if p.data_differences:
        out.print(f"data: differs: {differences_text(p.data_differences)}")
    lt = Table(
        title="mask overlap (both: kept by A and B; Jaccard: both / kept by either; "
        "A in B: the share of A's kept weights that B keeps too)"
    )
    longest = max(len(la.name) for la in p.layers)
    _columns(
        lt,
        "parameter",
        "entries",
        "kept A",
        "kept B",
        "both",
        "Jaccard",
        "A in B",
        "B in A",
        first_width=min(longest, NAME_WIDTH),
    )
    for la in p.layers[:MASK_ROWS]:
        _overlap_row(lt, la.name, la.overlap)
    _overlap_row(lt, "all", p.overlap)
    out.print(lt)
    if len(p.layers) > MASK_ROWS:
        out.print(f"... and {len(p.layers) - MASK_ROWS} more masks (--json lists every one)")


def _many(r: CompareResult) -> None:
    out = stdout()
    t = Table(title="tickets")
    lm = any(tk.language_model for tk in r.tickets)  # language models' tickets: their test bits per character too
    lm_column = ("test bits/char",) if lm else ()
    _columns(
        t,
        "#",
        "ticket",
        "model",
        "seed",
        "method",
        "test acc.",
        *lm_column,
        "achieved sparsity",
        "integrity",
        right_from=5,
    )
    for i, tk in enumerate(r.tickets):
        t.add_row(
            str(i),
            tk.ticket,
            tk.model,
            str(tk.seed),
            method_name(tk.method),
            pct(tk.accuracy("test")),
            *((bits(tk.bits_per_char("test")),) if lm else ()),
            pct(tk.achieved),
            tk.integrity,
        )
    out.print(t)
    n = len(r.tickets)
    if r.reference is not None or n * MATRIX_CELL + 6 > out.width:  # one row per pair (a wide matrix would fold)
        pt = Table(title="pairs")
        _columns(pt, "A", "B", "Jaccard", "same init", right_from=2)
        for p in r.pairs:
            pt.add_row(str(p.a), str(p.b), share(p.overlap.jaccard), "yes" if p.same_init else "no")
        out.print(pt)
    else:
        jaccard = [[share(x) for x in row] for row in r.jaccard_matrix()]
        same = [["yes" if x else "no" for x in row] for row in r.same_init_matrix()]
        for title, cells in (("Jaccard over all masked weights", jaccard), ("same init", same)):
            m = Table(title=title)
            _columns(m, "#", *map(str, range(n)))
            for i, row in enumerate(cells):
                m.add_row(str(i), *row)
            out.print(m)
    out.print("`ticket compare A B` shows one pair per layer; --json holds every pair with its layers")
