"""`ticket export --format onnx`: for every built-in model (and a user's factory), onnxruntime running the exported
graph reproduces the ticket's network on its test split (logits within 1e-5, the same accuracy), with a named input
and output and a dynamic batch dimension; what cannot be exported ends in one error line and writes nothing."""

from __future__ import annotations

import json
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import torch
from helpers import FASHION_DIRS, require_fashion
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.registry import DATASETS
from ticketcli.export.onnx import ONNX_INPUT, ONNX_OUTPUT
from ticketcli.export.run import export_ticket
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.runs.record import model_record
from ticketcli.seeding import fingerprint
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import ModelRecord

if TYPE_CHECKING:  # onnx and onnxruntime take seconds to import: each test that reads a graph imports them
    import onnx
    import onnxruntime as ort

runner = CliRunner()
TOLERANCE = 1e-5


def make_ticket(tmp_path: Path, model: str, *, dataset: str = "digits", method: str = "random") -> Path:
    """A small ticket on the dataset's own shape: `random` masks (no training) unless a method is named."""
    spec = RunSpec(
        model=parse_model(model).with_data(DATASETS.get(dataset).shape, 10),
        init=InitSpec(seed=3),
        data=DataSpec(name=dataset, n_extract=64, n_val=32, split_seed=3, search_dirs=FASHION_DIRS),
        method=MethodSpec(name=method, sparsity=0.7, epochs=1, batch_size=32),
        device="cpu",
    )
    out = tmp_path / "ticket.safetensors"
    runs_extract.extract_ticket(spec, out=out)
    return out


