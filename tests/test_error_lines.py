"""Click's own usage errors (a value outside the choices, a missing option or argument, an unknown option) end as
one readable `error:` line: Click lays its messages out over several lines with tab indentation ("Choose
from:\\n\\tmethods,\\n\\tmodels"), and that layout must become spaces, not escaped tabs (`\\x09methods`). The
commands and their choices come from the app, so every new option is covered."""

from __future__ import annotations

import re

import pytest
import typer

from ticketcli.cli.app import app
from ticketcli.cli.exits import click_line

GROUP = typer.main.get_command(app)
COMMANDS = GROUP.commands  # type: ignore[attr-defined]
ESCAPED = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}")


def choice_params() -> list[tuple[str, object]]:
    return [
        (name, p)
        for name, command in sorted(COMMANDS.items())
        for p in command.params
        if getattr(p, "type_descriptor", None) is not None and p.type_descriptor.is_choice
    ]


def required_params() -> list[tuple[str, object]]:
    return [(name, p) for name, command in sorted(COMMANDS.items()) for p in command.params if p.required]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        GROUP.main(args, prog_name="ticket")
    out = capsys.readouterr()
    return int(ended.value.code or 0), out.err


def assert_one_clean_line(err: str) -> None:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not ESCAPED.search(err), err  # no escaped layout (tabs, line breaks) left over from Click
    assert "\t" not in err and "  " not in lines[0], err


def test_there_are_choices_to_check():
    names = {f"{c} {p.name}" for c, p in choice_params()}  # type: ignore[attr-defined]
    assert {"list kind", "export format", "extract method"} <= names


@pytest.mark.parametrize(("command", "param"), choice_params(), ids=lambda x: getattr(x, "name", x))
def test_a_value_outside_the_choices_is_one_clean_line(command, param, capsys):
    flag = [] if param.param_type_name == "argument" else [param.opts[0]]
    other = [] if param.param_type_name == "argument" else ["x.safetensors"] if command == "export" else []
    code, err = run([command, *other, *flag, "no-such-choice"], capsys)
    assert code == 2
    assert_one_clean_line(err)
    choices = [str(c) for c in param.type_descriptor.choices]
    assert "no-such-choice" in err
    assert all(c in err for c in choices), err


@pytest.mark.parametrize(("command", "param"), required_params(), ids=lambda x: getattr(x, "name", x))
def test_a_missing_required_value_is_one_clean_line(command, param, capsys):
    code, err = run([command] if param.param_type_name == "argument" else [command, "x.safetensors"], capsys)
    assert code == 2
    assert_one_clean_line(err)
    descriptor = getattr(param, "type_descriptor", None)
    if descriptor is not None and descriptor.is_choice:  # the choices listed, comma-separated, on the same line
        assert "Choose from: " + ", ".join(str(c) for c in descriptor.choices) in err, err


def test_an_unknown_option_is_one_clean_line(capsys):
    code, err = run(["extract", "--sparsty", "0.5"], capsys)
    assert code == 2
    assert_one_clean_line(err)


def test_only_the_layout_is_folded_a_typed_value_stays_literal():
    assert click_line("Choose from:\n\tmethods,\n\tmodels") == "Choose from: methods, models"
    assert click_line("a  b\\tc") == "a  b\\tc"  # text within a line (a repr'd value) is left as it is
