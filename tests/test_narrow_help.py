"""Help in an 80-column terminal (a CI log, a split pane) loses nothing: every flag name and every choice value
appears whole (never cut into an ellipsis, never split mid-name), and no text ends in `…`. The flags and choices
come from the app, so a new option is covered."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from ticketcli.cli.app import app

runner = CliRunner()
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def help_at(width: int, *args: str) -> str:
    r = runner.invoke(app, [*args, "--help"], env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    return r.stdout


def whole(word: str, text: str) -> bool:
    """`word` appears with no letter, digit, '-' or '_' glued to either side (so `m ovement` does not count)."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_help_at_80_columns_cuts_nothing(command):
    out = help_at(80, *([command] if command else []))
    assert "…" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    if command is None:
        assert all(whole(name, out) for name in COMMANDS), out
        return
    for p in COMMANDS[command].params:
        if getattr(p, "hidden", False):
            continue
        for flag in [*p.opts, *p.secondary_opts]:
            if flag.startswith("-"):
                assert whole(flag, out), f"{flag} is not whole in:\n{out}"
        descriptor = getattr(p, "type_descriptor", None)
        if descriptor is not None and descriptor.is_choice:
            for choice in descriptor.choices:
                assert whole(str(choice), out), f"{p.name}'s choice {choice} is not whole in:\n{out}"


def test_a_long_choice_list_is_in_the_help_text_not_one_long_word():
    out = help_at(80, "extract")
    assert "augmented|edge-popup" not in out
    assert whole("signed-kaiming-constant", out) and whole("movement", out)