def export_onnx(ticket: Path, out: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--json", *extra])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["file_bytes"] == out.stat().st_size and doc["format"] == "onnx"
    return doc


def read_graph(path: Path) -> onnx.ModelProto:
    import onnx

    return onnx.load(str(path))


def session(path: Path) -> ort.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def agreement(
    ticket: Path, path: Path, policy: ModelPolicy = ModelPolicy(), x_more: torch.Tensor | None = None
) -> dict:
    """onnxruntime against the ticket's network (BatchNorm recalibrated, as evaluate does) on the test split; with
    `x_more`, also the largest difference on those inputs fed one at a time and as one batch."""
    data = DataSpec(search_dirs=FASHION_DIRS)
    opened = runs_build.open_ticket(ticket, ReaderSpec(data=data, device="cpu", policy=policy))
    opened.net.calibrate(opened.masks)
    x, y = opened.splits.x_test, opened.splits.y_test
    with torch.no_grad():
        expected = opened.net(x, opened.masks)
    sess = session(path)
    got = torch.from_numpy(sess.run([ONNX_OUTPUT], {ONNX_INPUT: x.numpy()})[0])
    assert got.shape == expected.shape
    more = 0.0
    if x_more is not None:
        with torch.no_grad():
            want = opened.net(x_more, opened.masks).numpy()
        for batch in (x_more[:1], x_more):  # one example, and a batch size the exporter never saw
            out = sess.run([ONNX_OUTPUT], {ONNX_INPUT: batch.numpy()})[0]
            more = max(more, float(np.abs(out - want[: batch.shape[0]]).max()))
    return {
        "more_diff": more,
        "diff": float((got - expected).abs().max()),
        "onnx_accuracy": int((got.argmax(1) == y).sum()) / len(y),  # counted as evaluate counts them
        "torch_accuracy": int((expected.argmax(1) == y).sum()) / len(y),
        "recorded_accuracy": ticket_io.load(ticket).metrics.test.accuracy,
        "batch": x.shape[0],
    }


IMAGE_MODELS = [
    ("mlp:64-16-10+bias", "augmented"),  # trained masks: an accuracy well above chance to agree on
    ("mlp:64-16-16-10+res+norm=batch", "random"),
    ("mlp:64-16-16-10+res+norm=layer+bias", "random"),
    ("mlp:64-16-10+norm=rms", "random"),
    ("conv2", "random"),
    ("conv4", "random"),
    ("conv6", "random"),
    ("vgg:8-M-16-M+bias", "augmented"),
    ("resnet20", "random"),
    ("resnet18", "random"),
    ("wrn:10-1", "random"),
    ("vit:p4-d16-l1-h2", "random"),
]


@pytest.mark.parametrize(("model", "method"), IMAGE_MODELS, ids=[m for m, _ in IMAGE_MODELS])
@pytest.mark.slow
def test_onnxruntime_reproduces_every_builtin_model_on_the_test_split(tmp_path, model, method):
    ticket = make_ticket(tmp_path, model, method=method)
    out = tmp_path / "net.onnx"
    doc = export_onnx(ticket, out)
    assert doc["onnx"]["input"] == {"name": "input", "shape": ["batch", 1, 8, 8], "dtype": "float32"}
    assert doc["onnx"]["output"] == {"name": "logits", "shape": ["batch", 10]}
    assert doc["onnx"]["max_abs_diff"] <= TOLERANCE
    r = agreement(ticket, out, x_more=torch.randn(7, 1, 8, 8, generator=torch.Generator().manual_seed(5)))
    assert r["diff"] <= TOLERANCE and r["more_diff"] <= TOLERANCE, r  # the batch dimension is dynamic
    assert r["onnx_accuracy"] == r["torch_accuracy"] == r["recorded_accuracy"], r
    meta = {p.key: p.value for p in read_graph(out).metadata_props}
    assert meta["model"] == ticket_io.load(ticket).model.spec and meta["format"] == "ticket-export-onnx"
    assert meta["masks_sha256"] == ticket_io.load(ticket).masks_sha256


@pytest.mark.slow
def test_onnx_of_lenet300_takes_flat_fashion_mnist_sized_inputs(tmp_path):
    """LeNet-300-100 needs 784 inputs: its ticket is on FashionMNIST; the graph takes the dataset's images."""
    require_fashion()
    ticket = make_ticket(tmp_path, "lenet300", dataset="fashion-mnist")
    out = tmp_path / "net.onnx"
    doc = export_onnx(ticket, out)
    assert doc["onnx"]["input"]["shape"] == ["batch", 1, 28, 28]
    r = agreement(ticket, out)
    assert r["diff"] <= TOLERANCE and r["onnx_accuracy"] == r["torch_accuracy"], r


def gpt_ticket(tmp_path: Path, spec: str = "gpt-nano:l1-d16-h2-c8-v20") -> Path:
    """A gpt-nano ticket (extract trains image classifiers, so its masks are drawn here): seeded random masks over
    the weights the ticket's seed rebuilds, the rest of the record from a small extraction."""
    base = ticket_io.load(make_ticket(tmp_path, "mlp:64-16-10"))
    model = parse_model(spec)
    net, weights = runs_build.build_net(model, InitSpec(scheme=base.init.scheme, seed=base.init.seed), None)
    g = torch.Generator().manual_seed(0)
    masks = {n: torch.rand(net.weights[n].shape, generator=g) < 0.5 for n in net.names}
    tk = replace(
        base,
        masks=masks,
        shapes={},
        model=ModelRecord.of(model_record(model, net)),
        weights_sha256=fingerprint(weights),
        masks_sha256=None,
    )
    path = tmp_path / "gpt.safetensors"
    ticket_io.save(tk, path)
    return path


@pytest.mark.slow
def test_onnx_of_gpt_nano_takes_character_ids_of_any_batch_and_length(tmp_path):
    ticket = gpt_ticket(tmp_path)
    out = tmp_path / "gpt.onnx"
    doc = export_onnx(ticket, out)
    assert doc["onnx"]["input"] == {"name": "input", "shape": ["batch", "sequence"], "dtype": "int64"}
    assert doc["onnx"]["output"]["shape"] == ["batch", "sequence", 20]
    tk = ticket_io.load(ticket)
    net, _ = runs_build.rebuild(tk, ticket, None)
    sess = session(out)
    ids = torch.randint(0, 20, (6, 8), generator=torch.Generator().manual_seed(1))
    for x in (ids, ids[:1], ids[:, :3]):  # the full context, one sequence, a shorter one
        with torch.no_grad():
            expected = net(x, tk.masks)
        got = torch.from_numpy(sess.run([ONNX_OUTPUT], {ONNX_INPUT: x.numpy()})[0])
        assert got.shape == expected.shape
        assert float((got - expected).abs().max()) <= TOLERANCE
        assert torch.equal(got.argmax(-1), expected.argmax(-1))  # the same next-character predictions


@pytest.mark.slow
def test_onnx_of_a_user_factory_with_batchnorm(tmp_path, user_module):
    ticket = make_ticket(tmp_path, f"{user_module}:build_net", method="augmented")
    out = tmp_path / "user.onnx"
    r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out)])
    assert r.exit_code == 2 and "--trust-model-code" in r.stderr and not out.exists()  # a factory is not imported
    export_onnx(ticket, out, "--trust-model-code")
    r = agreement(ticket, out, ModelPolicy(trust_model_code=True))
    assert r["diff"] <= TOLERANCE and r["onnx_accuracy"] == r["torch_accuracy"], r


