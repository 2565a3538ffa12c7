"""Help for people: every command answers -h and --help, extract's 50 options come in named panels, flags show no
`<bool>` type, text in square brackets survives Rich's markup, shell completion is on, and `ticket list` prints
what --method, --model, --dataset and --init take."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.methods.registry import METHODS
from ticketcli.settings import listing
from ticketcli.settings.setting import Panel

runner = CliRunner()
WIDE = {"COLUMNS": "200"}  # one option per line: assertions on text do not depend on wrapping
COMMANDS = typer.main.get_command(app).commands
EXTRACT_PANELS = ("Method", "Variants", "Model and init", "Data", "Training", "Output", "Scale-out")


def help_of(*args: str) -> str:
    r = runner.invoke(app, [*args], env=WIDE)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_every_command_answers_h_and_help(command, flag):
    out = help_of(*([command] if command else []), flag)
    assert "Usage:" in out and "-h" in out and "Traceback" not in out


def test_extract_groups_its_options_in_panels():
    out = help_of("extract", "-h")
    for title in EXTRACT_PANELS:
        assert f"─ {title} ─" in out, title


@pytest.mark.parametrize("command", ["extract", "sweep-k", "train-weak", "drift"])
def test_every_option_of_the_big_commands_has_a_panel(command):
    loose = [p.name for p in COMMANDS[command].params if p.param_type_name == "option" and not p.rich_help_panel]
    assert not loose, f"`ticket {command}` options without a rich_help_panel: {loose}"


def test_extract_panels_are_the_named_ones():
    used = {p.rich_help_panel for p in COMMANDS["extract"].params if p.param_type_name == "option"}
    assert used == set(EXTRACT_PANELS)
    assert {
        getattr(Panel, k) for k in ("METHOD", "VARIANTS", "MODEL", "DATA", "TRAINING", "OUTPUT", "SCALE_OUT")
    } == used


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_flags_show_no_bool_type(command):
    out = help_of(*([command] if command else []), "--help")
    assert "<bool>" not in out and "BOOLEAN" not in out
    if command == "extract":  # the flags are still listed, with their help
        assert "--frozen-aux" in out and "--no-bias" in out and "--json" in out


def test_square_brackets_survive_help_formatting():
    assert "pip install 'ticketcli[ray]'" in help_of("sweep-k", "--help")


def test_shell_completion_is_offered_and_prints_a_script(monkeypatch):
    out = help_of("--help")
    assert "--install-completion" in out and "--show-completion" in out
    # --show-completion prints the script for the shell it detects from its parent processes: bash here
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    r = runner.invoke(app, ["--show-completion"], env=WIDE)
    assert r.exit_code == 0 and "complete" in r.stdout and "_COMPLETE" in r.stdout, r.output


def test_completion_proposes_methods():
    """What the shell gets for `ticket extract --method a<TAB>`: the registry's names starting with a."""
    env = {"_TICKET_COMPLETE": "complete_bash", "COMP_WORDS": "ticket extract --method a", "COMP_CWORD": "3"}
    r = runner.invoke(app, [], env=env, prog_name="ticket")
    assert r.exit_code == 0, r.output
    assert set(r.stdout.split()) == {n for n in METHODS.names() if n.startswith("a")}


@pytest.mark.parametrize("kind", listing.KINDS)
def test_list_json_is_the_registry(kind):
    r = runner.invoke(app, ["list", kind, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"schema", "kind", "items"} and doc["schema"] == "ticket.list/1" and doc["kind"] == kind
    assert doc["items"] == [{"name": n, "description": d} for n, d in listing.describe(kind).items()]
    assert all(set(item) == {"name", "description"} for item in doc["items"])


def test_list_table_names_every_method():
    out = runner.invoke(app, ["list", "methods"], env=WIDE).stdout
    for name, text in listing.describe("methods").items():
        assert name in out and text[:30] in out


def test_list_of_an_unknown_kind_is_one_error_line():
    r = runner.invoke(app, ["list", "optimizers"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1
