"""The sparse runtime form: its outputs equal the ticket's dense W * M to float32 rounding (MLP and conv tickets on
digits), each layer's decision is recorded, the export file round-trips and refuses hostile files in one line, and
a ticket regenerated one layer at a time gives the very arrays the full network gives."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from safetensors.torch import save as st_save

import ticketcli as tc
from tests.helpers import invoke, one_line_error
from ticketcli.contract.schema import schema_of
from ticketcli.errors import TicketCliError, TicketFileError
from ticketcli.export.run import export_ticket
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import seeded
from ticketcli.export.sparse.load import load_sparse
from ticketcli.export.sparse.measure import DENSE, SPARSE
from ticketcli.export.sparse.net import SparseNet, sparse_module
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ReaderSpec, RunSpec

MODELS = {"mlp": "mlp:64-96-96-10+bias", "conv": "vgg:8-M-16-M+bias"}
SHAPE = (1, 8, 8)


def agree(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """float32 rounding: the largest difference at most 1e-5 of the largest |logit|."""
    return float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sparse")
    out = {}
    for kind, model in MODELS.items():
        spec = RunSpec(
            model=parse_model(model).with_data(SHAPE, 10),
            init=InitSpec(seed=5),
            data=DataSpec(name="digits", n_extract=64, n_val=32, split_seed=1),
            method=MethodSpec(name="random", sparsity=0.9),
            device="cpu",
        )
        out[kind] = d / f"{kind}.safetensors"
        runs_extract.extract_ticket(spec, out=out[kind])
    return out


def opened(path: Path) -> runs_build.OpenTicket:
    return runs_build.open_ticket(path, ReaderSpec(data=DataSpec(), device="cpu"))


def example(n: int = 33) -> torch.Tensor:
    return torch.randn(n, *SHAPE, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", MODELS)
@pytest.mark.parametrize("measure", [False, True])
def test_sparse_form_equals_dense_w_times_m(tickets, kind, measure):
    op = opened(tickets[kind])
    x = torch.cat([example(), op.splits.x_test[:64].cpu()])
    with torch.no_grad():
        ref = op.net(x, op.masks)
    snet = sparse_module(op.net, op.masks, measure=measure, batch=16, input_shape=SHAPE)
    assert agree(snet(x), ref)
    names = [n for n, m in op.net.module.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    assert [r.name for r in snet.layers] == names
    for r in snet.layers:
        layer = snet.module.get_submodule(r.name)
        sparse = isinstance(layer, (sparse_layers.SparseLinear, sparse_layers.SparseConv2d))
        assert sparse == (r.form == SPARSE)
        assert r.nnz == int(op.masks[f"{r.name}.weight"].sum()) and r.density == pytest.approx(r.nnz / layer_size(r))
        if measure:  # the faster form is kept, and the reason says by how much
            assert r.sparse_ms is not None and r.dense_ms is not None and r.batch == 16 and r.device == "cpu"
            assert (r.form == SPARSE) == (r.sparse_ms < r.dense_ms)
            assert r.reason == (
                f"sparse {r.speedup:.2g}x faster" if r.form == SPARSE else f"dense: sparse {r.speedup:.2g}x"
            )
        else:
            assert r.form == SPARSE and r.reason == "sparse: not measured" and r.sparse_ms is None
    assert set(snet.sparse_layers) == {r.name for r in snet.layers if r.form == SPARSE}
    assert op.net.module.get_submodule(names[0]).weight.layout == torch.strided  # the original is untouched


def layer_size(r) -> int:
    n = 1
    for d in r.shape:
        n *= d
    return n


def test_masks_that_do_not_fit_are_refused():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with pytest.raises(TicketCliError, match="shape"):
        sparse_module(net, {"0.weight": torch.ones(3, 5, dtype=torch.bool)}, measure=False)
    with pytest.raises(TicketCliError, match="names no parameter"):
        sparse_module(net, {"1.weight": torch.ones(3, 4, dtype=torch.bool)}, measure=False)
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3))
    with pytest.raises(TicketCliError, match="input_shape"):
        sparse_module(conv, {"0.weight": torch.ones(2, 1, 3, 3, dtype=torch.bool)})


@pytest.mark.parametrize("kind", MODELS)
def test_export_round_trips_with_its_records_and_inputs(tickets, kind, tmp_path):
    out = tmp_path / "s.safetensors"
    result = export_ticket(tickets[kind], fmt="sparse", out=out)
    op = opened(tickets[kind])
    x = example()
    with torch.no_grad():
        ref = op.net(x, op.masks)
    snet = load_sparse(out)
    assert isinstance(snet, SparseNet) and snet.source == "export" and snet.file_bytes == out.stat().st_size
    assert agree(snet(x), ref)
    assert [(r.name, r.form, r.nnz, r.reason) for r in snet.layers] == [
        (r.name, r.form, r.nnz, r.reason) for r in result.sparse_layers
    ]
    meta = snet.metadata
    assert meta["format"] == "ticket-export-sparse" and meta["model"] == tc.load(tickets[kind]).model
    assert json.loads(meta["input_shape"]) == list(SHAPE) and meta["classes"] == "10"
    assert json.loads(meta["input_mean"]) and json.loads(meta["input_std"])  # the digits' normalisation
    assert set(json.loads(meta["sparse_layers"])) == {r.name for r in result.sparse_layers}
    tensors = load_file(out)
    for r in result.sparse_layers:  # the file's arrays are the CSR of W * M, the dense layers W * M
        w = op.net.weights[f"{r.name}.weight"] * op.masks[f"{r.name}.weight"]
        if r.form == SPARSE:
            crow, col = tensors[f"{r.name}.weight.crow_indices"], tensors[f"{r.name}.weight.col_indices"]
            size = (w.shape[0], w[0].numel())
            values = tensors[f"{r.name}.weight.values"]
            rebuilt = torch.sparse_csr_tensor(crow.long(), col.long(), values, size, check_invariants=True)
            assert torch.equal(rebuilt.to_dense().reshape(w.shape), w)
        else:
            assert torch.equal(tensors[f"{r.name}.weight"], w)
    again = load_sparse(out, measure=True, batch=8)  # timed again here: the faster form per layer
    assert agree(again(x), ref) and all(r.sparse_ms is not None for r in again.layers)


@pytest.mark.parametrize("kind", MODELS)
def test_a_ticket_regenerated_layer_by_layer_equals_the_full_build(tickets, kind, monkeypatch):
    lowered: list[list[str]] = []
    real_layer = seeded._layer

    def spy(module, name, *args):
        # when a layer is lowered, no earlier layer holds a dense weight any more: one layer dense at a time
        dense = [n for n, p in module.named_parameters() if not p.is_meta and n.endswith("weight")]
        lowered.append(dense)
        return real_layer(module, name, *args)

    monkeypatch.setattr(seeded, "_layer", spy)
    by_layer = load_sparse(tickets[kind], measure=False)
    assert by_layer.layer_by_layer and by_layer.source == "ticket" and lowered and not any(lowered)
    op = opened(tickets[kind])
    full = sparse_module(op.net, op.masks, measure=False)
    a, b = by_layer.module.state_dict(), full.module.state_dict()
    assert a.keys() == b.keys()
    for n in a:
        if a[n].layout == torch.sparse_csr:
            parts = ("crow_indices", "col_indices", "values")
            assert all(torch.equal(getattr(a[n], p)(), getattr(b[n], p)()) for p in parts), n
        else:
            assert torch.equal(a[n], b[n]), n
    x = example()
    with torch.no_grad():
        assert agree(by_layer(x), op.net(x, op.masks))
    assert json.loads(by_layer.metadata["input_shape"]) == list(SHAPE)


def test_a_ticket_whose_weights_cannot_be_reproduced_is_refused(tickets, tmp_path):
    blob = tickets["mlp"].read_bytes()
    digest = tc.load(tickets["mlp"]).record.weights_sha256.encode()
    other = tmp_path / "other.safetensors"
    other.write_bytes(blob.replace(digest, b"0" * len(digest)))  # a fingerprint these weights do not have
    with pytest.raises(TicketFileError, match="fingerprint mismatch") as e:
        load_sparse(other, measure=False)
    assert len(str(e.value).splitlines()) == 1


# ---- hostile files ----


@pytest.fixture(scope="module")
def export(tickets, tmp_path_factory) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A valid sparse export of the MLP ticket with every layer sparse: its tensors and metadata."""
    op = opened(tickets["mlp"])
    snet = sparse_module(op.net, op.masks, measure=False)
    meta = {"model": MODELS["mlp"]} | sparse_file.sparse_metadata(snet)
    return sparse_file.sparse_tensors(snet), meta


