"""The sparse export file (safetensors, no pickle): per sparse layer its weight's arrays in the layer's layout
(layouts.py): CSR (`<layer>.weight.crow_indices`, `.col_indices`, int32 or int64; `.values`, float32), BSR (the same
names, `.values` of shape (blocks, R, C)) or 2:4 (`<layer>.weight.values`, float32, and `.positions`, uint8, both
(out, in / 2): structured.py); every other tensor dense under its state-dict name (dense layers hold W * M, masked
biases b * m); and in the metadata the format, the layout, the model spec, each layer's layout, form and why
(`sparse_layers`, JSON), the inputs the network expects (inputs.py) and `sha256`, the digest of the tensors and the
layout (`digest`).

Reading treats the file as hostile: the header is checked by safetensors, every tensor's name, dtype and shape
against the network the model spec builds (on the meta device, after its budget) before any is read, then the
digest (one tensor in memory at a time: a hand-edited file goes no further), then every index array (rows, block
rows, column and position ranges, their order, their counts against the shapes and the records) before a tensor is
made of them. Every problem is one TicketFileError line."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import layouts, structured
from ticketcli.export.sparse.graph import layer_kind, replace_module
from ticketcli.export.sparse.measure import DENSE, SPARSE, LayerRecord
from ticketcli.export.sparse.net import SparseNet
from ticketcli.export.sparse.skeleton import budgeted_network, called_directly
from ticketcli.selection.structure import MAX_GROUP
from ticketcli.specs.run import MAX_PARAMS
from ticketcli.ticketfile.meta import strict_json

FORMAT = "ticket-export-sparse"
FORMAT_VERSION = "2"  # 2: the layouts and the digest
PARTS = ("crow_indices", "col_indices", "values")
INDEX_DTYPES = {"I32": torch.int32, "I64": torch.int64}
DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL", torch.uint8: "U8"}
DIGESTED = ("format", "format_version", "layout", "sparse_layers")  # the metadata the digest covers


def sparse_tensors(snet: SparseNet) -> dict[str, torch.Tensor]:
    """The file's tensors: each CSR weight as its three arrays, a structured layer's weight as stored
    (`SparseNet.stored`), everything else dense, all on the CPU."""
    out: dict[str, torch.Tensor] = {}
    for layer, parts in snet.stored.items():
        out |= {f"{layer}.weight.{part}": arr.detach().cpu().contiguous() for part, arr in parts.items()}
        bias = sparse_layers.param(snet.module.get_submodule(layer), "bias")
        if bias is not None:
            out[f"{layer}.bias"] = bias.cpu().contiguous()
    for name, t in snet.module.state_dict().items():
        if name.rpartition(".")[0] in snet.stored:
            continue
        if t.layout == torch.sparse_csr:
            for part, arr in zip(PARTS, (t.crow_indices(), t.col_indices(), t.values())):
                out[f"{name}.{part}"] = arr.detach().cpu().contiguous()
        else:
            out[name] = t.detach().cpu().contiguous()
    return out


def sparse_metadata(snet: SparseNet) -> dict[str, str]:
    """The format, the layout, its layers' records and the digest of these and of the file's tensors (the caller
    adds the model spec, fingerprints and inputs)."""
    layers = {r.name: {k: v for k, v in r.to_dict().items() if k != "name"} for r in snet.layers}
    layout = next((r.layout for r in snet.layers if r.layout not in (None, structured.CSR)), structured.CSR)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "layout": layout, "sparse_layers": json.dumps(layers)}
    tensors = sparse_tensors(snet)
    return meta | {"sha256": digest(meta, ((n, tensors[n]) for n in sorted(tensors)))}


def digest(meta: Mapping[str, str], tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over the metadata DIGESTED names (each as JSON) and then, in name order, each tensor's name, dtype,
    shape and bytes (little-endian, row-major: safetensors' own)."""
    h = hashlib.sha256(json.dumps([meta.get(k, "") for k in DIGESTED]).encode())
    for name, t in tensors:
        h.update(json.dumps([name, str(t.dtype).removeprefix("torch."), list(t.shape)]).encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def _fail(path: Path, why: str) -> TicketFileError:
    return TicketFileError(f"{path}: not a valid sparse export: {why}")


def _records(meta: Mapping[str, str], path: Path, layers: dict[str, nn.Module]) -> tuple[LayerRecord, ...]:
    """The metadata's per-layer records, each checked against the network's masked layers."""
    try:
        raw = strict_json(meta.get("sparse_layers", ""))
    except ValueError:
        raise _fail(path, "its sparse_layers metadata is not JSON") from None
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, "its sparse_layers metadata is not an object naming the layers")
    records = []
    for name, entry in raw.items():
        if name not in layers:
            raise _fail(path, f"sparse_layers names {str(name)[:60]!r}, no Linear or Conv2d layer of the model")
        records.append(_record(name, entry, layers[name], path))
    return tuple(records)


