"""The typed results of extract, evaluate, inspect, export and list (result.Result): on a real run's result,
`to_document()` validates against the command's JSON Schema, reading the result as a mapping gives that document,
the attributes hold what the document shows, and the command's table renders from the object alone. The typed
per-layer entries make the same `layers[]` items as the contract's shared `layer_list` (the oracle) for any counts."""

from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
from helpers import for_method
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.contract.result import Result
from ticketcli.contract.schema import SCHEMAS, layer_list, schema_of
from ticketcli.export.run import ExportResult, export_ticket
from ticketcli.report import tables
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import inspect as runs_inspect
from ticketcli.runs.parts import layer_counts
from ticketcli.runs.summary import ExtractionResult
from ticketcli.settings import listing
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.specs.run import DataSpec, ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io

jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra

SETTINGS = {
    "dataset": "digits",
    "model": "mlp:64-16-10",
    "n_extract": 300,
    "n_val": 100,
    "epochs": 2,
    "batch_size": 128,
    "device": "cpu",
}
METHODS = {"augmented": {}, "imp": {"imp_rounds": 2}}  # double-scoring (aux shares), a weight-training baseline


def valid(command: str, doc: dict) -> list[str]:
    v = jsonschema.Draft202012Validator(schema_of(command))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in v.iter_errors(doc)]


def strict_json(doc: dict) -> dict:
    """The document as --json prints it and reads back (tuples become lists)."""
    return json.loads(json.dumps(doc, allow_nan=False))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, ExtractionResult]]:
    d = tmp_path_factory.mktemp("typed")
    out = {}
    for method, extra in METHODS.items():
        spec = build_extract_spec(merge_settings({**for_method(method, SETTINGS), "method": method, **extra}, None))
        path = d / f"{method}.safetensors"
        out[method] = (path, runs_extract.extract_ticket(spec, out=path))
    return out


def results(runs, tmp_path: Path) -> list[tuple[str, Result]]:
    """(case, result) of every converted command on the tickets of `runs`."""
    got: list[tuple[str, Result]] = []
    for method, (path, extracted) in runs.items():
        got.append((f"extract-{method}", extracted))
        evaluated = runs_evaluate.evaluate_ticket(path, ReaderSpec(data=DataSpec(), device="cpu"))
        gate, _ = runs_evaluate.evaluation_gate(evaluated, min_accuracy=0.0, max_drop=0.5)
        got.append((f"evaluate-{method}", replace(evaluated, gate=gate, threads=1)))
        got.append((f"inspect-{method}", runs_inspect.inspect_ticket(path)))
    aug = runs["augmented"][0]
    for fmt in ("csr", "masked"):
        got.append((f"export-{fmt}", export_ticket(aug, fmt=fmt, out=tmp_path / f"{fmt}.safetensors")))
    got += [(f"list-{kind}", listing.listing(kind)) for kind in listing.KINDS]
    return got


@pytest.mark.slow
def test_every_result_validates_reads_as_its_document_and_renders(runs, tmp_path, capsys):
    cases = results(runs, tmp_path)
    assert {type(r).COMMAND for _, r in cases} == {"extract", "evaluate", "inspect", "export", "list"}
    render = {
        "extract": tables.extract_table,
        "evaluate": tables.evaluate_table,
        "inspect": tables.inspect_table,
        "export": tables.export_table,
        "list": tables.list_table,
    }
    for case, result in cases:
        doc = result.to_document()
        assert doc["schema"] == SCHEMAS[result.COMMAND], case
        assert valid(result.COMMAND, strict_json(doc)) == [], case
        assert dict(result) == doc and len(result) == len(doc) and list(result) == list(doc), case
        assert result == doc and doc == result and result != {**doc, "schema": "other"}, case  # as the dict it was
        assert result.get("schema") == doc["schema"] and result.to_document() == doc  # the same every time
        with pytest.raises(FrozenInstanceError):
            result.ticket = "elsewhere"  # type: ignore[misc]
        render[result.COMMAND](result)
        assert capsys.readouterr().out.strip(), case