def breaks(tensors: dict, meta: dict, name: str) -> tuple[dict, dict]:
    t, m = dict(tensors), dict(meta)
    w = "layers.1.weight"
    if name == "wrong shape":
        t["layers.1.bias"] = torch.zeros(95)
    elif name == "crow length":
        t[f"{w}.crow_indices"] = t[f"{w}.crow_indices"][:-1].clone()
    elif name == "column out of range":
        col = t[f"{w}.col_indices"].clone()
        col[-1] = 96
        t[f"{w}.col_indices"] = col
    elif name == "negative column":
        col = t[f"{w}.col_indices"].clone()
        col[0] = -1
        t[f"{w}.col_indices"] = col
    elif name == "unsorted columns":
        col = t[f"{w}.col_indices"].clone()
        col[0], col[1] = int(col[1]), int(col[0])
        t[f"{w}.col_indices"] = col
    elif name == "crow decreasing":
        crow = t[f"{w}.crow_indices"].clone()
        crow[5] = crow[6] + 1
        t[f"{w}.crow_indices"] = crow
    elif name == "crow not ending at nnz":
        crow = t[f"{w}.crow_indices"].clone()
        crow[-1] -= 1
        t[f"{w}.crow_indices"] = crow
    elif name == "float64 values":
        t[f"{w}.values"] = t[f"{w}.values"].double()
    elif name == "float indices":
        t[f"{w}.col_indices"] = t[f"{w}.col_indices"].float()
    elif name == "more entries than the weight":
        n = 96 * 96 + 1
        t[f"{w}.col_indices"] = torch.zeros(n, dtype=torch.int32)
        t[f"{w}.values"] = torch.zeros(n)
    elif name == "missing tensor":
        del t["layers.0.bias"]
    elif name == "extra tensor":
        t["layers.9.weight"] = torch.zeros(1)
    elif name == "metadata not json":
        m["sparse_layers"] = "{not json"
    elif name == "unknown layer":
        m["sparse_layers"] = json.dumps({"layers.7": {"form": "sparse", "reason": "", "nnz": 1}})
    elif name == "bad form":
        layers = json.loads(m["sparse_layers"])
        layers["layers.0"]["form"] = "magic"
        m["sparse_layers"] = json.dumps(layers)
    elif name == "not a sparse export":
        m["format"] = "ticket-export-masked"
    elif name == "model over the budget":
        m["model"] = "mlp:64-2000000-2000000-10"
    elif name == "a factory model":
        m["model"] = "os:system"
    return t, m