UNTRACEABLE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(64, 10)
        self.b = nn.Linear(64, 10)

    def forward(self, x):
        x = x.flatten(1)
        if float(x.sum()) > 0:  # control flow on the input's values: no graph can hold it
            return self.a(x)
        return self.b(x)


def build():
    return Net()
"""


def one_line(r) -> str:
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


@pytest.mark.slow
def test_an_untraceable_factory_is_one_error_line_and_no_file(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"untraceable_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(UNTRACEABLE))
    sys.modules.pop(name, None)
    ticket = make_ticket(tmp_path, f"{name}:build")
    out = tmp_path / "net.onnx"
    r = runner.invoke(
        app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--trust-model-code", "--quiet"]
    )
    assert "cannot be exported to ONNX" in one_line(r) and not out.exists()
    sys.modules.pop(name, None)


def test_without_the_extra_onnx_is_one_error_line_naming_it(tmp_path, monkeypatch):
    ticket = make_ticket(tmp_path, "mlp:64-16-10")
    out = tmp_path / "net.onnx"
    for missing in ("onnx", "onnxruntime", "onnxscript"):
        monkeypatch.setitem(sys.modules, missing, None)  # `import onnxscript` now raises ImportError
        r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--quiet"])
        line = one_line(r)
        assert missing in line and "pip install 'ticketcli[onnx]'" in line and not out.exists()
        monkeypatch.delitem(sys.modules, missing)
    # the other formats do not need it
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    assert (
        runner.invoke(
            app, ["export", str(ticket), "--format", "masked", "--out", str(out.with_suffix(".pt"))]
        ).exit_code
        == 0
    )


@pytest.mark.slow
def test_onnx_destination_rules(tmp_path):
    ticket = make_ticket(tmp_path, "mlp:64-16-10")
    out = tmp_path / "net.onnx"
    out.write_bytes(b"keep me")
    r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--quiet"])
    assert "already exists" in one_line(r) and out.read_bytes() == b"keep me"
    export_onnx(ticket, out, "--force")
    assert read_graph(out).graph.input[0].name == "input"
    for fmt, name in (("onnx", "net.safetensors"), ("onnx", "net.pt"), ("masked", "net2.onnx")):
        r = runner.invoke(app, ["export", str(ticket), "--format", fmt, "--out", str(tmp_path / name), "--quiet"])
        assert ".onnx" in one_line(r) and not (tmp_path / name).exists()


def test_a_ticket_that_cannot_be_rebuilt_writes_no_onnx(tmp_path):
    ticket = make_ticket(tmp_path, "mlp:64-16-10")
    out = tmp_path / "net.onnx"
    tk = ticket_io.load(ticket)
    ticket_io.save(replace(tk, weights_sha256="0" * 64), tmp_path / "drawn.safetensors")  # not these weights
    drawn = ["export", str(tmp_path / "drawn.safetensors"), "--format", "onnx", "--out", str(out), "--quiet"]
    r = runner.invoke(app, drawn)
    assert "fingerprint" in one_line(r) and not out.exists()
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 64)
    junk = ["export", str(tmp_path / "junk.safetensors"), "--format", "onnx", "--out", str(out), "--quiet"]
    r = runner.invoke(app, junk)
    one_line(r)
    assert not out.exists()


@pytest.mark.slow
def test_export_ticket_onnx_result(tmp_path):
    """The Python function behind the command: the same file and report, the graph's initializers counted."""
    ticket = make_ticket(tmp_path, "vgg:8-M-16-M+bias")
    result = export_ticket(ticket, fmt="onnx", out=tmp_path / "v.onnx")
    model = read_graph(tmp_path / "v.onnx")
    assert result.tensors == len(model.graph.initializer) and result.file_bytes == (tmp_path / "v.onnx").stat().st_size
    assert [o.name for o in model.graph.output] == ["logits"] and result.onnx is not None
    assert result.to_document()["onnx"]["opset"] == result.onnx.opset
    # the masked entries are zero in the graph's weights: every masked weight is an initializer, W * M
    from onnx import numpy_helper

    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    tk = ticket_io.load(ticket)
    for n, m in tk.masks.items():
        assert n in weights, sorted(weights)
        assert np.all(weights[n][~m.numpy()] == 0)
