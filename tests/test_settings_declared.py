"""An option is declared once (ticketcli/settings/): a throwaway Setting in a temporary table shows up, from that
declaration alone, everywhere an option must -- the command's flag and its help (with who reads it and its default),
the spec field it fills, the range check of a flag, of a config key and of an API keyword, the config file's keys,
the refusal for a method that does not read it and `ticket list settings`' row. The real tables are checked against
the same derivations: every method's `options` and every command's flags come from them."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.cli.declared import declared, given_settings
from ticketcli.drift.settings import DRIFT, DRIFT_FLAGS, FEATURES
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.report.tables import list_table
from ticketcli.settings.checks import build_spec
from ticketcli.settings.flags import (
    EVALUATE_FLAGS,
    EXPORT_FLAGS,
    EXTRACT_FLAGS,
    INSPECT_FLAGS,
    OUTPUTS,
    SWEEP_FLAGS,
    WEAK_FLAGS,
)
from ticketcli.settings.listing import ListResult
from ticketcli.settings.readers import check_method_options, method_options
from ticketcli.settings.resolve import check_keywords, checked, merge_settings
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.settings.sweep import OWN, SWEEP
from ticketcli.settings.track import TRACK
from ticketcli.settings.weak import WEAK
from ticketcli.specs.ranges import FLOAT
from ticketcli.specs.run import MethodSpec

runner = CliRunner()


@dataclass(frozen=True)
class ProbeSpec:
    """A spec with one field: the throwaway option's default lives here and nowhere else."""

    probe_rate: float = 0.25


PROBE = Setting(
    "probe_rate",
    "How often to probe (a throwaway option of this test).",
    Panel.VARIANTS,
    float,
    FLOAT(0, 1),
    (ProbeSpec, "probe_rate"),
    per_method=True,
)
TABLE = Table(RUN["method"], PROBE)


@pytest.fixture(autouse=True)
def probe_readers(monkeypatch):
    """edge-popup and snip read the throwaway option: their registry entries name it."""
    for name in ("edge-popup", "snip"):
        info = METHODS.get(name)
        monkeypatch.setitem(METHODS._items, name, replace(info, reads=(*info.reads, "probe_rate")))


def probe_app() -> typer.Typer:
    """A command built like extract: its settings from the table, merged with a config file, frozen into a spec."""
    probe = typer.Typer()

    @probe.command()
    @declared(TABLE)
    def run(config: Path | None = None, **given: Any) -> None:
        try:
            settings = merge_settings(given_settings(TABLE, given), config, TABLE)
            values = checked(TABLE, settings)
            method = MethodSpec(name=values["method"])
            check_method_options(method, settings.given, TABLE)
        except UsageError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        typer.echo(json.dumps({"spec": build_spec(ProbeSpec, TABLE, values).probe_rate}))

    @probe.command()
    def other() -> None:  # a second command, so that Typer keeps `run` as a subcommand
        pass

    return probe