HOSTILE = [
    "wrong shape",
    "crow length",
    "column out of range",
    "negative column",
    "unsorted columns",
    "crow decreasing",
    "crow not ending at nnz",
    "float64 values",
    "float indices",
    "more entries than the weight",
    "missing tensor",
    "extra tensor",
    "metadata not json",
    "unknown layer",
    "bad form",
    "not a sparse export",
    "model over the budget",
    "a factory model",
]


def refused(path: Path) -> str:
    with pytest.raises(TicketCliError) as e:
        load_sparse(path)
    assert len(str(e.value).splitlines()) == 1, str(e.value)
    return str(e.value)


def test_the_unbroken_export_loads(export, tmp_path):
    path = tmp_path / "ok.safetensors"
    path.write_bytes(st_save(export[0], metadata=export[1]))
    assert len(load_sparse(path).sparse_layers) == 3


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_sparse_export_is_refused_in_one_line(export, tmp_path, name):
    tensors, meta = breaks(*export, name)
    meta["sha256"] = sparse_file.digest(meta, sorted(tensors.items()))  # signed again: the checks below refuse it
    path = tmp_path / "bad.safetensors"
    path.write_bytes(st_save(tensors, metadata=meta))
    message = refused(path)
    assert "not a valid sparse export" in message or name == "not a sparse export"
    assert "digest" not in message


