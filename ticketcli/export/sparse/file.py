"""The sparse export file (safetensors, no pickle): per sparse layer its weight's CSR arrays
(`<layer>.weight.crow_indices`, `.col_indices`, int32 or int64; `.values`, float32), every other tensor dense under
its state-dict name (dense layers hold W * M, masked biases b * m), and in the metadata the format, the model spec,
which layers are sparse and why (`sparse_layers`, JSON), and the inputs the network expects (inputs.py).

Reading treats the file as hostile: the header is checked by safetensors, every tensor's name, dtype and shape
against the network the model spec builds (on the meta device, after its budget) before any is read, and every CSR
array's indices before a tensor is made of them. Every problem is one TicketFileError line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse.measure import DENSE, SPARSE, LayerRecord
from ticketcli.export.sparse.net import SparseNet, layer_kind, replace_module
from ticketcli.models.budget import Budget
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.registry import parse_model, text_model
from ticketcli.specs.run import MAX_PARAMS
from ticketcli.ticketfile.meta import strict_json

FORMAT = "ticket-export-sparse"
FORMAT_VERSION = "1"
PARTS = ("crow_indices", "col_indices", "values")
INDEX_DTYPES = {"I32": torch.int32, "I64": torch.int64}
DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.int32: "I32", torch.bool: "BOOL"}


def sparse_tensors(snet: SparseNet) -> dict[str, torch.Tensor]:
    """The file's tensors: each CSR weight as its three arrays, everything else dense, all on the CPU."""
    out: dict[str, torch.Tensor] = {}
    for name, t in snet.module.state_dict().items():
        if t.layout == torch.sparse_csr:
            for part, arr in zip(PARTS, (t.crow_indices(), t.col_indices(), t.values())):
                out[f"{name}.{part}"] = arr.detach().cpu().contiguous()
        else:
            out[name] = t.detach().cpu().contiguous()
    return out


def sparse_metadata(snet: SparseNet) -> dict[str, str]:
    """The format and its layers' records (the caller adds the model spec, fingerprints and inputs)."""
    layers = {r.name: {k: v for k, v in r.to_dict().items() if k != "name"} for r in snet.layers}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "sparse_layers": json.dumps(layers)}


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
    )


def skeleton(spec_text: str, path: Path, max_params: int) -> nn.Module:
    """The model spec's network on the meta device (nothing allocated), after its budget; built-in models only."""
    try:
        spec = parse_model(spec_text)
        if text_model(spec.arch):
            raise UsageError("it names a text model, which has no sparse form")
        if spec.arch == "user":
            raise UsageError(
                f"it names the model factory {spec.factory}, and a sparse export is rebuilt from built-in models only"
            )
        planned_shapes(spec, Budget(max_params))
        with torch.device("meta"):
            return build_model(spec)
    except UsageError as e:
        raise _fail(path, str(e)) from None


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
                raise _fail(path, f"format_version {str(meta.get('format_version'))[:20]!r} is not {FORMAT_VERSION}")
            module = skeleton(meta.get("model", ""), path, max_params)
            masked: dict[str, nn.Module] = {
                n: m for n, m in module.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))
            }
            records = _records(meta, path, masked)
            sparse = {r.name for r in records if r.form == SPARSE}
            for name in sparse:
                if not sparse_layers.lowerable(masked[name]):
                    raise _fail(path, f"layer {name[:60]!r} is recorded sparse, and cannot be lowered")
            _check_names(f, module, sparse, path)
            for name in sparse:
                layer = masked[name]
                weight = _csr(f, f"{name}.weight", tuple(sparse_layers.weight_of(layer).shape), path)
                like = sparse_layers.param(layer, "bias")
                bias = None if like is None else _dense(f, f"{name}.bias", like, path)
                replace_module(module, name, sparse_layers.sparse_layer(layer, weight, bias))
            _fill(f, module, path)
    except SafetensorError as e:
        raise _fail(path, str(e).splitlines()[0][:200]) from None
    except (OSError, ValueError) as e:
        raise _fail(path, str(e).splitlines()[0][:200] if str(e) else type(e).__name__) from None
    out = SparseNet(module.to(device), records, source="export", file_bytes=file_bytes, metadata=meta)
    return out


def _check_names(f: Any, module: nn.Module, sparse: set[str], path: Path) -> None:
    """The file holds exactly the network's tensors: three CSR arrays for a sparse layer's weight, and every other
    parameter and buffer dense, with the meta network's dtype and shape (checked from the header alone)."""
    expected: dict[str, tuple[tuple[int, ...] | None, set[str]]] = {}
    for name, t in module.state_dict().items():
        layer = name.rpartition(".")[0]
        if layer in sparse and name.endswith(".weight"):
            rows = t.shape[0]
            expected[f"{name}.crow_indices"] = ((rows + 1,), set(INDEX_DTYPES))
            expected[f"{name}.col_indices"] = (None, set(INDEX_DTYPES))
            expected[f"{name}.values"] = (None, {"F32"})
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
        if shape is not None and got_shape != shape:
            raise _fail(path, f"tensor {name[:60]!r} has shape {list(got_shape)}, the model's is {list(shape)}")
        if shape is None and len(got_shape) != 1:
            raise _fail(path, f"tensor {name[:60]!r} has shape {list(got_shape)}, not one dimension")


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