def _record(name: str, e: Any, layer: nn.Module, path: Path) -> LayerRecord:
    def number(key: str) -> float | None:
        v = e.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise _fail(path, f"layer {name[:60]!r}: {key} is not a non-negative number")
        return float(v)

    if not isinstance(e, dict) or e.get("form") not in (SPARSE, DENSE) or not isinstance(e.get("reason"), str):
        raise _fail(path, f"layer {name[:60]!r}: its record needs form 'sparse' or 'dense' and a reason")
    layout, form = e.get("layout"), e["form"]
    if not (
        (layout is None and form == DENSE)
        or (layout == structured.CSR and form == SPARSE)
        or layout in (structured.BSR, structured.TWO_FOUR)
    ):
        raise _fail(path, f"layer {name[:60]!r}: layout {str(layout)[:20]!r} and form {form!r} do not go together")
    weight = sparse_layers.weight_of(layer)
    shape, size = tuple(weight.shape), weight.numel()
    nnz = e.get("nnz")
    if isinstance(nnz, bool) or not isinstance(nnz, int) or not 0 <= nnz <= size:
        raise _fail(path, f"layer {name[:60]!r}: nnz is not a count of its {size} weights")
    batch = e.get("batch")
    device = e.get("device")
    return LayerRecord(
        name,
        layer_kind(layer),
        shape,
        nnz,
        nnz / max(1, size),
        e["form"],
        e["reason"][:200],
        number("sparse_ms"),
        number("dense_ms"),
        batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None,
        device[:40] if isinstance(device, str) else None,
        layout=layout,
        kernel=e.get("kernel") if e.get("kernel") in (structured.CSR, structured.BSR) else None,
    )


