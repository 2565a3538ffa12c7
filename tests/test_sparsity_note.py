"""`ticket extract` says in one line under its tables why the achieved sparsity is not the requested one, when
they differ by more than the method's tolerance (iterated: --iter-tolerance; the others: one entry per layer),
and says nothing when they agree; the reason is the method's (docs/method.md)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app

runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--model", "mlp:64-16-10", "--batch-size", "64"]


def extract(tmp_path, *args: str) -> tuple[str, dict]:
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", *TINY, *args, "--out", str(out), "--quiet"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    doc = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    return r.stdout, doc


def note(text: str) -> str | None:
    lines = [line for line in text.splitlines() if line.startswith("achieved ")]
    assert len(lines) <= 1, text
    return lines[0] if lines else None


def test_augmented_says_where_its_sparsity_comes_from(tmp_path):
    text, doc = extract(tmp_path, "--method", "augmented", "--epochs", "2", "--sparsity", "0.9")
    line = note(text)
    assert line is not None and "not the requested 90.00%" in line, text
    assert "auxiliary" in line and "--aug-density" in line
    low, high = (float(x) / 100 for x in re.findall(r"between ([\d.]+)% and ([\d.]+)%", line)[0])
    achieved = 1 - doc["sparsity"]["density"]
    assert low <= achieved + 1e-9 and achieved <= high + 1e-9  # the bounds of docs/method.md hold the outcome
    assert f"achieved {100 * achieved:.2f}%" in line


@pytest.mark.parametrize("method", ["edge-popup", "snip", "grasp"])
def test_a_method_that_meets_the_request_says_nothing(method, tmp_path):
    epochs = ["--epochs", "1"] if method == "edge-popup" else []
    text, doc = extract(tmp_path, "--method", method, *epochs, "--sparsity", "0.7")
    assert abs(1 - doc["sparsity"]["density"] - 0.7) < 0.01
    assert note(text) is None, text


def test_iterated_short_of_its_request_names_its_rounds_and_tolerance(tmp_path):
    text, doc = extract(tmp_path, "--method", "iterated", "--max-rounds", "1", "--epochs", "1", "--sparsity", "0.9")
    achieved = 1 - doc["sparsity"]["density"]
    line = note(text)
    if abs(achieved - 0.9) <= 0.02:  # one round reached the request: nothing to explain
        assert line is None, text
    else:
        assert line is not None and "1 round" in line and "--iter-tolerance" in line, text


def test_per_layer_densities_are_named(tmp_path):
    text, _ = extract(tmp_path, "--method", "snip", "--layer-densities", "0.5,0.1", "--sparsity", "0.9")
    line = note(text)
    assert line is not None and "--layer-densities" in line, text
