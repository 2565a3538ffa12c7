"""The typed results of train-weak, sweep-k and drift: each `to_document()` is a document its JSON Schema accepts (on
a real run's result), reading the result as a mapping gives exactly that document, and the tables and plots render
from the object's attributes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import QUICK, invoke

from ticketcli.contract import SCHEMAS, schema_of
from ticketcli.report.study_tables import weak_table
from ticketcli.resolve import data_location
from ticketcli.specs import DataSpec
from ticketcli.weak import CurvePoint, Measured, Split, WeakResult, WeakRun, WeakSpec, train_weak

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
    return train_weak(ticket, data=DATA, spec=WeakSpec(epochs=2, batch_size=128), device="cpu", dense_baseline=True)


# --- train-weak -------------------------------------------------------------------------------------------------


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