def read_export(
    path: str | Path, *, device: str | torch.device = "cpu", max_params: int = MAX_PARAMS, file_bytes: int = 0
) -> SparseNet:
    """A sparse export back as a SparseNet on `device`, each layer in the form the file records."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta: dict[str, str] = dict(f.metadata() or {})
            if meta.get("format") != FORMAT:
                raise _fail(path, f"its metadata format is {str(meta.get('format'))[:40]!r}, not {FORMAT!r}")
            if meta.get("format_version") != FORMAT_VERSION:
                version = str(meta.get("format_version"))[:20]
                raise _fail(path, f"format_version {version!r} is not {FORMAT_VERSION} (export the ticket again)")
            try:
                module = budgeted_network(meta.get("model", ""), max_params)
            except UsageError as e:
                raise _fail(path, str(e)) from None
            masked: dict[str, nn.Module] = {
                n: m for n, m in module.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))
            }
            records = _records(meta, path, masked)
            stored = {r.name: r.stored for r in records if r.stored is not None}
            direct = called_directly(module)
            for name in stored:
                if not sparse_layers.lowerable(masked[name]):
                    raise _fail(path, f"layer {name[:60]!r} is recorded sparse, and cannot be lowered")
                if name in direct:
                    raise _fail(
                        path, f"layer {name[:60]!r} is recorded sparse, and the network reads its weight as a table"
                    )
            _check_names(f, module, stored, path)
            if meta.get("sha256") != digest(meta, ((n, f.get_tensor(n)) for n in sorted(f.keys()))):
                raise _fail(path, "its tensors or layout do not match the sha256 digest it records (edited by hand?)")
            by_name = {r.name: r for r in records}
            for name, layout in stored.items():
                layer = masked[name]
                shape = tuple(sparse_layers.weight_of(layer).shape)
                like = sparse_layers.param(layer, "bias")
                bias = None if like is None else _dense(f, f"{name}.bias", like, path)
                if layout == structured.CSR:
                    weight = _csr(f, f"{name}.weight", shape, path)
                    replace_module(module, name, sparse_layers.sparse_layer(layer, weight, bias))
                    continue
                made, by_name[name] = _structured(f, name, layer, by_name[name], bias, device, path)
                replace_module(module, name, made)
            records = tuple(by_name[r.name] for r in records)
            _fill(f, module, path)
    except SafetensorError as e:
        raise _fail(path, str(e).splitlines()[0][:200]) from None
    except (OSError, ValueError) as e:
        raise _fail(path, str(e).splitlines()[0][:200] if str(e) else type(e).__name__) from None
    out = SparseNet(module.to(device), records, source="export", file_bytes=file_bytes, metadata=meta)
    return out


def _check_names(f: Any, module: nn.Module, stored: dict[str, str], path: Path) -> None:
    """The file holds exactly the network's tensors: a sparse layer's weight as its layout's arrays (CSR and BSR:
    crow, col, values; 2:4: values, positions), every other parameter and buffer dense, with the meta network's
    dtype and shape (checked from the header alone)."""
    expected: dict[str, tuple[tuple[int, ...] | int, set[str]]] = {}  # a shape, or a number of dimensions
    for name, t in module.state_dict().items():
        layer = name.rpartition(".")[0]
        layout = stored.get(layer)
        if layout is not None and name.endswith(".weight"):
            rows, cols = t.shape[0], math.prod(t.shape[1:])
            if layout == structured.TWO_FOUR:
                if cols % structured.GROUP:
                    raise _fail(
                        path, f"layer {layer[:60]!r} is stored 2:4, and its input width {cols} is no multiple of 4"
                    )
                expected[f"{name}.values"] = ((rows, cols // 2), {"F32"})
                expected[f"{name}.positions"] = ((rows, cols // 2), {"U8"})
                continue
            expected[f"{name}.crow_indices"] = ((rows + 1,) if layout == structured.CSR else 1, set(INDEX_DTYPES))
            expected[f"{name}.col_indices"] = (1, set(INDEX_DTYPES))
            expected[f"{name}.values"] = (1 if layout == structured.CSR else 3, {"F32"})
        else:
            expected[name] = (tuple(t.shape), {DTYPES.get(t.dtype, "?")})
    found = set(f.keys())
    if found != set(expected):
        missing, extra = sorted(set(expected) - found), sorted(found - set(expected))
        what = f"missing {missing[0][:60]!r}" if missing else f"unexpected tensor {extra[0][:60]!r}"
        raise _fail(path, f"{what} ({len(missing)} missing, {len(extra)} unexpected)")
    for name, (shape, dtypes) in expected.items():
        sl = f.get_slice(name)
        got_shape, got_dtype = tuple(sl.get_shape()), sl.get_dtype()
        if got_dtype not in dtypes:
            raise _fail(path, f"tensor {name[:60]!r} is {got_dtype}, not {' or '.join(sorted(dtypes))}")
        if isinstance(shape, tuple) and got_shape != shape:
            raise _fail(path, f"tensor {name[:60]!r} has shape {list(got_shape)}, the model's is {list(shape)}")
        if isinstance(shape, int) and len(got_shape) != shape:
            raise _fail(path, f"tensor {name[:60]!r} has shape {list(got_shape)}, not {shape} dimension(s)")


def _structured(
    f: Any, name: str, layer: nn.Module, record: LayerRecord, bias: torch.Tensor | None, device: Any, path: Path
) -> tuple[nn.Module, LayerRecord]:
    """A bsr or 2:4 layer read, checked, and made in the form it takes on `device` (layouts.loaded)."""
    shape = tuple(sparse_layers.weight_of(layer).shape)
    rows, cols = shape[0], math.prod(shape[1:])
    bsr = None
    if record.stored == structured.BSR:
        bsr = _bsr(f, f"{name}.weight", (rows, cols), record.nnz, path)
        w2 = structured.bsr_dense(bsr.crow_indices(), bsr.col_indices(), bsr.values(), (rows, cols))
    else:
        values, positions = f.get_tensor(f"{name}.weight.values"), f.get_tensor(f"{name}.weight.positions")
        pairs = positions.reshape(rows, -1, structured.KEPT)
        if bool((positions >= structured.GROUP).any()) or bool((pairs[..., 0] >= pairs[..., 1]).any()):
            raise _fail(path, f"{name[:60]}.weight: a 2:4 position lies outside 0..3 or the pair does not increase")
        if record.nnz > values.numel():
            raise _fail(path, f"{name[:60]}: its record's nnz {record.nnz} exceeds the {values.numel()} values stored")
        w2 = structured.unpack_two_four(values, positions)
    dev = torch.device(device) if isinstance(device, str) else device
    return layouts.loaded(layer, record, w2, bsr, bias, dev)


def _bsr(f: Any, name: str, shape: tuple[int, int], nnz: int, path: Path) -> torch.Tensor:
    """A BSR weight's arrays, checked, as a BSR tensor of the weight padded to whole blocks: blocks of 1 to
    MAX_GROUP a side; crow as many as the block rows + 1, from 0, never decreasing, ending at the blocks stored;
    every block column inside the padded width, increasing along its block row; the record's nnz no more than the
    blocks hold."""
    rows, cols = shape
    blocks, r, c = f.get_slice(f"{name}.values").get_shape()
    if not (0 < r <= MAX_GROUP and 0 < c <= MAX_GROUP):
        raise _fail(path, f"{name[:60]}: blocks of {r}x{c}, not sides from 1 to {MAX_GROUP}")
    grid_rows, grid_cols = -(-rows // r), -(-cols // c)
    if f.get_slice(f"{name}.crow_indices").get_shape()[0] != grid_rows + 1:
        raise _fail(path, f"{name[:60]}: crow_indices are not one per block row ({grid_rows}) and one more")
    if f.get_slice(f"{name}.col_indices").get_shape()[0] != blocks or blocks > grid_rows * grid_cols:
        raise _fail(path, f"{name[:60]}: {blocks} blocks, their column indices and a {rows}x{cols} weight disagree")
    if nnz > blocks * r * c:
        raise _fail(path, f"{name[:60]}: its record's nnz {nnz} exceeds the {blocks} blocks of {r}x{c} stored")
    crow, col = f.get_tensor(f"{name}.crow_indices"), f.get_tensor(f"{name}.col_indices")
    _check_compressed(crow, col, blocks, grid_cols, name, path)
    values = f.get_tensor(f"{name}.values")
    return structured.bsr_tensor(crow, col, values, (grid_rows * r, grid_cols * c))


def _check_compressed(crow: torch.Tensor, col: torch.Tensor, nnz: int, cols: int, name: str, path: Path) -> None:
    """Compressed rows' indices: crow from 0, never decreasing, ending at nnz; every column index in 0..cols-1,
    increasing within its row; both of one dtype."""
    if crow.dtype != col.dtype:
        raise _fail(path, f"{name[:60]}: crow_indices and col_indices have different dtypes")
    if int(crow[0]) != 0 or int(crow[-1]) != nnz or bool((crow[1:] < crow[:-1]).any()):
        raise _fail(path, f"{name[:60]}: crow_indices do not run from 0 up to {nnz}")
    if nnz and (int(col.min()) < 0 or int(col.max()) >= cols):
        raise _fail(path, f"{name[:60]}: a column index lies outside 0..{cols - 1}")
    if nnz > 1:
        rising = col[1:] > col[:-1]
        row_starts = torch.zeros(nnz, dtype=torch.bool)
        starts = crow[1:-1].to(torch.int64)
        row_starts[starts[starts < nnz]] = True
        if not bool((rising | row_starts[1:]).all()):
            raise _fail(path, f"{name[:60]}: column indices do not increase within a row")


def _csr(f: Any, name: str, shape: tuple[int, ...], path: Path) -> torch.Tensor:
    """A CSR weight's three arrays, checked: crow starts at 0, never decreases, ends at nnz; every column index
    lies in the row's width, increasing within its row; values as many as columns."""
    rows, cols = shape[0], 1
    for d in shape[1:]:
        cols *= d
    nnz = f.get_slice(f"{name}.col_indices").get_shape()[0]
    if f.get_slice(f"{name}.values").get_shape()[0] != nnz or nnz > rows * cols:
        raise _fail(path, f"{name[:60]}: {nnz} column indices, values and a {rows}x{cols} weight disagree")
    crow, col = f.get_tensor(f"{name}.crow_indices"), f.get_tensor(f"{name}.col_indices")
    _check_compressed(crow, col, nnz, cols, name, path)
    values = f.get_tensor(f"{name}.values")
    return sparse_layers.csr_tensor(crow, col, values, (rows, cols))


def _dense(f: Any, name: str, like: torch.Tensor, path: Path) -> torch.Tensor:
    t: torch.Tensor = f.get_tensor(name)
    if t.dtype != like.dtype or t.shape != like.shape:  # checked from the header already; the data agree
        raise _fail(path, f"tensor {name[:60]!r} does not match its header")
    return t


def _fill(f: Any, module: nn.Module, path: Path) -> None:
    """Every parameter and buffer still on the meta device, read from the file (the sparse layers' are set)."""
    for owner_name, owner in module.named_modules():
        prefix = f"{owner_name}." if owner_name else ""
        for attr, p in list(owner.named_parameters(recurse=False)):
            if p.is_meta:
                setattr(owner, attr, nn.Parameter(_dense(f, prefix + attr, p, path), requires_grad=False))
        for attr, b in list(owner.named_buffers(recurse=False)):
            if b is not None and b.is_meta:
                owner.register_buffer(attr, _dense(f, prefix + attr, b, path))
