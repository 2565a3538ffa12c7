"""The sparse export's structured layouts: a `--block 4x4` ticket stored as BSR loads and computes the ticket's
network (BSR kernels on the CPU, edge blocks padded), a `--structure 2:4` ticket's compressed 2:4 arrays decompress
to exactly its masked weights and fall back to CSR or dense off CUDA saying why, a layout the masks do not allow is
refused in one line, the file's digest refuses a hand-edited file, and every structured array of a hostile file
is checked before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import save as st_save

import ticketcli as tc
from tests.helpers import invoke, one_line_error
from ticketcli.errors import TicketCliError, TicketFileError, UsageError
from ticketcli.export.run import export_ticket
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse import structured
from ticketcli.export.sparse.load import load_sparse
from ticketcli.export.sparse.measure import DENSE, SPARSE
from ticketcli.export.sparse.net import make_sparse
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.selection.structure import is_blocks
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ReaderSpec, RunSpec

SHAPE = (1, 8, 8)
TICKETS = {  # name: (model, sparsity, the method's structure option)
    "block": ("mlp:64-96-96-10", 0.75, {"block": "4x4"}),  # the last layer's 10 rows end in an edge block of 2
    "block-conv": ("vgg:8-M-16-M", 0.5, {"block": "4x4"}),  # the first conv's 9 inputs end in an edge block of 1
    "nm": ("mlp:64-96-96-10", 0.5, {"structure": "2:4"}),
    "one-of-four": ("mlp:64-96-96-10", 0.75, {"structure": "1:4"}),
    "plain": ("mlp:64-96-96-10", 0.75, {}),
}
CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def tickets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("layouts")
    out = {}
    for name, (model, sparsity, options) in TICKETS.items():
        spec = RunSpec(
            model=parse_model(model).with_data(SHAPE, 10),
            init=InitSpec(seed=3),
            data=DataSpec(name="digits", n_extract=64, n_val=32, split_seed=1),
            method=MethodSpec(name="random", sparsity=sparsity, options=options),
            device="cpu",
        )
        out[name] = d / f"{name}.safetensors"
        runs_extract.extract_ticket(spec, out=out[name])
    return out


def opened(path: Path) -> runs_build.OpenTicket:
    return runs_build.open_ticket(path, ReaderSpec(data=DataSpec(), device="cpu"))


def example(n: int = 17) -> torch.Tensor:
    return torch.randn(n, *SHAPE, generator=torch.Generator().manual_seed(0))


def agree(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


def unmeasured(path: Path, out: Path, layout: str, block: tuple[int, int] | None = None) -> None:
    """The ticket's export in `layout` with every layer sparse (nothing timed), written as the command writes it."""
    op = opened(path)
    snet = make_sparse(op.net, op.masks, measure=False, input_shape=SHAPE, layout=layout, block=block)
    assert op.net.spec is not None
    meta = {"model": op.net.spec.to_string()} | sparse_file.sparse_metadata(snet)
    out.write_bytes(st_save(sparse_file.sparse_tensors(snet), metadata=meta))


def reference(path: Path, x: torch.Tensor) -> torch.Tensor:
    """The ticket's network's outputs (W * M)."""
    op = opened(path)
    with torch.no_grad():
        out: torch.Tensor = op.net(x, op.masks)
    return out


def masked_weight(op: runs_build.OpenTicket, layer: str) -> torch.Tensor:
    w = dict(op.net.module.named_parameters())[f"{layer}.weight"].detach()
    return (w * op.masks[f"{layer}.weight"]).reshape(w.shape[0], -1)


# ---- BSR ----


@pytest.mark.parametrize("name", ["block", "block-conv"])
def test_a_block_ticket_stored_bsr_computes_its_network_with_bsr_kernels(tickets, name, tmp_path):
    path = tmp_path / "bsr.safetensors"
    unmeasured(tickets[name], path, "bsr", (4, 4))
    net = load_sparse(path)
    op = opened(tickets[name])
    assert [r.stored for r in net.layers] == ["bsr"] * len(net.layers)
    assert [r.computes for r in net.layers] == ["bsr"] * len(net.layers)  # 4x4: square, torch's CPU product runs
    assert all(isinstance(m, structured.BsrLinear) for m in (net.module.get_submodule(r.name) for r in net.layers))
    x = example()
    assert agree(net(x), reference(tickets[name], x))
    with safe_open(str(path), "pt") as f:
        stored = sum(f.get_tensor(k).numel() * f.get_tensor(k).element_size() for k in f.keys())
        assert net.nbytes() == stored  # the form holds the file's arrays, nothing dense beside them
        for r in net.layers:  # the blocks stored are exactly the mask's kept blocks, W * M inside them
            crow, col, values = (
                f.get_tensor(f"{r.name}.weight.{p}") for p in ("crow_indices", "col_indices", "values")
            )
            dense = structured.bsr_dense(crow, col, values, tuple(masked_weight(op, r.name).shape))
            assert torch.equal(dense, masked_weight(op, r.name))
            assert values.shape[1:] == (4, 4) and is_blocks(op.masks[f"{r.name}.weight"].numpy(), 4, 4)