def invoke(*args: str) -> Any:
    return runner.invoke(probe_app(), ["run", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_the_flag_and_its_help_come_from_the_declaration():
    out = invoke("--help").output
    assert "--probe-rate" in out
    assert "edge-popup, snip: How often to probe (a throwaway option of this test). Default: 0.25." in out
    assert "Variants" in out  # its panel


def test_the_default_is_the_spec_field_and_a_flag_fills_the_field():
    assert json.loads(invoke("--method", "snip").output)["spec"] == 0.25
    assert json.loads(invoke("--method", "snip", "--probe-rate", "0.5").output)["spec"] == 0.5


def test_the_range_is_checked_for_the_flag_and_the_config_key(tmp_path):
    r = invoke("--method", "snip", "--probe-rate", "1.5")
    assert r.exit_code == 2 and "--probe-rate must lie in [0, 1], got 1.5" in r.output
    cfg = tmp_path / "c.toml"
    cfg.write_text("probe-rate = 0.75\n")
    assert json.loads(invoke("--method", "snip", "--config", str(cfg)).output)["spec"] == 0.75
    cfg.write_text('probe_rate = "often"\n')
    r = invoke("--method", "snip", "--config", str(cfg))
    assert r.exit_code == 2 and "probe_rate must be a number" in r.output
    cfg.write_text("probe_rat = 0.5\n")
    r = invoke("--method", "snip", "--config", str(cfg))
    assert r.exit_code == 2 and "unknown key 'probe_rat'" in r.output


def test_a_method_that_does_not_read_it_refuses_it():
    r = invoke("--method", "augmented", "--probe-rate", "0.5")
    assert r.exit_code == 2 and "--probe-rate applies to edge-popup, snip only, not augmented" in r.output
    assert invoke("--method", "augmented").exit_code == 0  # its default is never refused


def test_it_is_an_api_keyword():
    check_keywords(TABLE, {"probe_rate"}, "probe")
    with pytest.raises(UsageError, match="unknown option 'probe_rat' for probe"):
        check_keywords(TABLE, {"probe_rat"}, "probe")


def test_it_has_a_row_in_the_settings_list():
    row = PROBE.list_item()
    assert row.flag == "--probe-rate" and row.default == "0.25" and row.range == "a number in [0, 1]"
    assert row.methods == ("edge-popup", "snip")
    console = Console(width=200, record=True)
    with patch("ticketcli.report.tables.stdout", lambda: console):
        list_table(ListResult("settings", (row,)))
    text = console.export_text()  # export_text clears the record
    assert "probe_rate" in text and "edge-popup, snip" in text and "a number in [0, 1]" in text


# ---- the real tables are these derivations ----------------------------------------------------------------------


def test_every_method_reads_what_the_declarations_say():
    for name in METHODS.names():
        assert method_options(name) == RUN.read_by(name), name
    readers = {n for s in RUN for n in s.methods}
    assert readers <= set(METHODS.names()), "a setting names a method that does not exist"


@pytest.mark.parametrize(
    "command,table",
    [
        ("extract", RUN),
        ("sweep-k", SWEEP),
        ("sweep-k", OWN),
        ("train-weak", WEAK),
        ("drift", DRIFT),
        ("drift", FEATURES),
        ("extract", EXTRACT_FLAGS),
        ("evaluate", EVALUATE_FLAGS),
        ("inspect", INSPECT_FLAGS),
        ("compare", OUTPUTS),
        ("list", OUTPUTS),
        ("export", EXPORT_FLAGS),
        ("train-weak", WEAK_FLAGS),
        ("sweep-k", SWEEP_FLAGS),
        ("drift", DRIFT_FLAGS),
    ],
)
def test_every_declared_setting_is_a_flag_of_its_command(command, table):
    params = {p.name: p for p in typer.main.get_command(app).commands[command].params}  # type: ignore[attr-defined]
    for s in table:
        assert s.name in params, s.name
        assert params[s.name].opts[0] == s.flag
        assert params[s.name].help == s.help_text()
        assert getattr(params[s.name], "rich_help_panel", None) == s.panel


def test_list_settings_lists_every_declaration():
    r = runner.invoke(app, ["list", "settings", "--json"])
    assert r.exit_code == 0
    items = json.loads(r.output)["items"]
    listed = RUN.plus(TRACK, EXTRACT_FLAGS.pick(*(n for n in EXTRACT_FLAGS.names() if n not in OUTPUTS)))
    listed = Table(*(s for s in listed if not s.hidden))
    assert [i["name"] for i in items] == listed.names()
    assert all(i == s.list_item().to_dict() for i, s in zip(items, listed))
    # every visible flag of extract but --json and --quiet, and each says whether it is also a config key
    params = typer.main.get_command(app).commands["extract"].params  # type: ignore[attr-defined]
    shown = {p.opts[0] for p in params if not getattr(p, "hidden", False)} - {"--json", "--quiet", "--help"}
    assert {i["flag"] for i in items} == shown
    assert {i["name"]: i["config"] for i in items}["out"] is False and {i["name"]: i["config"] for i in items}["lr"]


def test_a_flag_whose_python_default_differs_from_its_setting_is_refused():
    """A command's own parameter and its setting cannot disagree on the default: the declaration is the one place."""
    table = Table(Setting("out", "Where.", Panel.OUTPUT, Path, default=Path("a"), config=False))

    def command(out: Path = Path("b")) -> None:
        pass

    with pytest.raises(ValueError, match="command's out defaults to"):
        declared(flags=table)(command)
    with pytest.raises(ValueError, match="no parameter for its flags"):
        declared(flags=table)(lambda: None)


def test_a_setting_declared_twice_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        Table(PROBE, PROBE)


# ---- a typo names the closest setting -------------------------------------------------------------------------


@pytest.mark.parametrize("typo,meant", [("epoch", "epochs"), ("sparsty", "sparsity"), ("global-top", "global_topk")])
def test_a_mistyped_config_key_names_the_closest_one(tmp_path, typo, meant):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"{typo} = 1\n")
    with pytest.raises(UsageError) as e:
        merge_settings({}, cfg)
    assert f"unknown key '{typo}'" in str(e.value)
    assert e.value.hint is not None and e.value.hint.startswith(f"did you mean {meant}? valid keys: ")


def test_a_config_key_far_from_every_name_only_lists_them(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("zzz = 1\n")
    with pytest.raises(UsageError) as e:
        merge_settings({}, cfg)
    assert e.value.hint is not None and e.value.hint.startswith("valid keys: ")


@pytest.mark.parametrize("typo,meant", [("epochss", "epochs"), ("sparsty", "sparsity"), ("aux_widht", "aux_width")])
def test_a_mistyped_api_keyword_names_the_closest_one(typo, meant):
    """Closest among the keyword arguments and the named parameters of tc.extract (epochs is one of those)."""
    reserved = ("method", "sparsity", "epochs", "seed", "device", "threads", "model", "dataset")
    with pytest.raises(UsageError) as e:
        check_keywords(RUN, {typo}, "extract", reserved=reserved)
    assert e.value.hint is not None and e.value.hint.startswith(f"did you mean {meant}? options: ")
