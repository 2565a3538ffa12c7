"""--aggregate: `inspect DIR` and `evaluate DIR` group the tickets over their seeds, one group per method, model and
requested sparsity (matched runs: per matched folder), with the mean and sample standard deviation of the achieved
sparsity and the accuracies, in the table, in --json (checked against the rows of the same document) and in --csv."""

from __future__ import annotations

import csv
import io
import json
import statistics

import pytest
from helpers import one_line_error
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.contract.schema import schema_of
from ticketcli.report.console import pct
from ticketcli.runs.aggregate import MeanStd, Sample, seed_groups

jsonschema = pytest.importorskip("jsonschema")
runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--batch-size", "64", "--epochs", "1"]
TINY += ["--model", "mlp:64-16-10", "--quiet"]


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_mean_and_std_are_the_sample_statistics(xs):
    m = MeanStd.of(xs)
    assert m.n == len(xs) and m.mean == pytest.approx(statistics.fmean(xs), abs=1e-12)
    assert m.std is None if len(xs) == 1 else m.std == pytest.approx(statistics.stdev(xs), abs=1e-9)


def sample(method: str, seed: int, requested: float, matched: str | None = None, acc: float = 0.5) -> Sample:
    return Sample(method, "mlp:64-16-10", seed, requested, matched, requested, acc, acc)


