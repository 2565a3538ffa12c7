"""sweep-k's --out-dir across reruns: a changed setting is refused in one line naming what differs (no run is
recomputed or replaced without --force), the same command resumes, runs dropped from the plan are reported and
left in place, each run's record carries its schema and the sweep-k document's record shape, and the table says
where the plot went."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.contract.schema import SWEEP_RUN_RECORD, schema_of

runner = CliRunner()
SMALL = [
    *("--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1", "--batch-size", "128"),
    *("--n-extract", "300", "--n-val", "100", "--device", "cpu", "--layerwise", "0", "--seeds", "0"),
]


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished sweep at densities 0.3 and 0.5, with its plot, and the output of that run."""
    folder = tmp_path_factory.mktemp("sweep")
    plot = folder / "stability.png"
    args = ["sweep-k", *SMALL, "--densities", "0.3,0.5", "--out-dir", str(folder / "runs"), "--plot", str(plot)]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return folder, args, r


def test_the_table_says_where_the_plot_went(swept):
    folder, _, r = swept
    assert f"plot -> {folder / 'stability.png'}" in r.stdout and (folder / "stability.png").is_file()


def test_each_run_record_is_versioned_in_the_documents_record_shape(swept):
    folder, _, _ = swept
    jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra
    schema = schema_of("sweep-k")
    record_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/record"}
    records = [p for p in (folder / "runs").glob("*.json") if p.name != "sweep-outputs.json"]
    assert records
    for path in records:
        doc = json.loads(path.read_text())
        assert doc.keys() == {"schema", "spec", "record"} and doc["schema"] == SWEEP_RUN_RECORD
        jsonschema.Draft202012Validator(record_schema).validate(doc["record"])
        assert doc["record"]["id"] == path.stem and isinstance(doc["record"]["method"], dict)


def test_a_changed_setting_is_refused_naming_what_differs(swept):
    folder, args, _ = swept
    before = snapshot(folder / "runs")
    changed = [*args[: args.index("--epochs") + 1], "2", *args[args.index("--epochs") + 2 :]]
    r = runner.invoke(app, [*changed, "--quiet"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "epochs: 1 in the folder, 2 now" in lines[0] and "--force" in lines[0] and "--out-dir" in lines[0]
    assert snapshot(folder / "runs") == before  # nothing recomputed, nothing replaced


@pytest.mark.slow
def test_the_same_command_resumes_and_dropped_densities_are_reported_not_deleted(swept):
    folder, args, _ = swept
    runs = folder / "runs"
    again = runner.invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert sorted(doc["resumed"]) == sorted(r["id"] for r in doc["records"])  # every run resumed
    assert "warning" not in again.stderr
    fewer = [*args[: args.index("--densities") + 1], "0.3", *args[args.index("--densities") + 2 :]]
    r = runner.invoke(app, [*fewer, "--json"])
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "seed0-edge-popup-k0.5" in warnings[0] and "not in this sweep's plan" in warnings[0]
    assert "seed0-edge-popup-k0.3" not in warnings[0]
    assert (runs / "seed0-edge-popup-k0.5.safetensors").is_file() and (runs / "seed0-edge-popup-k0.5.json").is_file()
    assert all(rec["id"] != "seed0-edge-popup-k0.5" for rec in json.loads(r.stdout)["records"])


@pytest.mark.slow
def test_force_recomputes_a_changed_setting(swept, tmp_path):
    folder, args, _ = swept
    out = tmp_path / "runs"
    small = [a if a != str(folder / "runs") else str(out) for a in args[: args.index("--plot")]]
    assert runner.invoke(app, [*small, "--quiet"]).exit_code == 0
    changed = [*small[: small.index("--epochs") + 1], "2", *small[small.index("--epochs") + 2 :]]
    r = runner.invoke(app, [*changed, "--force", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["resumed"] == []
    stored = json.loads((out / "seed0-edge-popup-k0.3.json").read_text())
    assert stored["spec"]["method"]["epochs"] == 2