def test_the_attributes_are_what_the_documents_show(runs, tmp_path):
    path, ex = runs["augmented"]
    doc = ex.to_document()
    assert doc["metrics"]["test"] == ex.metrics.test.to_dict() and doc["device"] == ex.metrics.device == "cpu"
    assert [la["name"] for la in doc["layers"]] == [la.name for la in ex.sparsity.layers]
    assert all(la.aux_share is not None for la in ex.sparsity.layers)  # double-scoring records its aux shares
    assert "per_layer" not in doc["sparsity"] and doc["sparsity"]["aux_share"] == ex.sparsity.aux_share
    tk = ticket_io.load(path)
    assert ex.masks_sha256 == tk.masks_sha256 and ex.metrics.test.correct == tk.metrics.test.correct
    assert [(la.kept, la.total) for la in ex.sparsity.layers] == [(int(m.sum()), m.numel()) for m in tk.masks.values()]

    imp = runs["imp"][1]
    assert imp.metrics.trained is not None and imp["trained"]["metrics"]["test"] == imp.metrics.trained.test.to_dict()
    assert ex.metrics.trained is None and "trained" not in ex

    ev = runs_evaluate.evaluate_ticket(path, ReaderSpec(data=DataSpec(), device="cpu"))
    assert ev.reproduced and ev.test == ex.metrics.test and ev.stored.test_accuracy == ex.metrics.test.accuracy
    assert ev.layers == ex.sparsity.layers  # counted from the loaded masks, the same counts
    assert "gate" not in ev and "threads" not in ev  # the command adds them
    gate, failures = runs_evaluate.evaluation_gate(ev, min_accuracy=1.0, max_drop=None)
    assert failures and not gate.passed and gate.to_dict() == {"min_accuracy": 1.0, "passed": False}

    ins = runs_inspect.inspect_ticket(path)
    assert [(m.name, m.kept, m.total) for m in ins.masks] == [(la.name, la.kept, la.total) for la in ex.sparsity.layers]
    assert ins["sparsity"]["density"] == ins.density and ins["device"] == "cpu" and "masks" not in ins

    csr = export_ticket(path, fmt="csr", out=tmp_path / "c.safetensors")
    assert isinstance(csr, ExportResult) and csr.csr_payload_bytes == sum(la.csr_bytes for la in csr.layers)
    assert csr["sparsity"]["kept"] == csr.kept == sum(la.kept for la in ex.sparsity.layers)
    assert [la.nnz for la in csr.layers] == [la.kept for la in ex.sparsity.layers]
    masked = export_ticket(path, fmt="masked", out=tmp_path / "m.safetensors")
    assert masked.layers == () and masked["layers"] == [] and "csr_payload_bytes" not in masked


def test_list_result_is_the_registries():
    for kind in listing.KINDS:
        r = listing.listing(kind)
        assert {e.name: e.description for e in r.entries} == listing.describe(kind)
        assert r["items"] == [{"name": n, "description": t} for n, t in listing.describe(kind).items()]
        assert callable(r.items)  # still a mapping's items(): the field is `entries`


counts = st.integers(min_value=0, max_value=10**6)


@st.composite
def per_layer(draw) -> dict[str, dict]:
    """{name: {kept, total, achieved[, aux_share]}} as runs.record counts them (total may be 0 for the oracle)."""
    names = draw(st.lists(st.text(min_size=1, max_size=12), max_size=6, unique=True))
    out = {}
    for name in names:
        total = draw(counts)
        kept = draw(st.integers(min_value=0, max_value=total))
        # achieved as mask_stats rounds it: passed through, never recomputed (any float stands for it here)
        entry: dict = {"kept": kept, "total": total, "achieved": draw(st.floats(min_value=0, max_value=1))}
        if draw(st.booleans()):
            entry["aux_share"] = draw(st.floats(min_value=0, max_value=1))
        out[name] = entry
    return out


@settings(max_examples=200, deadline=None)
@given(per_layer())
@pytest.mark.slow
def test_layer_counts_make_the_contracts_layer_items(per):
    assert [la.to_dict() for la in layer_counts(per)] == layer_list(per)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=4),
            st.floats(min_value=0, max_value=1),
            st.one_of(st.none(), st.floats(min_value=0, max_value=1)),
        ),
        max_size=5,
    )
)
@pytest.mark.slow
def test_inspects_mask_counts_make_the_contracts_layer_items(masks):
    """inspect's mask entries as they were ({shape, kept, total, density[, aux_share]}) through layer_list are
    the typed MaskCount's items."""
    typed, entries = [], {}
    for i, (shape, share, aux) in enumerate(masks):
        total = math.prod(shape)
        kept = round(share * total)
        typed.append(runs_inspect.MaskCount(f"p{i}", tuple(shape), kept, total, aux))
        entries[f"p{i}"] = {"shape": shape, "kept": kept, "total": total, "density": kept / total}
        entries[f"p{i}"] |= {} if aux is None else {"aux_share": aux}
    assert [m.to_dict() for m in typed] == layer_list(entries)