def test_groups_by_method_model_and_request_and_matched_runs_by_folder():
    samples = [
        sample("augmented", 0, 0.9),
        sample("augmented", 1, 0.9),
        sample("augmented", 0, 0.5),
        sample("edge-popup", 0, 0.801, "runs/aug"),  # each seed matched to its own ticket: its own request
        sample("edge-popup", 1, 0.812, "runs/aug"),
        sample("edge-popup", 0, 0.9),
    ]
    groups = seed_groups(samples)
    assert [(g.method, g.requested_sparsity, g.matched_in, g.seeds) for g in groups] == [
        ("augmented", 0.9, None, (0, 1)),
        ("augmented", 0.5, None, (0,)),
        ("edge-popup", None, "runs/aug", (0, 1)),
        ("edge-popup", 0.9, None, (0,)),
    ]
    assert groups[2].achieved_sparsity.mean == pytest.approx((0.801 + 0.812) / 2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("seeds")
    for method in ("augmented", "edge-popup"):
        for seed in (0, 1, 2):
            out = d / f"{method}-{seed}.safetensors"
            r = runner.invoke(app, ["extract", *TINY, "--method", method, "--seed", str(seed), "--out", str(out)])
            assert r.exit_code == 0, r.output
    return d


def document(*args: str) -> dict:
    r = runner.invoke(app, [*args, "--aggregate", "--json", "--quiet"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def check_groups(doc: dict, accuracy_of) -> None:
    """Each group's mean and std are those of its tickets' values in the same document."""
    assert [g["method"] for g in doc["aggregate"]] == ["augmented", "edge-popup"]
    for g in doc["aggregate"]:
        members = [t for t in doc["tickets"] if name_of(t) == g["method"]]
        assert sorted(t["seed"] for t in members) == sorted(g["seeds"]) == [0, 1, 2] and g["count"] == 3
        test = [accuracy_of(t) for t in members]
        assert g["metrics"]["test"]["mean"] == pytest.approx(statistics.fmean(test), abs=1e-12)
        assert g["metrics"]["test"]["std"] == pytest.approx(statistics.stdev(test), abs=1e-12)


def name_of(ticket: dict) -> str:
    m = ticket["method"]
    return m["name"] if isinstance(m, dict) else m


def test_inspect_aggregates_the_stored_values(folder):
    doc = document("inspect", str(folder))
    assert not list(jsonschema.Draft202012Validator(schema_of("inspect-folder")).iter_errors(doc))
    check_groups(doc, lambda t: t["metrics"]["test"]["accuracy"])
    for g in doc["aggregate"]:
        achieved = [t["sparsity"]["achieved"] for t in doc["tickets"] if name_of(t) == g["method"]]
        assert g["achieved_sparsity"]["mean"] == pytest.approx(statistics.fmean(achieved), abs=1e-12)
        assert g["sparsity"] == {"requested": pytest.approx(0.9), "matched_in": None}


def test_evaluate_aggregates_the_re_measured_values(folder):
    doc = document("evaluate", str(folder), "--threads", "1")
    assert not list(jsonschema.Draft202012Validator(schema_of("evaluate-folder")).iter_errors(doc))
    check_groups(doc, lambda t: t["metrics"]["test"]["accuracy"])


def test_csv_and_table_show_the_documents_groups(folder):
    doc = document("inspect", str(folder))
    r = runner.invoke(app, ["inspect", str(folder), "--aggregate", "--csv"])
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [row["method"] for row in rows] == [g["method"] for g in doc["aggregate"]]
    for row, g in zip(rows, doc["aggregate"], strict=True):
        assert float(row["test_accuracy_mean"]) == g["metrics"]["test"]["mean"]
        assert float(row["achieved_sparsity_std"]) == g["achieved_sparsity"]["std"]
        assert row["seeds"] == "0 1 2" and row["count"] == "3"
    table = runner.invoke(app, ["inspect", str(folder), "--aggregate"], env={"COLUMNS": "80"}).stdout
    assert "…" not in table
    for g in doc["aggregate"]:
        assert pct(g["metrics"]["test"]["mean"]) in table, table
        assert f"{100 * g['metrics']['test']['std']:.2f}" in table, table


@pytest.mark.parametrize("command", ["inspect", "evaluate"])
def test_a_single_ticket_is_refused(command, folder):
    line = one_line_error(runner.invoke(app, [command, str(folder / "augmented-0.safetensors"), "--aggregate"]))
    assert "--aggregate" in line and "folder" in line


def test_compare_aggregates_tickets_and_same_seed_overlaps(folder):
    paths = sorted(str(p) for p in folder.glob("*.safetensors"))
    doc = document("compare", *paths)
    assert not list(jsonschema.Draft202012Validator(schema_of("compare")).iter_errors(doc))
    assert [g["method"] for g in doc["aggregate"]] == ["augmented", "edge-popup"]
    (group,) = doc["aggregate_pairs"]  # augmented and edge-popup of the same seed; no two tickets of one method do
    assert group["methods"] == ["augmented", "edge-popup"] and group["seeds"] == [0, 1, 2]
    same_seed = [
        p["overlap"]["jaccard"]
        for p in doc["pairs"]
        if doc["tickets"][p["a"]]["seed"] == doc["tickets"][p["b"]]["seed"]
    ]
    assert group["jaccard"]["mean"] == pytest.approx(statistics.fmean(same_seed), abs=1e-12)
    assert group["jaccard"]["std"] == pytest.approx(statistics.stdev(same_seed), abs=1e-12)
    table = runner.invoke(app, ["compare", *paths, "--aggregate"], env={"COLUMNS": "80"}).stdout
    assert "…" not in table and f"{group['jaccard']['mean']:.4f}" in table, table


def test_evaluate_csv_holds_the_documents_rows_and_groups(folder):
    doc = document("evaluate", str(folder), "--threads", "1")
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["evaluate", str(folder), "--csv", "--quiet"]).stdout)))
    assert [r["ticket"] for r in rows] == [t["ticket"] for t in doc["tickets"]]
    for row, t in zip(rows, doc["tickets"], strict=True):
        assert float(row["test_accuracy"]) == t["metrics"]["test"]["accuracy"] and row["reproduced"] == "yes"
        assert row["method"] == name_of(t) and int(row["seed"]) == t["seed"] and row["gate"] == ""
    args = ["evaluate", str(folder), "--csv", "--aggregate", "--quiet"]
    groups = list(csv.DictReader(io.StringIO(runner.invoke(app, args).stdout)))
    assert [float(g["test_accuracy_mean"]) for g in groups] == [g["metrics"]["test"]["mean"] for g in doc["aggregate"]]