def test_a_declared_size_bigger_than_the_file_is_refused(export, tmp_path):
    blob = bytearray(st_save(export[0], metadata=export[1]))
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + n])
    header["layers.1.weight.values"]["shape"] = [10**12]
    text = json.dumps(header).encode()
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(blob[8 + n :]))
    refused(path)
    (tmp_path / "short.safetensors").write_bytes(bytes(blob[: len(blob) // 2]))
    refused(tmp_path / "short.safetensors")
    (tmp_path / "noise.safetensors").write_bytes(b"\xff" * 64)
    refused(tmp_path / "noise.safetensors")


# ---- the command line ----


def test_export_format_sparse_json(tickets, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    out = tmp_path / "s.safetensors"
    r = invoke("export", str(tickets["conv"]), "--format", "sparse", "--out", str(out), "--json", "--threads", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert not list(jsonschema.Draft202012Validator(schema_of("export")).iter_errors(doc))
    assert doc["format"] == "sparse" and doc["file_bytes"] == out.stat().st_size
    assert [layer["name"] for layer in doc["sparse_layers"]] == [r.name for r in load_sparse(out).layers]
    assert {layer["form"] for layer in doc["sparse_layers"]} <= {SPARSE, DENSE}
    assert doc["inputs"]["shape"] == list(SHAPE)
    assert tc.load_sparse.__wrapped__ is load_sparse  # the API's keyword checks around it (api/sparse.py)


def test_export_format_sparse_refuses_a_pickle_name(tickets, tmp_path):
    r = invoke("export", str(tickets["mlp"]), "--format", "sparse", "--out", str(tmp_path / "s.pt"))
    assert "safetensors" in one_line_error(r)


def test_dense_of_a_csr_matrix_is_torch_s_to_dense():
    g = torch.Generator().manual_seed(1)
    for rows, cols, density in ((1, 1, 1.0), (7, 300_000, 0.001), (513, 40, 0.3), (20, 20, 0.0)):
        w = torch.randn(rows, cols, generator=g)
        mask = torch.rand(rows, cols, generator=g) < density
        csr = sparse_layers.csr_of(w, mask)
        assert torch.equal(sparse_layers.dense_of(csr), w * mask)


def test_a_text_model_is_timed_on_character_ids_not_an_example_shape():
    from ticketcli.export.inputs import Inputs
    from ticketcli.export.sparse.skeleton import image_shape

    assert image_shape(Inputs("digits", SHAPE, "float32", 10, None, None)) == SHAPE
    assert image_shape(Inputs("fortunes", (8,), "int64", 12, None, None)) is None  # ids: net.ids_example


@pytest.mark.parametrize("bias", [False, True])
def test_a_dense_layer_after_a_sparse_one_takes_its_transposed_product_and_the_output_is_contiguous(bias):
    """A SparseLinear hands over its product's transpose (no copy); a Linear kept dense multiplies it as it comes
    (W x^T) and hands over the same layout, a dense Linear on a contiguous input computes as nn.Linear, and the
    caller gets a contiguous output. The dense layers keep their class's behaviour, parameters and state dict."""
    from torch import nn

    g = torch.Generator().manual_seed(0)
    first = nn.Linear(32, 16, bias=False)
    w = first.weight.detach() * (torch.rand(16, 32, generator=g) < 0.2)
    mid, last = nn.Linear(16, 24, bias=bias), nn.Linear(24, 4, bias=bias)
    keys = {**mid.state_dict(), **{f"l.{k}": v for k, v in last.state_dict().items()}}
    sparse = sparse_layers.sparse_layer(first, sparse_layers.csr_of(w, w != 0), None)
    module = nn.Sequential(nn.Linear(32, 32), sparse, nn.ReLU(), mid, nn.ReLU(), last)
    net = SparseNet(module, (), source="module")
    seen: list[bool] = []
    mid.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
    for n in (1, 8, sparse_layers.NARROW, 40):
        x = torch.randn(n, 32, generator=g)
        y = net(x)
        with torch.no_grad():
            h = torch.relu(torch.relu(module[0](x) @ w.t()) @ mid.weight.t() + (mid.bias if bias else 0))
            ref = h @ last.weight.t() + (last.bias if bias else 0)
        assert y.is_contiguous() and torch.allclose(y, ref, atol=1e-5)
    assert seen == [True, False, False, False]  # a single row's transpose is contiguous too
    assert all(isinstance(m, nn.Linear) for m in (module[0], mid, last))
    assert {**mid.state_dict(), **{f"l.{k}": v for k, v in last.state_dict().items()}}.keys() == keys.keys()


@pytest.mark.parametrize("index", [torch.int32, torch.int64])
def test_csr_matmul_is_the_dense_product_on_both_kernels(index):
    """Narrow right-hand sides go to torch.sparse.mm, wide ones to the embedding bag: both give W @ X, empty rows
    and an all-zero weight included."""
    g = torch.Generator().manual_seed(3)
    for rows, cols, density in ((40, 70, 0.05), (9, 300, 0.3), (16, 16, 0.0), (1, 5, 1.0)):
        w = torch.randn(rows, cols, generator=g)
        mask = torch.rand(rows, cols, generator=g) < density
        mask[rows // 2] = False  # a row with nothing kept
        dense = w * mask
        csr = sparse_layers.csr_of(w, mask)
        csr = sparse_layers.csr_tensor(
            csr.crow_indices().to(index), csr.col_indices().to(index), csr.values(), (rows, cols)
        )
        for n in (1, sparse_layers.NARROW - 1, sparse_layers.NARROW, 97):
            x = torch.randn(cols, n, generator=g)
            y = sparse_layers.csr_matmul(csr, x)
            assert y.shape == (rows, n)
            assert torch.allclose(y, dense @ x, atol=1e-5, rtol=1e-5)
