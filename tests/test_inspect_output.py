"""inspect's table (and evaluate's) is for people: every metadata value a ticket holds (lists, objects, booleans,
nothing) is written readably, never as a Python repr ({'trainable': 1}, [0.9, 0.999], True, None)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import flags_for
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.report.values import method_text, readable
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MethodRecord

runner = CliRunner()
QUICK = ["--dataset", "digits", "--model", "mlp:64-16-10", "--n-extract", "200", "--n-val", "100", "--epochs", "1"]
CASES = {  # methods whose records hold an object (score_params), lists (betas, layer_densities), booleans
    "augmented": ["--method", "augmented"],
    "edge-popup": ["--method", "edge-popup", "--layer-densities", "0.5,0.3"],
    "imp": ["--method", "imp", "--imp-rounds", "1"],
    "snip": ["--method", "snip"],
    "iterated": ["--method", "iterated", "--max-rounds", "1"],
}
REPR = re.compile(r"[{}\[\]']|\bTrue\b|\bFalse\b|\bNone\b")


def invoke(*args: str):
    r = runner.invoke(app, list(args), env={"COLUMNS": "1000"})  # one line per row: no wrapping
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("inspect")
    out = {}
    for name, flags in CASES.items():
        out[name] = d / f"{name}.safetensors"
        invoke("extract", *flags_for(name, [*QUICK, *flags]), "--quiet", "--out", str(out[name]))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_inspect_table_has_no_python_repr(tickets, name):
    text = invoke("inspect", str(tickets[name])).stdout
    assert not REPR.findall(text), text
    method = json.loads(invoke("inspect", str(tickets[name]), "--json").stdout)["method"]
    row = next(line for line in text.splitlines() if " method " in line)
    assert f"name={name}" in row
    if "betas" in method:  # a list: as --betas takes it
        assert "betas=" + ",".join(map(str, method["betas"])) in text
    if "score_params" in method:
        sp = method["score_params"]
        assert f"score_params=(trainable {sp['trainable']}, total {sp['total']})" in text


@pytest.mark.parametrize("name", ["augmented", "edge-popup"])
def test_evaluate_table_names_the_method_without_a_repr(tickets, name):
    text = invoke("evaluate", str(tickets[name])).stdout
    assert f": {name} on mlp:64-16-10" in text and not REPR.findall(text), text


def test_a_tickets_nested_values_are_readable_too(tickets, tmp_path):
    """A file's method record may hold anything JSON can (a hand-made or foreign ticket): still no repr."""
    path = tmp_path / "odd.safetensors"
    tensors = load_file(str(tickets["augmented"]))
    meta = ticket_io.load(tickets["augmented"]).metadata()
    method = {**json.loads(meta["method"]), "odd": {"a": [1, {"b": None, "c": True}], "d": "x'y"}, "flags": [False]}
    save_file(tensors, str(path), metadata={**meta, "method": json.dumps(method)})
    text = invoke("inspect", str(path)).stdout
    assert "odd=(a (1,(b -, c true)), d x'y)" in text and "flags=false" in text
    assert not REPR.findall(text.replace("x'y", "")), text


def test_readable_forms():
    assert readable({"trainable": 1, "total": 2}) == "trainable 1, total 2"
    assert readable([0.9, 0.999]) == "0.9,0.999" and readable((1, 2)) == "1,2"
    assert readable(None) == "-" and readable(True) == "true" and readable("s") == "s"
    assert readable([[1, 2], {"a": []}]) == "(1,2),(a ())"
    m = {"name": "augmented", "sparsity": 0.9, "layer_densities": None, "score_init": {"scheme": "k"}}
    assert method_text(MethodRecord.of({**m, "score_params": {"trainable": 1, "total": 2}})) == (
        "name=augmented, sparsity=0.9, score_params=(trainable 1, total 2)"
    )
