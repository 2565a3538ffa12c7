"""The typed results of train-weak, sweep-k and drift: each `to_document()` is a document its JSON Schema accepts (on
a real run's result), reading the result as a mapping gives exactly that document, and the tables and plots render
from the object's attributes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import QUICK, invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.contract.schema import SCHEMAS, schema_of
from ticketcli.drift import views as drift_views
from ticketcli.drift.relufy import run_relufy
from ticketcli.drift.result import (
    DriftControlResult,
    DriftRelufyResult,
    DriftResult,
    DriftSummary,
    TradeoffResult,
    named_layers,
)
from ticketcli.drift.run import run_drift, summarise
from ticketcli.drift.spec import ControlSpec, DriftSpec, RelufySpec
from ticketcli.drift.tradeoff import plan as tradeoff_plan
from ticketcli.drift.tradeoff import run_tradeoff
from ticketcli.drift.views import drift_figure, drift_tables
from ticketcli.models.registry import parse_model
from ticketcli.report.plots import sweep_figure
from ticketcli.report.study_tables import sweep_table, weak_table
from ticketcli.runs.parts import SplitMetrics as Split
from ticketcli.settings.resolve import build_extract_spec, data_location, merge_settings
from ticketcli.specs.run import DataSpec, ReaderSpec
from ticketcli.sweep import plan as sweep_plan
from ticketcli.sweep.result import SweepRecord, SweepResult, SweepSettings, SweepSummary
from ticketcli.sweep.run import sweep_k
from ticketcli.weak.result import CurvePoint, Measured, WeakResult, WeakRun
from ticketcli.weak.run import WeakSpec, train_weak

jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra
DATA = DataSpec(**data_location(None, False))


def errors(command: str, doc: dict) -> list[str]:
    v = jsonschema.Draft202012Validator(schema_of(command))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in v.iter_errors(doc)]


@pytest.fixture(scope="module")
def ticket(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("results") / "t.safetensors"
    r = invoke("extract", *QUICK, "--out", str(out))
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def weak(ticket) -> WeakResult:
    return train_weak(
        ticket, ReaderSpec(data=DATA, device="cpu"), spec=WeakSpec(epochs=2, batch_size=128), dense_baseline=True
    )


# --- train-weak -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_weak_document_validates_and_is_the_mapping(weak):
    doc = weak.to_document()
    assert doc["schema"] == SCHEMAS["train-weak"] and errors("train-weak", doc) == []
    assert dict(weak) == doc and list(weak) == list(doc) and len(weak) == len(doc)
    assert doc["metrics"] == doc["masked"]["metrics"] == weak.masked.final.to_dict()
    assert [p["epoch"] for p in doc["masked"]["curve"]] == [p.epoch for p in weak.masked.curve] == [1, 2]
    # the optional parts appear only when set, in the document's fixed order
    assert "threads" not in doc and "plot" not in doc and "out" not in doc
    later = dataclasses.replace(weak, threads=1, plot="p.png")
    assert (
        list(later.to_document())[-9:-6] == ["integrity", "threads", "plot"] and errors("train-weak", dict(later)) == []
    )
    assert "dense" not in dataclasses.replace(weak, dense=None).to_document()


def test_weak_result_is_frozen(weak):
    with pytest.raises(dataclasses.FrozenInstanceError):
        weak.threads = 3  # type: ignore[misc]


def test_weak_table_renders_from_the_object(weak, capsys):
    weak_table(weak)
    out = capsys.readouterr().out
    assert "masked" in out and "dense" in out and f"{weak.masked.curve[-1].loss:.4f}" in out
    assert f"{weak.weights_check.masked_nonzero_after} masked weights nonzero" in out


splits = st.builds(
    Split,
    accuracy=st.floats(0, 1),
    loss=st.floats(0, 10),
    correct=st.integers(0, 1000),
    n=st.integers(1, 1000),
)
points = st.builds(
    CurvePoint,
    epoch=st.integers(1, 50),
    loss=st.floats(0, 10),
    accuracy=st.floats(0, 1),
    val_accuracy=st.floats(0, 1),
    val_loss=st.floats(0, 10),
)
runs = st.builds(
    WeakRun,
    initial=st.builds(Measured, test=splits, val=splits),
    final=st.builds(Measured, test=splits, val=splits),
    gain=st.floats(-1, 1),
    best_val_epoch=st.integers(1, 50),
    best_val_accuracy=st.floats(0, 1),
    curve=st.lists(points, min_size=1, max_size=4).map(tuple),
    wall_time_s=st.floats(0, 100),
)


@settings(max_examples=30, deadline=None)
@given(
    masked=runs, dense=st.none() | runs, threads=st.none() | st.integers(1, 8), processes=st.none() | st.integers(2, 4)
)
def test_any_weak_result_reads_as_its_document(weak, masked, dense, threads, processes):
    r = dataclasses.replace(weak, masked=masked, dense=dense, threads=threads, processes=processes)
    doc = r.to_document()
    assert dict(r) == doc and errors("train-weak", doc) == []
    assert doc["masked"]["initial"]["metrics"] == masked.initial.to_dict()
    assert doc["masked"]["best"] == {
        "epoch": masked.best_val_epoch,
        "metrics": {"val": {"accuracy": masked.best_val_accuracy}},
    }
    assert ("dense" in doc) == (dense is not None) and ("threads" in doc) == (threads is not None)


# --- sweep-k ----------------------------------------------------------------------------------------------------

TINY = {"dataset": "digits", "model": "mlp:64-16-10", "epochs": 1, "batch_size": 128, "n_extract": 300, "n_val": 100}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> SweepResult:
    base = build_extract_spec(merge_settings({**TINY, "method": "edge-popup", "device": "cpu"}, None))
    plan = sweep_plan.build_plan(base, seeds=(0, 1), densities=(0.1,), layerwise=0, double_scoring=("augmented",))
    return sweep_k(plan, out_dir=tmp_path_factory.mktemp("sweep"))


def settings_of(result: SweepResult) -> SweepSettings:
    return SweepSettings(
        0.9, result.summary.seeds, (0.1,), 0, (0.85, 0.95), "m", "d", 1, ("augmented",), 1, 1, "local", None
    )


def test_sweep_document_validates_and_is_the_mapping(sweep):
    full = dataclasses.replace(sweep, settings=settings_of(sweep), plot="p.png", threads=1)
    assert dict(sweep) == sweep.to_document() and "settings" not in sweep.to_document()  # the command adds them
    doc = full.to_document()
    assert doc["schema"] == SCHEMAS["sweep-k"] and errors("sweep-k", doc) == [] and dict(full) == doc
    assert list(doc) == ["schema", "records", "resumed", "summary", "settings", "plot", "threads"]
    assert [x["id"] for x in doc["records"]] == [x.id for x in sweep.records]
    for record, x in zip(sweep.records, doc["records"]):
        assert x["metrics"]["test"] == {"accuracy": record.test_accuracy, "loss": record.test_loss}
        assert x["sparsity"] == {"achieved": record.achieved_sparsity, "requested": record.requested_sparsity}


def test_a_sweep_record_reads_back_from_its_document_and_flat_shape(sweep):
    for record in sweep.records:
        assert SweepRecord.from_document(record.to_dict()) == record
        assert SweepRecord.of(record.flat()) == record
    again = SweepSummary.of_records(sweep.records)
    assert again == sweep.summary and again.to_dict() == sweep.to_document()["summary"]


def test_sweep_table_and_plot_render_from_the_object(sweep, capsys):
    full = dataclasses.replace(sweep, settings=settings_of(sweep))
    sweep_table(full)
    out = capsys.readouterr().out
    assert "edge-popup sweep" in out and "augmented" in out and f"{len(sweep.records)} runs" in out
    assert len(sweep_figure(full).axes) == 2
    sweep_table(sweep)  # without the command's settings (a result of the Python API)
    assert f"{len(sweep.records)} runs" in capsys.readouterr().out


@settings(max_examples=30, deadline=None)
@given(
    accuracies=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=6),
    band=st.tuples(st.floats(0, 0.5), st.floats(0.5, 1)),
)
def test_any_sweep_result_reads_as_its_document(sweep, accuracies, band):
    """Records with any accuracies and sparsities, summarised: the mapping is the document, and it validates."""
    base = sweep.records[0]
    records = [
        dataclasses.replace(base, id=f"r{i}", seed=i % 2, test_accuracy=t, val_accuracy=v, achieved_sparsity=a)
        for i, (t, v, a) in enumerate(accuracies)
    ]
    r = SweepResult(records=tuple(records), resumed=(), summary=SweepSummary.of_records(records, band))
    r = dataclasses.replace(r, settings=settings_of(r))
    doc = r.to_document()
    assert dict(r) == doc and errors("sweep-k", doc) == []
    assert doc["summary"]["edge_popup"]["configs"] == len(records)


# --- drift ------------------------------------------------------------------------------------------------------

DIGITS = DataSpec(name="digits", n_extract=300, n_val=100)


def drift_spec(**kw) -> DriftSpec:
    base = dict(steps=4, log_every=2, batch_size=64, probe_size=100, seeds=(0, 1), device="cpu")
    return DriftSpec(model=parse_model("mlp:64-16-16-10"), data=DIGITS, **{**base, **kw})


@pytest.fixture(scope="module")
def drifts() -> dict[str, DriftResult | TradeoffResult]:
    """Command -> a real result of that drift document."""
    return {
        "drift": run_drift(drift_spec()),
        "drift-control": run_drift(drift_spec(), control=ControlSpec("percentile", 0.6)),
        "drift-relufy": run_relufy(drift_spec(activation="silu", seeds=(0,)), RelufySpec("silu", "relu", 1)),
        "drift-tradeoff": run_tradeoff(tradeoff_plan([drift_spec(seeds=(0,))], (0.5, 0.9), "topk", None)),
    }


KINDS = {
    "drift": DriftResult,
    "drift-control": DriftControlResult,
    "drift-relufy": DriftRelufyResult,
    "drift-tradeoff": TradeoffResult,
}


@pytest.mark.parametrize("command", list(KINDS))
def test_drift_documents_validate_and_are_the_mapping(drifts, command):
    r = drifts[command]
    assert type(r) is KINDS[command]
    for x in (r, dataclasses.replace(r, threads=2, plot="d.png")):
        doc = x.to_document()
        assert doc["schema"] == SCHEMAS[command] and errors(command, doc) == [], command
        assert dict(x) == doc
        assert not any(callable(v) for v in doc.values())  # nothing but data in the document


@pytest.mark.parametrize("command", ["drift", "drift-control", "drift-relufy"])
def test_drift_layers_are_named_lists_in_the_same_order(drifts, command):
    r = drifts[command]
    doc = r.to_document()
    assert [la["name"] for la in doc["summary"]["layers"]] == list(r.summary.layers)
    for run, raw in zip(doc["runs"], r.runs):
        assert [la["name"] for la in run["layers"]] == list(raw["layers"])
    assert DriftSummary.of(summarise(list(r.runs))) == r.summary  # the summary is the mean over the runs


@pytest.mark.slow
def test_drift_tables_and_plots_render_from_the_object(drifts, capsys):
    """views.show and views.figure pick the tables and plot by the result's class."""
    seen = {}
    for command, r in drifts.items():
        drift_views.show(r)
        seen[command] = capsys.readouterr().out
        assert drift_views.figure(r)[:8] == b"\x89PNG\r\n\x1a\n", command
    r = drifts["drift"]
    assert "seeds 0,1" in seen["drift"] and f"probe batch of {r.probe_n}" in seen["drift"]
    assert "activation-sparsity control" in seen["drift-control"] and "ReLUfication" not in seen["drift-control"]
    assert "ReLUfication silu -> relu" in seen["drift-relufy"] and "activation-sparsity" not in seen["drift-relufy"]
    assert "trade-off mlp:64-16-16-10" in seen["drift-tradeoff"] and "weight drift" not in seen["drift-tradeoff"]
    assert len(drift_figure(r).axes) in (2, 3)
    drift_tables(r)
    assert capsys.readouterr().out == seen["drift"]


@settings(max_examples=40, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats(allow_nan=False) | st.text(max_size=3),
        lambda kids: (
            st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(["a", "layers", "sites"]), kids, max_size=3)
        ),
        max_leaves=12,
    )
)
@pytest.mark.slow
def test_named_layers_leaves_its_input_alone_and_only_renames_keyed_layers(node):
    import copy

    before = copy.deepcopy(node)
    out = named_layers(node)
    assert node == before
    if isinstance(node, dict):
        for k in ("layers", "sites"):
            if isinstance(node.get(k), dict):
                assert [x["name"] for x in out[k]] == list(node[k])
