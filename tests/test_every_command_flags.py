"""--quiet and --json are accepted by every command: with both, a successful run prints exactly one JSON document
on stdout and nothing on stderr. The commands come from the app, so a new command must be added here."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100"]
TINY = [*DATA, "--model", "mlp:64-16-10", "--epochs", "1", "--batch-size", "64"]
# each command's arguments for a tiny successful run; {t} is a ticket, {d} a fresh folder
ARGS = {
    "extract": ["extract", *TINY, "--out", "{d}/t.safetensors"],
    "evaluate": ["evaluate", "{t}"],
    "inspect": ["inspect", "{t}"],
    "compare": ["compare", "{t}", "{t}"],
    "export": ["export", "{t}", "--format", "masks", "--out", "{d}/masks.safetensors"],
    "train-weak": ["train-weak", "{t}", "--epochs", "1", "--batch-size", "64"],
    "drift": ["drift", "--ticket", "{t}", "--steps", "2", "--log-every", "1", "--batch-size", "64"],
    "list": ["list", "methods"],
    "bench": ["bench", "{t}", "--batch", "1,8", "--repeats", "3", "--forms", "sparse"],
    "sweep-k": ["sweep-k", *TINY, "--seeds", "0", "--densities", "0.5", "--layerwise", "0", "--device", "cpu"],
}


def command_names() -> list[str]:
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None)


@pytest.fixture(scope="module")
def ticket(tmp_path_factory):
    out = tmp_path_factory.mktemp("ticket") / "t.safetensors"
    r = runner.invoke(app, ["extract", *TINY, "--method", "edge-popup", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    return out


def test_every_command_is_listed():
    assert sorted(ARGS) == command_names()


@pytest.mark.parametrize("command", sorted(ARGS))
def test_quiet_and_json_are_accepted_by_every_command(command, ticket, tmp_path):
    args = [a.format(t=ticket, d=tmp_path) for a in ARGS[command]]
    r = runner.invoke(app, [*args, "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    assert isinstance(json.loads(r.stdout), dict)  # exactly one JSON document
    assert r.stderr == ""


@pytest.mark.parametrize("command", ["evaluate", "inspect", "compare", "export"])
def test_quiet_alone_keeps_the_tables(command, ticket, tmp_path):
    args = [a.format(t=ticket, d=tmp_path) for a in ARGS[command]]
    r = runner.invoke(app, [*args, "--quiet"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() and not r.stdout.lstrip().startswith("{") and r.stderr == ""
