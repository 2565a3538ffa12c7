"""The sparse runtime form of a language model's ticket (gpt-nano, `--dataset text`): `ticket export --format sparse`
writes it in every layout its masks allow, `tc.load_sparse` builds it from the export and from the ticket (one layer
dense at a time, `layout=` as export's `--layout`), and its logits match the ticket's network at every position of
full and shorter sequences. The token embedding, read by the network as a table, stays dense; the export records
the character ids the network takes; hostile files of a text model are refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TEXT_MODEL, invoke, one_line_error, write_text
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as st_save

import ticketcli as tc
from ticketcli.contract.schema import schema_of
from ticketcli.errors import TicketCliError
from ticketcli.export.inputs import IDS
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import seeded
from ticketcli.export.sparse.graph import DIRECT
from ticketcli.export.sparse.measure import DENSE, SPARSE
from ticketcli.export.sparse.net import SparseNet, sparse_module
from ticketcli.export.sparse.skeleton import called_directly, meta_network
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io

LINEAR = ["blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "head"]
TICKETS = {  # name: (model, extract's options)
    "plain": (TEXT_MODEL, ["--sparsity", "0.8"]),
    "blocks": (TEXT_MODEL, ["--block", "4x4"]),
    "nm": (TEXT_MODEL + "-v32", ["--structure", "2:4"]),  # every input width a multiple of 4: the vocabulary too
}


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("lm-sparse")
    text = write_text(d / "a.txt", 1)
    out = {}
    for name, (model, options) in TICKETS.items():
        out[name] = d / f"{name}.safetensors"
        r = invoke(
            "extract", "--model", model, "--dataset", "text", "--text", str(text), "--method", "augmented",
            *options, "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(out[name]),
        )  # fmt: skip
        assert r.exit_code == 0, r.output
    return out


def reference(path: Path) -> tuple[runs_build.MaskedNet, dict[str, torch.Tensor]]:
    tk = ticket_io.load(path)
    net, _ = runs_build.rebuild(tk, path, None)
    return net, {n: tk.masks[n] for n in net.names}


def agrees_everywhere(snet: SparseNet, path: Path) -> None:
    """The form's logits against the ticket's network at every position, for the full context and shorter
    sequences: the largest difference at most 1e-5 of the largest |logit|."""
    net, masks = reference(path)
    g = torch.Generator().manual_seed(7)
    for length in (16, 5, 1):
        ids = torch.randint(0, net.module.vocab, (6, length), generator=g)
        with torch.no_grad():
            ref = net(ids, masks)
        out = snet(ids)
        assert out.shape == ref.shape == (6, length, net.module.vocab)
        assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max()), length


def export(ticket: Path, out: Path, *args: str) -> dict:
    r = invoke("export", str(ticket), "--format", "sparse", "--out", str(out), "--json", "--threads", "1", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_language_model_exports_sparse_and_loads_back_to_its_logits(tickets, tmp_path):
    out = tmp_path / "s.safetensors"
    doc = export(tickets["plain"], out)
    pytest.importorskip("jsonschema").validate(doc, schema_of("export"))
    assert doc["layout"] == "csr"
    records = {r["name"]: r for r in doc["sparse_layers"]}
    assert list(records) == ["tok_embed", *LINEAR]  # the embedding, the projections, the MLP and the head
    assert records["tok_embed"]["form"] == DENSE and records["tok_embed"]["reason"] == DIRECT
    record = ticket_io.load(tickets["plain"]).data.stored["text"]
    assert doc["inputs"]["dtype"] == "int64" and doc["inputs"]["shape"] == [16] and doc["inputs"]["classes"] == 29
    assert doc["inputs"]["text"] == {
        "context": 16, "vocab_size": 29, "ids": IDS, "sha256": record["sha256"], "sources": record["sources"],
    }  # fmt: skip
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert meta["input_dtype"] == "int64" and meta["context"] == "16" and meta["vocab_size"] == "29"
    assert meta["character_ids"] == IDS and meta["text_sha256"] == record["sha256"]
    assert json.loads(meta["text_sources"]) == record["sources"]
    assert "pos_embed" not in load_file(out)  # a fixed function of the geometry, made again when loaded
    loaded = tc.load_sparse(out)
    assert loaded.source == "export" and loaded.metadata["context"] == "16"
    assert [(r.name, r.form) for r in loaded.layers] == [(n, r["form"]) for n, r in records.items()]
    agrees_everywhere(loaded, tickets["plain"])
    again = tc.load_sparse(out, measure=True, batch=2)  # timed again on sequences of ids: the embedding stays dense
    assert again.layers[0].form == DENSE and not isinstance(again.module.tok_embed, sparse_layers.SparseLinear)
    agrees_everywhere(again, tickets["plain"])


@pytest.mark.parametrize("measure", [False, True])
def test_a_language_model_ticket_loads_one_layer_dense_at_a_time(tickets, measure, monkeypatch):
    dense_at_each_layer: list[list[str]] = []
    real_layer = seeded._layer

    def spy(module, name, *args):
        dense_at_each_layer.append([n for n, p in module.named_parameters() if not p.is_meta])
        return real_layer(module, name, *args)

    monkeypatch.setattr(seeded, "_layer", spy)
    snet = tc.load_sparse(tickets["plain"], measure=measure, batch=2)
    assert snet.layer_by_layer and snet.source == "ticket"
    # as each layer is drawn, nothing earlier is dense but the embedding table (and, measured, a layer dense won)
    kept_dense = {f"{r.name}.weight" for r in snet.layers if r.form == DENSE}
    assert dense_at_each_layer[0] == [] and all(set(d) <= kept_dense for d in dense_at_each_layer)
    assert snet.layers[0].reason == DIRECT and snet.metadata["character_ids"] == IDS
    if not measure:
        assert snet.sparse_layers == tuple(LINEAR)
        net, masks = reference(tickets["plain"])
        full = sparse_module(net, masks, measure=False)  # the very arrays the whole network gives
        a, b = snet.module.state_dict(), full.module.state_dict()
        assert a.keys() == b.keys()
        for n in a:
            parts = ("crow_indices", "col_indices", "values") if a[n].layout == torch.sparse_csr else ()
            assert (
                all(torch.equal(getattr(a[n], p)(), getattr(b[n], p)()) for p in parts)
                if parts
                else torch.equal(a[n], b[n])
            ), n
    agrees_everywhere(snet, tickets["plain"])


@pytest.mark.parametrize(("name", "layout"), [("blocks", "bsr"), ("nm", "2:4")])
def test_a_structured_language_model_stores_its_linear_layers_in_its_layout(tickets, name, layout, tmp_path):
    out = tmp_path / "s.safetensors"
    doc = export(tickets[name], out)  # auto: the ticket's structure
    assert doc["layout"] == layout
    records = {r["name"]: r for r in doc["sparse_layers"]}
    assert records.pop("tok_embed")["layout"] is None and all(r["layout"] == layout for r in records.values())
    from_export = tc.load_sparse(out, layout=layout)
    from_ticket = tc.load_sparse(tickets[name], measure=False, layout="auto")
    assert from_ticket.layer_by_layer and set(from_ticket.stored) == set(LINEAR)
    tensors = load_file(out)
    for layer, parts in from_ticket.stored.items():  # the ticket regenerated stores what the export stores
        assert all(torch.equal(arr, tensors[f"{layer}.weight.{part}"]) for part, arr in parts.items()), layer
    for r in from_ticket.layers[1:]:
        assert r.stored == layout and r.form == SPARSE
        assert r.computes == ("bsr" if layout == "bsr" else "2:4" if torch.cuda.is_available() else "csr")
    for snet in (from_export, from_ticket):
        agrees_everywhere(snet, tickets[name])


def test_the_whole_network_path_takes_a_language_model_and_a_layout(tickets, monkeypatch):
    """A ticket that cannot be regenerated layer by layer (a checkpoint's) is rebuilt whole: the same form."""
    monkeypatch.setattr(seeded, "regenerable", lambda *a: False)
    for name, layout in (("plain", "csr"), ("blocks", "bsr")):
        snet = tc.load_sparse(tickets[name], measure=False, layout=layout)
        assert not snet.layer_by_layer and snet.layers[0].reason == DIRECT
        assert {r.stored for r in snet.layers[1:]} == {layout}
        agrees_everywhere(snet, tickets[name])


def test_a_layout_the_ticket_or_the_file_does_not_allow_is_one_line(tickets, tmp_path):
    def refused(*args, **kw) -> str:
        with pytest.raises(TicketCliError) as e:
            tc.load_sparse(*args, **kw)
        assert len(str(e.value).splitlines()) == 1 and "--layout" not in str(e.value), str(e.value)
        return str(e.value)

    assert "needs a block ticket" in refused(tickets["plain"], layout="bsr")
    # the blocks' masks do not fit 2:4, said of a Linear layer: the embedding table is stored dense in any layout
    assert "blocks.0.attn.qkv" in refused(tickets["blocks"], layout="2:4")
    assert "layout=" in refused(tickets["plain"], layout="block")
    assert "layout=" in refused(tickets["plain"], layout=4)
    out = tmp_path / "b.safetensors"
    export(tickets["blocks"], out)
    assert "stored as 'bsr'" in refused(out, layout="csr")
    r = invoke(
        "export",
        str(tickets["plain"]),
        "--format",
        "sparse",
        "--layout",
        "2:4",
        "--out",
        str(tmp_path / "x.safetensors"),
    )
    assert "2:4" in one_line_error(r)


def test_the_skeleton_knows_the_embedding_table_and_computes_its_position_embedding(tickets):
    """The skeleton (meta device) holds the position embedding the network computes, and names as a table the
    layers that running the network finds uncalled (net.make_sparse)."""
    net, masks = reference(tickets["plain"])
    skeleton = meta_network(parse_model(tc.load(tickets["plain"]).model))
    assert all(p.is_meta for p in skeleton.parameters())
    assert torch.equal(skeleton.pos_embed, net.module.pos_embed) and not skeleton.pos_embed.is_meta
    found = {r.name for r in sparse_module(net, masks, measure=False).layers if r.reason == DIRECT}
    assert called_directly(skeleton) == found == {"tok_embed"}


def test_loading_a_language_model_ticket_runs_no_meta_kernel(tickets):
    """A GPT's skeleton and budget are built on the meta device without computing there: torch's meta kernels
    import sympy, mpmath and some 900 modules (150 MiB resident), which would dwarf a small layer-by-layer load."""
    code = (
        "import sys, ticketcli as tc; tc.load_sparse(sys.argv[1], measure=False); "
        "print(sorted(m for m in ('sympy', 'mpmath') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tickets["plain"])], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_a_vit_s_position_embedding_is_made_again_too(tmp_path):
    """The ViT's position embedding is a non-persistent buffer as gpt-nano's: its export loads, and its ticket is
    regenerated layer by layer."""
    spec = RunSpec(
        model=parse_model("vit:p4-d16-l1-h2").with_data((1, 8, 8), 10),
        init=InitSpec(seed=1),
        data=DataSpec(name="digits", n_extract=64, n_val=32),
        method=MethodSpec(name="random", sparsity=0.5),
        device="cpu",
    )
    ticket, out = tmp_path / "vit.safetensors", tmp_path / "s.safetensors"
    runs_extract.extract_ticket(spec, out=ticket)
    export(ticket, out)
    net, masks = reference(ticket)
    x = torch.randn(9, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = net(x, masks)
    for snet in (tc.load_sparse(out), tc.load_sparse(ticket, measure=False)):
        assert float((snet(x) - ref).abs().max()) <= 1e-5 * float(ref.abs().max())
    assert snet.layer_by_layer


# ---- hostile files ----


@pytest.fixture(scope="module")
def made(tickets) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A valid sparse export of the plain ticket, every Linear layer sparse: its tensors and metadata."""
    net, masks = reference(tickets["plain"])
    snet = sparse_module(net, masks, measure=False)
    meta = {"model": tc.load(tickets["plain"]).model} | sparse_file.sparse_metadata(snet)
    return sparse_file.sparse_tensors(snet), meta


def broken(tensors: dict, meta: dict, case: str) -> tuple[dict, dict]:
    t, m = dict(tensors), dict(meta)
    records = json.loads(m["sparse_layers"])
    if case == "embedding stored sparse":  # valid CSR arrays, on the layer the network reads as a table
        w = t.pop("tok_embed.weight")
        csr = w.to_sparse_csr()
        t |= {
            "tok_embed.weight.crow_indices": csr.crow_indices().int(),
            "tok_embed.weight.col_indices": csr.col_indices().int(),
        }
        t["tok_embed.weight.values"] = csr.values()
        records["tok_embed"] |= {"form": SPARSE, "layout": "csr", "reason": "sparse 2x faster"}
    elif case == "position embedding in the file":
        t["pos_embed"] = torch.zeros(16, 16)
    elif case == "no vocabulary":
        m["model"] = "gpt-nano:l1-d16-h2-c16"
    elif case == "another vocabulary":
        m["model"] = "gpt-nano:l1-d16-h2-c16-v40"
    elif case == "width over the budget":
        m["model"] = "gpt-nano:l4-d200000-h2-c16-v29"
    elif case == "context over the budget":  # its position embedding is never made
        m["model"] = "gpt-nano:l1-d16-h2-c100000000-v29"
    elif case == "an image model's name":
        m["model"] = "mlp:64-16-10"
    m["sparse_layers"] = json.dumps(records)
    return t, m


CASES = {
    "embedding stored sparse": "reads its weight as a table",
    "position embedding in the file": "unexpected tensor 'pos_embed'",
    "no vocabulary": "vocabulary",
    "another vocabulary": "shape",
    "width over the budget": "parameters, more than the limit",
    "context over the budget": "of memory at evaluation batches",
    "an image model's name": "sparse_layers names 'tok_embed', no Linear or Conv2d layer",
}


def test_the_unbroken_text_export_loads(made, tmp_path):
    path = tmp_path / "ok.safetensors"
    path.write_bytes(st_save(made[0], metadata=made[1]))
    assert tc.load_sparse(path).sparse_layers == tuple(LINEAR)


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_text_export_is_refused_in_one_line(made, tmp_path, case):
    tensors, meta = broken(*made, case)
    meta["sha256"] = sparse_file.digest(meta, sorted(tensors.items()))  # signed again: the checks refuse it
    path = tmp_path / "bad.safetensors"
    path.write_bytes(st_save(tensors, metadata=meta))
    with pytest.raises(TicketCliError) as e:
        tc.load_sparse(path)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and "not a valid sparse export" in message, message
    assert CASES[case] in message and "digest" not in message, message
