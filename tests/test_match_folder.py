"""`--match-sparsity DIR`: each seed's run is matched to the same seed's ticket of the same model in the folder (the
paper's matched protocol over seeds); a folder with no such ticket, or several, is refused in one line before
anything runs."""

from __future__ import annotations

import json

import pytest
from helpers import one_line_error
from typer.testing import CliRunner

from ticketcli.cli.app import app

runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--batch-size", "64", "--epochs", "1"]
MODEL = ["--model", "mlp:64-16-10"]


def extract(*args: str) -> dict:
    r = runner.invoke(app, ["extract", *TINY, *args, "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Augmented tickets of seeds 0 and 1 (different achieved sparsities), and one of another model."""
    folder = tmp_path_factory.mktemp("aug")
    for seed in (0, 1):
        extract("--method", "augmented", *MODEL, "--seed", str(seed), "--out", str(folder / f"aug-{seed}.safetensors"))
    extract(
        "--method", "augmented", "--model", "mlp:64-8-10", "--seed", "0", "--out", str(folder / "small.safetensors")
    )
    return folder


@pytest.mark.parametrize("seed", [0, 1])
def test_each_seed_runs_at_its_own_tickets_achieved_sparsity(seed, reference, tmp_path):
    own = reference / f"aug-{seed}.safetensors"
    achieved = json.loads(runner.invoke(app, ["inspect", str(own), "--json"]).stdout)["sparsity"]["achieved"]
    args = ["--method", "edge-popup", *MODEL, "--seed", str(seed)]
    by_folder = extract(*args, "--match-sparsity", str(reference), "--out", str(tmp_path / "a.safetensors"))
    by_file = extract(*args, "--match-sparsity", str(own), "--out", str(tmp_path / "b.safetensors"))
    assert by_folder["sparsity"]["requested"] == pytest.approx(achieved, abs=0)
    assert by_folder["method"]["matched_to"] == str(own)
    assert by_folder["sparsity"] == by_file["sparsity"]  # the folder picks exactly the file one would name


def test_the_two_seeds_are_matched_differently(reference, tmp_path):
    asked = set()
    for seed in (0, 1):
        out = tmp_path / f"{seed}.safetensors"
        doc = extract(
            "--method", "edge-popup", *MODEL, "--seed", str(seed), "--match-sparsity", str(reference), "--out", str(out)
        )
        asked.add(doc["sparsity"]["requested"])
    assert len(asked) == 2  # the seeds' augmented tickets achieved different sparsities


def test_no_ticket_for_the_seed_is_refused_in_one_line(reference, tmp_path):
    args = ["extract", *TINY, "--method", "edge-popup", *MODEL, "--seed", "7", "--match-sparsity", str(reference)]
    line = one_line_error(runner.invoke(app, [*args, "--out", str(tmp_path / "x.safetensors")]))
    assert "no ticket of seed 7" in line and str(reference) in line
    assert not (tmp_path / "x.safetensors").exists()


def test_another_models_ticket_is_not_taken_and_is_named(reference, tmp_path):
    args = ["extract", *TINY, "--method", "edge-popup", "--model", "mlp:64-32-10", "--seed", "0"]
    line = one_line_error(
        runner.invoke(app, [*args, "--match-sparsity", str(reference), "--out", str(tmp_path / "x.safetensors")])
    )
    assert "no ticket of seed 0 and model mlp:64-32-10" in line and "mlp:64-16-10" in line


def test_several_tickets_for_the_seed_are_refused_naming_them(reference, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("aug-0.safetensors", "aug-1.safetensors"):
        (folder / name).write_bytes((reference / name).read_bytes())
    (folder / "copy-0.safetensors").write_bytes((reference / "aug-0.safetensors").read_bytes())
    args = ["extract", *TINY, "--method", "edge-popup", *MODEL, "--seed", "0", "--match-sparsity", str(folder)]
    line = one_line_error(runner.invoke(app, [*args, "--out", str(tmp_path / "x.safetensors")]))
    assert "2 tickets of seed 0" in line and "aug-0.safetensors" in line and "copy-0.safetensors" in line