def test_the_command_exports_a_block_ticket_as_bsr_and_it_loads_to_the_ticket_s_outputs(tickets, tmp_path):
    out = tmp_path / "b.safetensors"
    r = invoke("export", str(tickets["block"]), "--format", "sparse", "--out", str(out), "--json", "--threads", "1")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["layout"] == "bsr"  # auto: the ticket records --block 4x4
    assert {la["layout"] for la in doc["sparse_layers"]} == {"bsr"}  # stored BSR whatever each layer measured
    for la in doc["sparse_layers"]:
        assert (la["kernel"] is None) == (la["form"] == DENSE)
    net = load_sparse(out)
    assert agree(net(example()), reference(tickets["block"], example()))
    assert [r.form for r in net.layers] == [la["form"] for la in doc["sparse_layers"]]  # as measured on this CPU


def test_non_square_blocks_are_stored_bsr_and_compute_as_csr_on_the_cpu_saying_why(tickets, tmp_path):
    path = tmp_path / "b24.safetensors"
    unmeasured(tickets["block"], path, "bsr", (2, 4))  # 4x4 blocks are also whole 2x4 blocks
    net = load_sparse(path)
    assert {r.stored for r in net.layers} == {"bsr"} and {r.computes for r in net.layers} == {"csr"}
    assert all("square blocks only" in r.reason for r in net.layers)
    assert agree(net(example()), reference(tickets["block"], example()))


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 13),
    cols=st.integers(1, 13),
    r=st.sampled_from([1, 2, 3, 4]),
    c=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 2**16),
)
def test_bsr_arrays_hold_exactly_the_masked_weight_and_multiply_as_it(rows, cols, r, c, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g)
    grid = torch.rand(-(-rows // r), -(-cols // c), generator=g) < 0.5
    mask = grid.repeat_interleave(r, 0).repeat_interleave(c, 1)[:rows, :cols]
    crow, col, values = structured.bsr_arrays(w, mask, (r, c))
    assert torch.equal(structured.bsr_dense(crow, col, values, (rows, cols)), w * mask)
    if r == c:  # the CPU's BSR product: square blocks
        layer = torch.nn.Linear(cols, rows, bias=False)
        padded = (int(crow.numel() - 1) * r, structured.padded(cols, c))
        bsr = structured.bsr_layer(layer, structured.bsr_tensor(crow, col, values, padded), None)
        x = torch.randn(5, cols, generator=g)
        assert torch.allclose(bsr(x), x @ (w * mask).t(), atol=1e-5)


# ---- 2:4 ----


@pytest.mark.parametrize("name", ["nm", "one-of-four"])
def test_a_two_four_export_decompresses_to_exactly_the_masked_weights(tickets, name, tmp_path):
    out = tmp_path / "nm.safetensors"
    result = export_ticket(tickets[name], fmt="sparse", out=out)  # auto: an N:M ticket that fits 2:4
    assert result.layout == "2:4"
    op = opened(tickets[name])
    with safe_open(str(out), "pt") as f:
        for r in result.sparse_layers:
            values, positions = f.get_tensor(f"{r.name}.weight.values"), f.get_tensor(f"{r.name}.weight.positions")
            assert positions.dtype == torch.uint8 and values.shape == positions.shape
            pairs = positions.reshape(positions.shape[0], -1, 2)
            assert bool((pairs[..., 0] < pairs[..., 1]).all()) and int(positions.max()) <= 3
            assert torch.equal(structured.unpack_two_four(values, positions), masked_weight(op, r.name))
    net = load_sparse(out)
    assert agree(net(example()), reference(tickets[name], example()))


@pytest.mark.skipif(CUDA, reason="the fallback of a machine without CUDA")
def test_on_the_cpu_a_two_four_layer_falls_back_and_the_record_says_why(tickets, tmp_path):
    path = tmp_path / "nm.safetensors"
    unmeasured(tickets["nm"], path, "2:4")
    net = load_sparse(path)
    for r in net.layers:
        assert r.stored == "2:4" and r.computes == "csr" and r.form == SPARSE
        assert "CUDA only" in r.reason and "cpu" in r.reason
    assert agree(net(example()), reference(tickets["nm"], example()))


@pytest.mark.skipif(not CUDA, reason="torch's semi-structured (2:4) kernels run on CUDA only; this machine has none")
def test_on_cuda_a_two_four_linear_layer_computes_semi_structured(tickets, tmp_path):  # pragma: no cover
    path = tmp_path / "nm.safetensors"
    unmeasured(tickets["nm"], path, "2:4")
    net = load_sparse(path, device="cuda")
    assert {r.computes for r in net.layers} <= {"2:4", "csr"}
    ref = reference(tickets["nm"], example()).cuda()
    assert float((net(example().cuda()) - ref).abs().max()) <= 1e-2 * float(
        ref.abs().max()
    )  # float16 where float32 is refused


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 6), groups=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_pack_and_unpack_two_four_round_trip_any_mask_of_at_most_two_in_four(rows, groups, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, 4 * groups, generator=g)
    keep = torch.rand(rows, groups, 4, generator=g).argsort(-1) < torch.randint(0, 3, (rows, groups, 1), generator=g)
    mask = keep.reshape(rows, -1)
    assert structured.fits_two_four(mask) is None
    values, positions = structured.pack_two_four(w, mask)
    assert torch.equal(structured.unpack_two_four(values, positions), w * mask)


# ---- refusals ----


@pytest.mark.parametrize(
    ("name", "layout", "words"),
    [("plain", "bsr", "block ticket"), ("plain", "2:4", "at most 2 kept"), ("nm", "bsr", "2:4, not blocks")],
)
def test_a_layout_the_masks_do_not_allow_is_refused_in_one_line(tickets, tmp_path, name, layout, words):
    out = tmp_path / "x.safetensors"
    r = invoke("export", str(tickets[name]), "--format", "sparse", "--layout", layout, "--out", str(out))
    assert r.exit_code == 2 and words in one_line_error(r)
    assert not out.exists()
    with pytest.raises(UsageError, match=words):
        tc.load(tickets[name]).export("sparse", out, layout=layout)


def test_layout_applies_to_the_sparse_format_only(tickets, tmp_path):
    r = invoke("export", str(tickets["block"]), "--format", "csr", "--layout", "bsr", "--out", str(tmp_path / "c.pt"))
    assert r.exit_code == 2 and "--format sparse only" in one_line_error(r)


# ---- the digest and hostile structured arrays ----


@pytest.fixture(scope="module")
def structured_exports(tickets, tmp_path_factory) -> dict[str, tuple[dict[str, torch.Tensor], dict[str, str]]]:
    d = tmp_path_factory.mktemp("structured")
    out = {}
    for name, layout, block in (("block", "bsr", (4, 4)), ("nm", "2:4", None)):
        path = d / f"{name}.safetensors"
        unmeasured(tickets[name], path, layout, block)
        with safe_open(str(path), "pt") as f:
            out[layout] = ({k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata()))
    return out


def signed(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> bytes:
    """The file with its digest made again: a hostile file need not be a hand-edited one."""
    meta = meta | {"sha256": sparse_file.digest(meta, sorted(tensors.items()))}
    return st_save(tensors, metadata=meta)


def test_a_hand_edited_file_is_refused_by_its_digest(structured_exports, tmp_path):
    tensors, meta = structured_exports["bsr"]
    path = tmp_path / "ok.safetensors"
    path.write_bytes(st_save(tensors, metadata=meta))
    assert len(load_sparse(path).layers) == 3
    edited = dict(tensors)
    edited["layers.1.weight.values"] = tensors["layers.1.weight.values"] * 2  # same shapes, same indices
    path.write_bytes(st_save(edited, metadata=meta))
    with pytest.raises(TicketFileError, match="sha256 digest") as e:
        load_sparse(path)
    assert len(str(e.value).splitlines()) == 1
    records = json.loads(meta["sparse_layers"])
    records["layers.0"]["reason"] = "faster, promise"
    path.write_bytes(st_save(tensors, metadata=meta | {"sparse_layers": json.dumps(records)}))
    with pytest.raises(TicketFileError, match="sha256 digest"):
        load_sparse(path)
    path.write_bytes(st_save(tensors, metadata={k: v for k, v in meta.items() if k != "sha256"}))
    with pytest.raises(TicketFileError, match="sha256 digest"):
        load_sparse(path)


def _set(t: dict[str, torch.Tensor], name: str, index: tuple[int, ...], value: int) -> None:
    a = t[name].clone()
    a[index] = value
    t[name] = a


def broken(layout: str, case: str, tensors: dict, meta: dict) -> tuple[dict, dict]:
    t, m = dict(tensors), dict(meta)
    w = "layers.1.weight"
    records = json.loads(m["sparse_layers"])
    if case == "block column out of range":
        _set(t, f"{w}.col_indices", (-1,), 96 // 4)
    elif case == "negative block column":
        _set(t, f"{w}.col_indices", (0,), -1)
    elif case == "block columns not increasing":
        col = t[f"{w}.col_indices"].clone()
        col[0], col[1] = int(col[1]), int(col[0])
        t[f"{w}.col_indices"] = col
    elif case == "block rows decreasing":
        _set(t, f"{w}.crow_indices", (3,), int(t[f"{w}.crow_indices"][4]) + 1)
    elif case == "block rows not one per block row":
        t[f"{w}.crow_indices"] = t[f"{w}.crow_indices"][:-1].clone()
    elif case == "blocks of zero side":
        t[f"{w}.values"] = torch.zeros(t[f"{w}.values"].shape[0], 0, 4)
    elif case == "blocks too big":
        t[f"{w}.values"] = torch.zeros(1, 2048, 1)
        t[f"{w}.col_indices"] = torch.zeros(1, dtype=torch.int32)
        t[f"{w}.crow_indices"] = torch.tensor([0, 1], dtype=torch.int32)
    elif case == "more blocks than the grid":
        n = (96 // 4) ** 2 + 1
        t[f"{w}.values"] = torch.zeros(n, 4, 4)
        t[f"{w}.col_indices"] = torch.zeros(n, dtype=torch.int32)
    elif case == "2-D block values":
        t[f"{w}.values"] = t[f"{w}.values"].reshape(t[f"{w}.values"].shape[0], -1).clone()
    elif case == "nnz beyond the blocks":
        records["layers.1"]["nnz"] = t[f"{w}.values"].numel() + 1
    elif case == "position out of range":
        _set(t, f"{w}.positions", (0, 1), 4)
    elif case == "positions not increasing":
        _set(t, f"{w}.positions", (0, 0), int(t[f"{w}.positions"][0, 1]))
    elif case == "int64 positions":
        t[f"{w}.positions"] = t[f"{w}.positions"].long()
    elif case == "values of another shape":
        t[f"{w}.values"] = t[f"{w}.values"][:, :-2].clone()
    elif case == "nnz beyond the values":
        records["layers.1"]["nnz"] = t[f"{w}.values"].numel() + 1
    elif case == "a layout of no kind":
        records["layers.1"]["layout"] = "magic"
    elif case == "another layout's arrays":
        records["layers.1"]["layout"] = "csr" if layout == "2:4" else "2:4"
    m["sparse_layers"] = json.dumps(records)
    return t, m


BSR_CASES = [
    "block column out of range",
    "negative block column",
    "block columns not increasing",
    "block rows decreasing",
    "block rows not one per block row",
    "blocks of zero side",
    "blocks too big",
    "more blocks than the grid",
    "2-D block values",
    "nnz beyond the blocks",
    "a layout of no kind",
    "another layout's arrays",
]
TWO_FOUR_CASES = [
    "position out of range",
    "positions not increasing",
    "int64 positions",
    "values of another shape",
    "nnz beyond the values",
    "a layout of no kind",
    "another layout's arrays",
]


@pytest.mark.parametrize(("layout", "case"), [("bsr", c) for c in BSR_CASES] + [("2:4", c) for c in TWO_FOUR_CASES])
def test_a_hostile_structured_array_is_refused_in_one_line_before_anything_is_built(
    structured_exports, tmp_path, layout, case
):
    tensors, meta = broken(layout, case, *structured_exports[layout])
    path = tmp_path / "bad.safetensors"
    path.write_bytes(signed(tensors, meta))  # signed again: the checks below the digest are what refuse it
    with pytest.raises(TicketCliError) as e:
        load_sparse(path)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and "not a valid sparse export" in message
    assert "digest" not in message


PARTS = ("crow_indices", "col_indices", "values")
SIZES = [(0, (96, 64)), (1, (96, 96)), (2, (10, 96))]


def test_a_record_s_device_and_kernel_are_text_of_the_file_not_trusted(structured_exports, tmp_path):
    tensors, meta = structured_exports["bsr"]
    records = json.loads(meta["sparse_layers"])
    for i, (device, kernel) in enumerate([("cuda:no-such", "magic"), ("\x00", 5), ("cpu", "csr")]):
        records[f"layers.{i}"] |= {"device": device, "kernel": kernel, "form": "sparse"}
    path = tmp_path / "odd.safetensors"
    path.write_bytes(signed(tensors, meta | {"sparse_layers": json.dumps(records)}))
    net = load_sparse(path)
    assert [r.computes for r in net.layers] == ["bsr", "bsr", "csr"]  # the last: CSR measured faster on a CPU
    x = example()
    assert torch.allclose(net(x), load_sparse(tmp_path / "odd.safetensors", measure=False)(x))
    dense = [structured.bsr_dense(*(tensors[f"layers.{i}.weight.{p}"] for p in PARTS), shape) for i, shape in SIZES]
    a = x.flatten(1)
    for i, w in enumerate(dense):
        a = a @ w.t()
        a = torch.relu(a) if i < 2 else a
    assert agree(net(x), a)
