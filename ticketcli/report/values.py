"""How a ticket's values read in a table: any metadata value as people read it (never a Python repr), a method
record on one line, the integrity verdicts in words, and how many masks a table lists. inspect's and compare's
tables share them; the cells of `inspect DIR --csv`, safe to open in a spreadsheet; and the line that says why an
achieved sparsity is not the requested one; the folder several tickets share. Torch-free."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING

from ticketcli.methods.registry import METHODS
from ticketcli.report.console import literal, pct
from ticketcli.ticketfile.layout import INTEGRITY
from ticketcli.ticketfile.meta import HEX64
from ticketcli.ticketfile.record import MethodRecord

if TYPE_CHECKING:  # the annotation only: the values read no torch
    from ticketcli.runs.summary import ExtractionResult

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


def method_text(method: MethodRecord) -> str:
    """A ticket's method record on one line: `name=augmented, sparsity=0.9, betas=0.9,0.999, score_params=(trainable
    1, total 2)`; how the scores started is left out, and options that are not set."""
    parts = []
    for k, v in method.to_json().items():
        if k == "score_init" or v is None:
            continue
        parts.append(f"{k}=({readable(v)})" if isinstance(v, dict) else f"{k}={readable(v)}")
    return ", ".join(parts)


def structure_text(method: MethodRecord) -> str:
    """' (2:4)' or ' (4x4 blocks)' for a ticket whose record holds --structure or --block (as recorded), else ''."""
    structure, block = method.option("structure"), method.option("block")
    if structure is not None:
        return f" ({readable(structure)})"
    return "" if block is None else f" ({readable(block)} blocks)"


# A spreadsheet reads a cell beginning with one of these as a formula (OWASP's CSV injection list: = + - @, tab,
# carriage return), and some fold the full-width forms to them, so a text cell never begins with one unescaped.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
CSV_INTEGRITY = (*INTEGRITY, "invalid")  # the integrity column's whole vocabulary
UNKNOWN = "unknown"  # a vocabulary column's cell for a value outside its vocabulary
# every column of `inspect DIR --csv`, decided once: free text (neutralised), a number, or a fixed vocabulary
CSV_TEXT = ("ticket", "model", "error")
CSV_NUMBERS: tuple[str, ...] = ("seed", "requested_sparsity", "achieved_sparsity", "test_accuracy", "val_accuracy")
CSV_NUMBERS += ("file_bytes", "test_bits_per_char", "val_bits_per_char")  # the last two: a language model's tickets
CSV_VOCABULARY = ("method", "integrity", "masks_sha256")


def csv_text(value: object) -> str:
    """A free-text CSV cell (a path, a model spec, an error line): shown literally, with a leading ' where a
    spreadsheet would otherwise run it as a formula (OWASP's neutralisation; the csv module still quotes it)."""
    text = literal(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_number(value: object) -> str:
    """A numeric CSV cell, formatted here (full precision), so that only a number, never text, can begin with '-'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return ""  # absent (None), or not a number: nothing of it reaches the cell
    return repr(value) if isinstance(value, float) else str(value)


def csv_cell(column: str, value: object) -> str:
    """One cell of `inspect DIR --csv`: each column is a number, a fixed vocabulary or neutralised text; what a
    refused file lacks is empty."""
    if value is None:
        return ""
    if column == "method":  # a registered name; a crafted or future one is not passed on as text (--json has it)
        return value if isinstance(value, str) and value in METHODS.names() else UNKNOWN
    if column == "integrity":
        return value if isinstance(value, str) and value in CSV_INTEGRITY else UNKNOWN
    if column == "masks_sha256":
        return value if isinstance(value, str) and HEX64.fullmatch(value) else ""
    if column in CSV_TEXT:
        return csv_text(value)
    if column in CSV_NUMBERS:
        return csv_number(value)
    raise ValueError(f"CSV column {column!r} is none of text, number or vocabulary")  # a new column must choose


def sparsity_note(s: ExtractionResult) -> str | None:
    """One line saying why the achieved sparsity is not the requested one, when they differ by more than the
    method's tolerance (iterated: --iter-tolerance; the others: one entry per layer, the rounding of a keep
    count); None when they agree. docs/method.md explains each case."""
    sp, method = s.sparsity, s.method
    achieved, requested = pct(sp.achieved), pct(sp.requested)
    iterated = method.name == "iterated"
    tolerance = _number(method.option("iter_tolerance"), 0.02) if iterated else len(sp.layers) / max(sp.total, 1)
    if abs(sp.achieved - sp.requested) <= tolerance:
        return None
    head = f"achieved {achieved}, not the requested {requested}:"
    if iterated:
        rounds = len(sp.rounds or ())
        return (
            f"{head} iterated stopped after {rounds} round{'s' if rounds != 1 else ''}, farther from the request "
            f"than its tolerance of {100 * tolerance:.2f} points (--iter-tolerance, --max-rounds)"
        )
    if sp.aug_density is not None:  # augmented: the kept entries split between the weights and the auxiliary
        m = _number(method.option("aux_width"), 1.0)
        share = "-" if sp.aux_share is None else pct(sp.aux_share)
        keep = (1 + m) * sp.aug_density
        low, high = 1 - min(1.0, keep), 1 - max(0.0, keep - m)
        return (
            f"{head} augmented keeps (1 + {m:g}) x {sp.aug_density:.4f} = {pct(keep)} of each layer's count over its "
            f"weights and auxiliary scores, {share} of it on auxiliary ones (dropped), so its sparsity lies between "
            f"{pct(low)} and {pct(high)} (--aug-density)"
        )
    if sp.requested_layer_densities is not None:
        return f"{head} the per-layer densities (--layer-densities) set each layer's share, not the global one"
    return f"{head} more than one entry per layer apart (each layer keeps a whole number of entries)"


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def common_folder(tickets: Sequence[str]) -> tuple[str, list[str]]:
    """The folder every ticket is in and their file names, or ("", the paths) when they are in several."""
    parents = {str(PurePath(t).parent) for t in tickets}
    if len(parents) != 1:
        return "", list(tickets)
    return parents.pop(), [PurePath(t).name for t in tickets]
