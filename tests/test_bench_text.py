"""`ticket bench` on a language model's ticket (gpt-nano, `--dataset text`): every form's logits checked against the
ticket's network at every position of the test blocks, with the same next-character accuracy and bits per character
(the ticket's own, as extract measured them); the forms that cannot be built say why; batch sizes count sequences.
The sparse runtime form of a GPT computes its projections with CSR kernels and keeps the token embedding dense."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.bench import forms as bench_forms
from ticketcli.bench import kernels
from ticketcli.bench.result import BenchResult
from ticketcli.cli.app import app
from ticketcli.contract.schema import schema_of
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import search as sparse_search
from ticketcli.export.sparse.graph import DIRECT
from ticketcli.export.sparse.net import sparse_module
from ticketcli.models.registry import parse_model
from ticketcli.runs.build import build_net
from ticketcli.runtime.threads import using
from ticketcli.specs.run import InitSpec

runner = CliRunner()
MODEL = "gpt-nano:l1-d16-h2-c16"
QUICK = ["--batch", "1,4", "--repeats", "3", "--threads", "1"]
WORDS = "a lazy dog and a quick brown fox sat by the old mill while seven wizards hexed jumbo vats of ale. ".split()


def run(*args: str, code: int = 0) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict]:
    """(ticket, extract's --json) of one augmented extraction on a text the test writes (about 6000 characters)."""
    d = tmp_path_factory.mktemp("lm")
    g = torch.Generator().manual_seed(3)
    text = d / "a.txt"
    text.write_text(" ".join(WORDS[i] for i in torch.randint(len(WORDS), (1400,), generator=g).tolist())[:6000])
    out = d / "t.safetensors"
    doc = run(
        "extract", "--model", MODEL, "--dataset", "text", "--text", str(text), "--method", "augmented",
        "--sparsity", "0.8", "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(out), "--json",
    )  # fmt: skip
    return out, doc


def bench_json(ticket: Path, extracted: dict, *args: str) -> dict[str, dict]:
    """Bench the ticket (`args` more options): its --json validated, every available form checked against the
    ticket's network and against what extract measured; its forms by name."""
    doc = run("bench", str(ticket), *QUICK, "--json", *args)
    pytest.importorskip("jsonschema").validate(doc, schema_of("bench"))
    (t,) = doc["tickets"]
    assert t["sequence_length"] == 16 and t["model"] == extracted["model"]
    assert [p["batch"] for p in t["verdict"]] == [1, 4]
    test = extracted["metrics"]["test"]
    forms = {f["name"]: f for f in t["forms"]}
    for f in forms.values():
        if not f["available"]:
            assert f["reason"] and f["timings"] == []
            continue
        a = f["agreement"]
        assert f["available"] and a["agrees"], f
        assert a["max_abs_diff"] <= a["tolerance"] and a["accuracy"] == a["reference_accuracy"]
        assert a["n"] % 16 == 0 and a["n"] >= 3 * 16  # every position of every test block
        # the ticket's network on its test split is what extract measured: next-character accuracy and bits
        assert a["reference_accuracy"] == pytest.approx(test["accuracy"], abs=1e-12)
        assert a["reference_bits_per_char"] == pytest.approx(test["bits_per_char"], rel=1e-5)
        assert a["bits_per_char"] == pytest.approx(a["reference_bits_per_char"], rel=1e-5)
        assert [x["batch"] for x in f["timings"]] == [1, 4] and f["file_bytes"] > 0
    return forms


def test_every_form_agrees_at_every_position_and_the_others_say_why(made, tmp_path) -> None:
    ticket, extracted = made
    png = tmp_path / "bench.png"
    forms = bench_json(ticket, extracted, "--forms", "sparse,bsr,2:4", "--plot", str(png))
    assert list(forms) == ["dense", "sparse", "bsr", "2:4"] and forms["sparse"]["available"]
    assert forms["dense"]["agreement"]["max_abs_diff"] == 0.0
    assert "tok_embed dense: an embedding table" in forms["sparse"]["description"]
    assert forms["sparse"]["load_s"] > 0 and "made in memory" not in forms["sparse"]["description"]  # read back
    assert not forms["bsr"]["available"] and "whole square blocks" in forms["bsr"]["reason"]
    assert not forms["2:4"]["available"] and "CUDA only" in forms["2:4"]["reason"]
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # the ONNX export takes seconds
def test_onnx_runtime_agrees_at_every_position(made) -> None:
    pytest.importorskip("onnxruntime")
    ticket, extracted = made
    forms = bench_json(ticket, extracted, "--forms", "onnx")
    assert list(forms) == ["dense", "onnx"] and forms["onnx"]["available"]


def test_the_table_counts_sequences_and_shows_bits_per_character(made) -> None:
    ticket, _ = made
    r = runner.invoke(app, ["bench", str(ticket), *QUICK, "--forms", "sparse"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "bits/char" in r.stdout and "batch of sequences of 16 characters" in r.stdout
    assert "sparse: " in r.stdout and "tok_embed dense" in r.stdout and "verdict:" in r.stdout


def test_ticket_bench_and_a_folder_take_a_language_model(made, tmp_path) -> None:
    ticket, _ = made
    result = tc.load(ticket).bench(batch=[2], repeats=3, forms=["sparse"], threads=1, clock="thread")
    assert isinstance(result, BenchResult) and result.tickets[0].sequence_length == 16
    assert all(f.agreement is not None and f.agreement.agrees for f in result.tickets[0].forms)
    folder = tmp_path / "many"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.safetensors").write_bytes(ticket.read_bytes())
    doc = run("bench", str(folder), "--batch", "2", "--repeats", "3", "--forms", "sparse", "--json")
    assert [Path(t["ticket"]).name for t in doc["tickets"]] == ["a.safetensors", "b.safetensors"]
    assert all("error" not in t and t["sequence_length"] == 16 for t in doc["tickets"])


def gpt(spec: str, seed: int, density: float):
    """A MaskedNet of `spec` drawn from `seed`, and random masks of about `density` on every parameter."""
    net, _ = build_net(parse_model(spec), InitSpec(seed=seed), None)
    g = torch.Generator().manual_seed(seed)
    masks = {n: torch.rand(net.weights[n].shape, generator=g) < density for n in net.names}
    return net, masks


@pytest.mark.parametrize(("spec", "seed"), [("gpt-nano:l2-d16-h2-c8-v12", 0), ("gpt-nano:l1-d8-h2-c8-m2-v7+bias", 1)])
def test_the_sparse_form_of_a_gpt_computes_its_projections_sparse_and_matches_dense(spec, seed) -> None:
    net, masks = gpt(spec, seed, 0.3)
    snet = sparse_module(net, masks, measure=False)  # every layer it can lower: sparse
    forms = {r.name: (r.form, r.reason) for r in snet.layers}
    assert forms.pop("tok_embed") == ("dense", DIRECT)
    assert forms and all(form == "sparse" for form, _ in forms.values())
    assert all(isinstance(snet.module.get_submodule(n), sparse_layers.SparseLinear) for n in forms)
    g = torch.Generator().manual_seed(seed + 10)
    for length in (8, 3):  # the full context and a shorter sequence
        ids = torch.randint(0, net.module.vocab, (5, length), generator=g)
        ref = net(ids, masks)
        out = snet(ids)
        assert out.shape == ref.shape
        assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


def test_block_sparse_leaves_the_embedding_table_dense(tmp_path) -> None:
    """Whole 4x4 blocks on every mask: the bench's BSR form swaps the projections and the head for BSR layers, and
    leaves the token embedding (its weight read as a table, never called) a dense layer: the outputs still agree."""
    net, _ = gpt("gpt-nano:l1-d16-h2-c8-v12", 2, 0.5)
    g = torch.Generator().manual_seed(2)
    masks = {}
    for n in net.names:
        rows, cols = net.weights[n].shape
        blocks = torch.rand(-(-rows // 4), -(-cols // 4), generator=g) < 0.5
        masks[n] = blocks.repeat_interleave(4, 0).repeat_interleave(4, 1)[:rows, :cols]
    src = bench_forms.Source(net, masks, torch.device("cpu"), tmp_path, "text")
    built = bench_forms.bsr(src)
    assert "5 of 5 Linear layers as 4x4 blocks" in built.detail  # qkv, proj, fc1, fc2 and head; not tok_embed
    module = built.run
    assert isinstance(module, torch.nn.Module) and not isinstance(module.tok_embed, kernels.SparseLinear)
    ids = torch.randint(0, 12, (3, 8), generator=g)
    with torch.inference_mode():
        ref = net(ids, masks)
        out = module(ids)
    assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


@pytest.mark.parametrize("transposed_out", [None, True, False])
@pytest.mark.parametrize("given", ["2-d", "3-d", "3-d transposed", "3-d in blocks of rows", "3-d transposed in blocks"])
def test_a_sparse_linear_computes_x_w_t_in_every_layout_it_takes_and_returns(transposed_out, given) -> None:
    """SparseLinear on a contiguous input or on a sparse product's transposed view, 2-D or a sequence's 3-D: the
    product of the masked weight, returned contiguous or as a transposed view (None: a view for 2-D only), and a
    dense TransposedInputLinear reads either as nn.Linear does."""
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(7, 12, generator=g), torch.randn(7, generator=g)
    mask = torch.rand(7, 12, generator=g) < 0.3
    x = {
        "2-d": torch.randn(20, 12, generator=g),
        "3-d": torch.randn(4, 5, 12, generator=g),
        "3-d transposed": torch.randn(12, 20, generator=g).t().reshape(4, 5, 12),
        "3-d in blocks of rows": torch.randn(2, sparse_layers.ROWS + 1, 12, generator=g),  # the last block 2 rows
        "3-d transposed in blocks": torch.randn(12, 2 * sparse_layers.COLUMN_FLOATS // 12 + 3, generator=g).t()[None],
    }[given]
    layer = sparse_layers.SparseLinear(sparse_layers.csr_of(w * mask, mask), b, transposed_out)
    ref = torch.nn.functional.linear(x, w * mask, b)
    y = layer(x)
    assert y.shape == ref.shape and float((y - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    transposed = transposed_out if transposed_out is not None else x.dim() == 2
    flat = y.reshape(-1, 7)
    assert flat.is_contiguous() != transposed and flat.t().is_contiguous() == transposed
    dense = torch.nn.Linear(7, 3)
    sparse_layers.dense_linears_take_transposed_inputs(dense)
    assert torch.allclose(dense(y), torch.nn.functional.linear(y.contiguous(), dense.weight, dense.bias), atol=1e-5)
    assert dense(y).dim() == 2 or dense(y).is_contiguous()  # a sequence's product: the layout its adds read


def test_a_measured_gpt_form_is_sparse_only_where_the_network_measured_it_faster() -> None:
    """Measured on the whole network: every record of a projection says the form it computes in, a sparse one
    measured faster than dense there, and the outputs agree; an MLP's first layer starts with its product left
    transposed, as its second layer then reads it without a copy."""
    net, masks = gpt("gpt-nano:l1-d16-h2-c8-v12", 4, 0.2)
    with using(1):  # one thread: a tiny network's calls are not swamped by threads waiting for a busy core
        snet = sparse_module(net, masks, batch=4)
    for r in snet.layers:
        layer = snet.module.get_submodule(r.name)
        assert isinstance(layer, sparse_layers.SparseLinear) == (r.form == "sparse")
        if r.form == "sparse":
            assert r.sparse_ms is not None and r.dense_ms is not None and r.sparse_ms < r.dense_ms
            assert "faster in the network" in r.reason
    ids = torch.randint(0, 12, (3, 8), generator=torch.Generator().manual_seed(4))
    ref = net(ids, masks)
    assert float((snet(ids) - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


def test_the_whole_network_choice_starts_an_mlp_s_first_layer_transposed() -> None:
    net, masks = gpt("gpt-nano:l1-d16-h2-c8-v12", 5, 0.2)
    module = sparse_module(net, masks, measure=False).module
    names = ["blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "head"]
    layers = {n: module.get_submodule(n) for n in names}

    def put(n: str, transposed: bool | None):
        def setup() -> None:
            layers[n].transposed_out = transposed

        return setup

    options = {n: [put(n, None), put(n, False), put(n, True)] for n in names}
    start = sparse_search.chained(module, torch.randint(0, 12, (2, 8)), options)
    assert start == {n: 2 if n == "blocks.0.mlp.fc1" else 1 for n in names}
