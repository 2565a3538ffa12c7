"""How a ticket's values read in a table: any metadata value as people read it (never a Python repr), a method
record on one line, the integrity verdicts in words, and how many masks a table lists. inspect's and compare's
tables share them; torch-free."""

from __future__ import annotations

from ticketcli.ticketfile.record import MethodRecord

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
