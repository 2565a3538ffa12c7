"""The Python API speaks in keywords: every call that takes settings refuses a keyword it does not take with the
closest one (the command line's spellings, `--epochs`, `n-extract`, `dataset`, mapped to theirs), and every bad
value of every setting is refused naming the keyword (`epochs=`), never the flag (`--epochs`)."""

from __future__ import annotations

import inspect
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ticketcli as tc
from ticketcli.api.extract import option_keywords
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import option_flag

MODEL = "mlp:64-16-10"
FLAG = re.compile(r"(?<![\w-])--[a-z]")


def named(fn: Callable[..., Any]) -> set[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds} - {"self"}


def calls(ticket: Path) -> dict[str, tuple[Callable[..., Any], set[str]]]:
    """Every API call that takes settings keywords: how to call it, and the keywords it takes."""
    t = tc.load(ticket)
    out: dict[str, tuple[Callable[..., Any], set[str]]] = {
        "extract": (lambda **kw: tc.extract(MODEL, progress=False, **kw), named(tc.extract) | option_keywords())
    }
    for m in ("evaluate", "build", "splits"):
        out[f"Ticket.{m}"] = (getattr(t, m), named(getattr(tc.Ticket, m)))
    out["Ticket.apply"] = (lambda **kw: t.apply(None, **kw), named(tc.Ticket.apply))  # refused before the module
    return out


def refusal(call: Callable[..., Any], **kw: Any) -> tc.UsageError:
    with pytest.raises(tc.UsageError) as caught:
        call(**kw)
    return caught.value


@pytest.mark.parametrize("name", ["extract", "Ticket.evaluate", "Ticket.build", "Ticket.splits", "Ticket.apply"])
def test_every_command_line_spelling_of_every_keyword_names_the_keyword(name, ticket):
    call, keywords = calls(ticket)[name]
    assert keywords, name
    for key in sorted(keywords):
        for spelled in {option_flag(key), option_flag(key)[2:], key.upper()} - {key}:
            e = refusal(call, **{spelled: 1})
            assert str(e) == f"unknown keyword {spelled!r} for {name}()", str(e)
            if spelled != key.upper():  # an exact spelling of the keyword; the upper case is merely close
                assert e.hint is not None and e.hint.startswith(f"did you mean {key}=? keywords: "), (spelled, e.hint)


@pytest.mark.parametrize("name", ["extract", "Ticket.evaluate", "Ticket.build", "Ticket.splits", "Ticket.apply"])
@pytest.mark.parametrize("typo, meant", [("dataset", "data"), ("datset", "data"), ("data-dir", "data_dir")])
def test_the_command_lines_names_and_typos_of_them_name_the_keyword(name, typo, meant, ticket):
    call, keywords = calls(ticket)[name]
    if meant not in keywords:
        pytest.skip(f"{name} takes no {meant}")
    e = refusal(call, **{typo: 1})
    assert e.hint is not None and e.hint.startswith(f"did you mean {meant}=?"), e.hint


@pytest.mark.parametrize("typo, meant", [("epochss", "epochs"), ("sparsty", "sparsity"), ("log-to", "log_to")])
def test_a_mistyped_extract_keyword_names_the_closest_one(typo, meant):
    e = refusal(lambda **kw: tc.extract(MODEL, progress=False, **kw), **{typo: 1})
    assert e.hint is not None and e.hint.startswith(f"did you mean {meant}=?"), e.hint


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception notes are shown from Python 3.11 on")
def test_an_uncaught_refusal_shows_its_hint_under_the_message():
    """A script that does not catch the error sees what the hint says in the traceback's last lines, as the command
    line's user sees it in the one error line."""
    e = refusal(lambda **kw: tc.extract(MODEL, progress=False, **kw), dataset="digits")
    shown = "".join(traceback.format_exception_only(type(e), e))
    assert shown.splitlines()[-1].startswith("hint: did you mean data=?"), shown


class Junk:
    """A value no setting takes (neither a number, a text, a switch nor a list)."""

    def __repr__(self) -> str:
        return "Junk()"


CHECKED = [s.name for s in RUN if s.config and s.range is not None and s.name in option_keywords() | {"sparsity"}]


@pytest.mark.parametrize("key", [*CHECKED, "epochs", "seed", "method", "log_to"])
def test_every_bad_setting_value_names_the_keyword_not_the_flag(key):
    e = refusal(lambda **kw: tc.extract(MODEL, progress=False, **kw), **{key: Junk()})
    text = f"{e} {e.hint or ''}"
    assert f"{key}=" in text and not FLAG.search(text), text


@pytest.mark.parametrize(
    "kw", [dict(betas="0.9"), dict(method="movement", movement_warmup=0.6, movement_cooldown=0.6), dict(epochs=-1)]
)
def test_errors_of_combinations_name_keywords_too(kw):
    e = refusal(lambda **k: tc.extract(MODEL, progress=False, **k), **kw)
    assert not FLAG.search(f"{e} {e.hint or ''}"), str(e)


def test_ticket_calls_name_their_keywords(ticket):
    for kw in (dict(threads=0), dict(device="tpu"), dict(weights=5)):
        e = refusal(tc.load(ticket).evaluate, **kw)
        assert not FLAG.search(f"{e} {e.hint or ''}"), str(e)
