"""Exports carry their inputs: every format's metadata (safetensors' header, a .pt state dict's `metadata`
attribute, ONNX's metadata_props) records the data's name, one example's shape and dtype, the classes and the
dataset's normalisation as the registry declares it; what a ticket does not tell is named, with the reason. With
`--with-preprocessing`, onnxruntime fed raw values gives the ticket's own predictions on the normalised test split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import FASHION_DIRS, require_fashion
from safetensors import safe_open
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app
from ticketcli.data.registry import DATASETS
from ticketcli.export.run import STATE_FORMATS, export_ticket
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ReaderSpec, RunSpec

runner = CliRunner()
INPUT_KEYS = ("dataset", "input_shape", "input_dtype", "classes", "input_mean", "input_std", "input_raw")


def make_ticket(tmp_path: Path, model: str, dataset: str = "digits", method: str = "random", epochs: int = 1) -> Path:
    spec = RunSpec(
        model=parse_model(model).with_data(DATASETS.get(dataset).shape, 10),
        init=InitSpec(seed=3),
        data=DataSpec(name=dataset, n_extract=300, n_val=100, split_seed=3, search_dirs=FASHION_DIRS),
        method=MethodSpec(name=method, sparsity=0.5, epochs=epochs, batch_size=64),
        device="cpu",
    )
    out = tmp_path / f"{dataset}.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


def schema_errors(doc: dict) -> list[str]:
    """The export document against its JSON Schema (the [dev] extra's jsonschema; none without it)."""
    try:
        import jsonschema
    except ImportError:
        return []
    from ticketcli.contract.schema import schema_of

    return [e.message[:200] for e in jsonschema.Draft202012Validator(schema_of("export")).iter_errors(doc)]


def file_metadata(path: Path) -> dict[str, str]:
    """An export's metadata as a user reads it, without ticketcli."""
    if path.suffix == ".safetensors":
        with safe_open(str(path), "pt") as f:
            return dict(f.metadata())
    if path.suffix == ".onnx":
        import onnx

        return {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    return dict(torch.load(path, weights_only=True).metadata)


@pytest.fixture(scope="module")
def digits_ticket(tmp_path_factory) -> Path:
    return make_ticket(tmp_path_factory.mktemp("inputs"), "mlp:64-16-10+bias")


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
@pytest.mark.parametrize("fmt", STATE_FORMATS)
def test_every_state_format_records_the_inputs_as_the_registry_declares_them(digits_ticket, tmp_path, fmt, suffix):
    out = tmp_path / f"net{suffix}"
    r = runner.invoke(app, ["export", str(digits_ticket), "--format", fmt, "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    meta = file_metadata(out)
    info = DATASETS.get("digits")
    norm = info.normalization
    assert norm is not None
    assert meta["dataset"] == "digits" and meta["format"] == f"ticket-export-{fmt}"
    assert json.loads(meta["input_shape"]) == list(info.shape) and meta["input_dtype"] == "float32"
    assert json.loads(meta["classes"]) == info.classes
    assert json.loads(meta["input_mean"]) == list(norm.mean) and json.loads(meta["input_std"]) == list(norm.std)
    assert meta["input_raw"] == norm.raw and meta["preprocessing"].startswith("by the caller")
    assert "not_recorded" not in meta
    assert schema_errors(json.loads(r.stdout)) == []
    doc = json.loads(r.stdout)["inputs"]  # --json reports what the file records
    assert doc["normalization"]["mean"] == list(norm.mean) and doc["shape"] == list(info.shape)
    assert doc["not_recorded"] == {}


def test_the_recorded_normalisation_is_what_the_loader_does(digits_ticket):
    """Raw values in [0, 1] (digits: the 0..16 counts / 16), normalised with the recorded mean and std, are
    exactly the ticket's test split."""
    out = digits_ticket.with_name("m.pt")
    export_ticket(digits_ticket, fmt="masks", out=out, overwrite=True)
    meta = file_metadata(out)
    pools = DATASETS.get("digits").load(DataSpec(name="digits"))
    raw = pools.x_test
    assert float(raw.min()) == 0.0 and float(raw.max()) == 1.0
    assert torch.equal(raw * 16, torch.round(raw * 16))  # the counts, whole
    mean, std = json.loads(meta["input_mean"])[0], json.loads(meta["input_std"])[0]
    x_test = tc.load(digits_ticket).splits().x_test
    assert torch.equal((raw - mean) / std, x_test)


@pytest.mark.parametrize("fmt", ["masked", "prune", "csr", "masks"])
def test_with_preprocessing_is_refused_for_a_state_format_in_one_line(digits_ticket, tmp_path, fmt):
    out = tmp_path / "net.safetensors"
    args = ["export", str(digits_ticket), "--format", fmt, "--out", str(out), "--with-preprocessing", "--quiet"]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and not out.exists()
    assert r.stderr.count("\n") == 1 and "--with-preprocessing applies to --format onnx only" in r.stderr


def raw_test_split(dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The test split's raw values as a user has them (pixels / 255; digits' counts / 16), and its labels."""
    pools = DATASETS.get(dataset).load(DataSpec(name=dataset, search_dirs=FASHION_DIRS))
    x = pools.x_test
    if x.dtype == torch.uint8:  # the IDX files' bytes: (N, H, W) pixels
        x = (x.to(torch.float32) / 255.0).reshape(len(x), *DATASETS.get(dataset).shape)
    return x, pools.y_test


@pytest.mark.parametrize("dataset", ["digits", "fashion-mnist"])
@pytest.mark.slow
def test_onnx_with_preprocessing_on_raw_values_gives_the_tickets_predictions(tmp_path, dataset):
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    if dataset == "fashion-mnist":
        require_fashion()
    ticket = make_ticket(tmp_path, "mlp:64-64-10" if dataset == "digits" else "mlp:784-64-10", dataset, "augmented", 8)
    out = tmp_path / "raw.onnx"
    r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--with-preprocessing"])
    assert r.exit_code == 0, r.output
    meta = file_metadata(out)
    assert meta["preprocessing"].startswith("in the graph") and meta["dataset"] == dataset

    import onnxruntime as ort

    raw, y = raw_test_split(dataset)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (logits,) = session.run(["logits"], {"input": raw.numpy()})
    opened = runs_build.open_ticket(ticket, ReaderSpec(data=DataSpec(search_dirs=FASHION_DIRS), device="cpu"))
    assert torch.equal(opened.splits.y_test, y)
    with torch.no_grad():
        expected = opened.net(opened.splits.x_test, opened.masks).numpy()  # the normalised test split
    assert np.abs(logits - expected).max() <= 1e-4 * max(1.0, float(np.abs(expected).max()))
    assert np.array_equal(logits.argmax(1), expected.argmax(1))
    accuracy = int((logits.argmax(1) == y.numpy()).sum()) / len(y)
    assert accuracy == tc.load(ticket).metrics.test.accuracy > 0.3  # trained masks: well above chance

    plain = tmp_path / "plain.onnx"  # without the option the same raw values are silently wrong
    assert runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(plain)]).exit_code == 0
    (unprepared,) = ort.InferenceSession(str(plain), providers=["CPUExecutionProvider"]).run(
        ["logits"], {"input": raw.numpy()}
    )
    assert not np.allclose(unprepared, expected, atol=1e-3)
    assert file_metadata(plain)["preprocessing"].startswith("by the caller")


def test_a_ticket_on_the_callers_tensors_says_what_is_not_known(tmp_path):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(120, 1, 4, 4, generator=g), torch.randint(0, 3, (120,), generator=g)
    ticket = tc.extract("mlp:16-8-3", (x, y), method="random", sparsity=0.5, progress=False)
    path = tmp_path / "t.safetensors"
    ticket.save(path)
    result = export_ticket(path, fmt="masked", out=tmp_path / "net.safetensors")
    meta = file_metadata(tmp_path / "net.safetensors")
    assert meta["dataset"] == "in-memory"
    assert json.loads(meta["input_shape"]) == [16] and json.loads(meta["classes"]) == 3  # the MLP's widths
    missing = json.loads(meta["not_recorded"])
    assert sorted(missing) == ["input_mean", "input_raw", "input_std", "preprocessing"]
    assert all("caller's own tensors" in why for why in missing.values())
    assert not {"input_mean", "input_std", "input_raw"} & set(meta)  # nothing guessed
    assert result.to_document()["inputs"]["normalization"] is None
    assert schema_errors(result.to_document()) == []
    r = runner.invoke(
        app,
        ["export", str(path), "--format", "onnx", "--out", str(tmp_path / "n.onnx"), "--with-preprocessing", "--quiet"],
    )
    if r.exit_code == 2 and "onnx extra" in r.stderr:
        pytest.skip("the onnx extra is not installed")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "does not record" in r.stderr
    assert not (tmp_path / "n.onnx").exists()


def test_a_factory_ticket_records_its_registered_datas_inputs(tmp_path, user_module):
    ticket = make_ticket(tmp_path, f"{user_module}:build_net")
    out = tmp_path / "net.safetensors"
    export_ticket(ticket, fmt="masked", out=out, reader=ReaderSpec(policy=ModelPolicy(trust_model_code=True)))
    meta = file_metadata(out)
    assert json.loads(meta["input_shape"]) == [1, 8, 8] and json.loads(meta["classes"]) == 10
    assert "not_recorded" not in meta and meta["dataset"] == "digits"


def test_every_registered_dataset_declares_a_normalisation_per_channel():
    for name in DATASETS.names():
        info = DATASETS.get(name)
        norm = info.normalization
        assert norm is not None, name
        if info.text:  # character ids: the identity, nothing scaled (an export folds nothing in)
            assert (norm.mean, norm.std, norm.scale) == ((0.0,), (1.0,), 1.0), name
            continue
        assert len(norm.mean) == len(norm.std) == info.shape[0], name
        assert all(s > 0 for s in norm.std) and norm.scale in (16.0, 255.0) and "[0, 1]" in norm.raw, name
