"""`ticket export`: a ticket's network in formats that plain PyTorch loads without ticketcli.

masked  W * M for every masked parameter (other parameters and buffers as they are): the model's state dict,
        loadable with plain `load_state_dict`.
prune   torch.nn.utils.prune's layout: `<name>_orig` (the frozen W) and the `<name>_mask` buffer (0/1, W's dtype)
        for every masked parameter; load it after `prune.identity(module, name)` on each of them.
csr     every masked parameter as CSR of its (shape[0], rest) view (`<name>.crow_indices`, `.col_indices`, int32;
        `.values`, float32; `.shape`, int64), other parameters and buffers dense under their own names. A bias of
        shape (n,) is the (n, 1) view, so one loading recipe serves every parameter.
masks   the unpacked bool masks keyed by parameter name.
sparse  the sparse runtime form (export/sparse/): per masked layer that measured faster sparse than dense on this
        CPU, its weight's CSR arrays; every other tensor dense (W * M for dense layers); the metadata records which
        layers are sparse and why. `layout` bsr or 2:4 (a block or N:M ticket; auto picks from the ticket's
        structure) stores every masked layer as BSR or compressed 2:4 instead (export/sparse/layouts.py). Always
        safetensors, with a digest of its tensors; `tc.load_sparse` reads it.
onnx    the masked network (W * M, BatchNorm statistics as evaluate recalibrates them) as an ONNX model with one
        input and one output, named, and a dynamic batch dimension; checked with onnxruntime before it is written.
        Needs the `onnx` extra (onnx, onnxruntime, onnxscript: torch's dynamo-based exporter).

safetensors files (`.safetensors`) or torch.save state dicts (anything else, e.g. `.pt`); `prune` is a `.pt` layout
by nature but is written as safetensors too when asked. An ONNX model is always a `.onnx` file.

Every format's metadata (safetensors' header metadata, a torch.save state dict's `metadata` attribute, ONNX's
metadata_props) holds the same strings: the format, the model spec, the fingerprints, and what the network expects
of its input (inputs.input_metadata: the data's name, shape, dtype, classes and normalisation).
"""

from __future__ import annotations

import collections
import copy
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar, cast

import torch
from safetensors.torch import save as st_save
from torch import nn

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, entries, present
from ticketcli.export import inputs as export_inputs
from ticketcli.export import onnx as export_onnx
from ticketcli.export.request import FORMATS, check_request
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse import layouts as sparse_layouts
from ticketcli.export.sparse.measure import LayerRecord
from ticketcli.export.sparse.net import make_sparse
from ticketcli.export.sparse.skeleton import called_directly, image_shape
from ticketcli.files.atomic import write_atomic
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.models.masked import MaskedNet
from ticketcli.runs import build as runs_build
from ticketcli.runs import inputs as runs_inputs
from ticketcli.specs.run import DataSpec, ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io

STATE_FORMATS = FORMATS[:4]  # the state-dict formats (safetensors or torch.save)


def dense_state(net: MaskedNet) -> dict[str, torch.Tensor]:
    """The model's full state dict (parameters and buffers) with the frozen, unmasked weights."""
    return {n: t.detach().cpu().contiguous() for n, t in net.module.state_dict().items()}


def masked_state(net: MaskedNet, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = dense_state(net)
    for n in net.names:
        state[n] = state[n] * masks[n].to(state[n].dtype)
    return state


def prune_state(net: MaskedNet, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict torch.nn.utils.prune.custom_from_mask leaves on a copy of the module."""
    from torch.nn.utils import prune

    custom_from_mask = cast(Callable[[nn.Module, str, torch.Tensor], nn.Module], prune.custom_from_mask)  # untyped
    module = copy.deepcopy(net.module).cpu()
    owners = dict(module.named_modules())
    for n in net.names:
        owner, _, attr = n.rpartition(".")
        custom_from_mask(owners[owner], attr, masks[n].cpu())
    return {n: t.detach().contiguous() for n, t in module.state_dict().items()}


def csr_state(net: MaskedNet, masks: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], tuple[CsrLayer, ...]]:
    """CSR tensors per masked parameter plus a size report (bytes of values + indices vs dense float32)."""
    state = dense_state(net)
    layers = []
    for n in net.names:
        w = state.pop(n)
        m = masks[n].to(torch.bool)
        # (shape[0], rest) for every rank, a bias's rest being 1: readers need no special case for 1-D tensors
        rows = w.shape[0] if w.dim() > 0 else 1
        # the mask decides which entries are stored (an unmasked exact zero is kept, so nnz = kept)
        keep = m.reshape(rows, -1)
        counts = keep.sum(1)
        crow = torch.zeros(rows + 1, dtype=torch.int64)
        crow[1:] = torch.cumsum(counts, 0)
        col = keep.nonzero()[:, 1]
        values = w.reshape(rows, -1)[keep]
        state[f"{n}.crow_indices"] = crow.to(torch.int32)
        state[f"{n}.col_indices"] = col.to(torch.int32).contiguous()
        state[f"{n}.values"] = values.contiguous()
        state[f"{n}.shape"] = torch.tensor(list(w.shape), dtype=torch.int64)
        csr_bytes = sum(
            state[f"{n}.{k}"].numel() * state[f"{n}.{k}"].element_size()
            for k in ("crow_indices", "col_indices", "values", "shape")
        )
        layers.append(CsrLayer(n, tuple(w.shape), int(values.numel()), w.numel() * 4, csr_bytes))
    return state, tuple(layers)


def recalibrate(
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    tk: ticket_io.Ticket,
    path: Path,
    data: DataSpec,
    chunks: ChunkProgress | None = None,
) -> None:
    """BatchNorm's running statistics for these masks, recomputed on the ticket's own extraction split (found
    through `data`'s search path) exactly as `evaluate` does (runs_build.open_ticket), so eval mode reproduces it;
    `chunks` is told the recalibration's chunks as they finish."""
    splits = runs_build.ticket_splits(tk, path, data)
    assert net.spec is not None  # runs_build.rebuild records the ticket's parsed model spec
    runs_inputs.check_input_shape(net.spec, splits, net)
    net.calibration = splits.x_extract
    net.calibrate(masks, chunks)


def encode(state: dict[str, torch.Tensor], out: Path, metadata: dict[str, str] | None = None) -> bytes:
    """safetensors for a `.safetensors` name (the metadata in its header), else a torch.save state dict: an
    OrderedDict whose `metadata` attribute holds the metadata (torch.load(..., weights_only=True) restores it;
    load_state_dict ignores it)."""
    if out.suffix == ".safetensors":
        return st_save(state, metadata=metadata)
    ordered = collections.OrderedDict(state)
    if metadata is not None:
        setattr(ordered, METADATA_ATTRIBUTE, dict(metadata))
    buf = io.BytesIO()
    torch.save(ordered, buf)
    return buf.getvalue()


METADATA_ATTRIBUTE = "metadata"  # a .pt export's metadata: torch.load(path, weights_only=True).metadata


@dataclass(frozen=True)
class CsrLayer:
    """One masked parameter of a csr export: its shape, stored entries, and bytes as CSR against dense float32."""

    name: str
    shape: tuple[int, ...]
    nnz: int
    dense_bytes: int
    csr_bytes: int

    def to_dict(self, metadata: bool = False) -> JsonObject:
        """The `layers[]` item; metadata: its entry in the file's `layers` metadata, keyed by its name there."""
        name = {} if metadata else {"name": self.name}
        return {**name, "shape": list(self.shape), **entries(self, "nnz", "dense_bytes", "csr_bytes")}


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class ExportResult(Result):
    """What `ticket export` reports: the file written and its size beside the dense float32 checkpoint (per layer
    for csr)."""

    COMMAND: ClassVar[str] = "export"

    ticket: str
    format: str  # one of FORMATS
    out: str
    file_bytes: int
    dense_float32_bytes: int  # the model's full state dict as float32 safetensors
    ratio: float  # file_bytes / dense_float32_bytes
    ticket_bytes: int
    kept: int  # masked entries kept, over every masked parameter
    total: int
    tensors: int  # in the written file
    integrity: str
    layers: tuple[CsrLayer, ...] = ()  # csr only
    csr_payload_bytes: int | None = None  # csr only: the layers' csr_bytes together
    threads: int | None = None  # torch's CPU threads, as the command ran
    onnx: export_onnx.OnnxInfo | None = None  # onnx only: the graph's signature and its onnxruntime check
    inputs: export_inputs.Inputs | None = None  # what the network expects, as its metadata records it
    sparse_layers: tuple[LayerRecord, ...] = ()  # sparse only: each masked layer's form and why
    layout: str | None = None  # sparse only: the layout stored ("csr", "bsr", "2:4")

    @property
    def density(self) -> float:
        return self.kept / self.total

    def body(self) -> JsonObject:
        names = ("ticket", "format", "out", "file_bytes", "dense_float32_bytes", "ratio", "ticket_bytes", "tensors")
        doc = entries(self, *names, "integrity")
        onnx = None if self.onnx is None else self.onnx.to_dict()
        inputs = None if self.inputs is None else self.inputs.to_dict()
        doc |= present(csr_payload_bytes=self.csr_payload_bytes, threads=self.threads, onnx=onnx, inputs=inputs)
        doc |= present(layout=self.layout)
        doc["sparsity"] = {"achieved": 1.0 - self.kept / self.total, "kept": self.kept, "total": self.total}
        doc["layers"] = [layer.to_dict() for layer in self.layers]
        if self.format == "sparse":
            doc["sparse_layers"] = [record.to_dict() for record in self.sparse_layers]
        return doc


def export_ticket(
    path: str | Path,
    *,
    fmt: str,
    out: str | Path,
    reader: ReaderSpec = ReaderSpec(),
    overwrite: bool = False,
    chunks: ChunkProgress | None = None,
    with_preprocessing: bool = False,
    layout: str = "auto",
) -> ExportResult:
    """Rebuild the ticket's network (fingerprint-checked, as `reader` says; it is written on the CPU, whatever its
    device) and write it in `fmt`; returns its size report.

    A network with recalibrated BatchNorm (batchnorm.py) gets the running statistics `evaluate` uses, computed
    on the ticket's extraction split (found through the reader's data search path), so plain PyTorch in eval mode
    reproduces the ticket; `chunks` is told the recalibration's chunks as they finish. `with_preprocessing` (onnx
    only) folds the dataset's normalisation into the graph, which then takes raw values in [0, 1]. `layout` (sparse
    only): "auto", "csr", "bsr" or "2:4" (export/sparse/layouts.py); one the ticket's masks do not allow is refused."""
    check_request(fmt, out, with_preprocessing=with_preprocessing, overwrite=overwrite, layout=layout)
    path, out = Path(path), Path(out)
    # read once: the network, the masks and the calibration split all come from tk
    tk = ticket_io.load(path, max_params=reader.policy.max_params)
    if with_preprocessing:
        export_inputs.require_normalization(tk)  # before the network is rebuilt
    net, _ = runs_build.rebuild(tk, path, reader.weights, reader.policy)
    masks = {n: tk.masks[n] for n in net.names}
    if net.batchnorms and net.bn_statistics == "recalibrate" and fmt != "masks":
        recalibrate(net, masks, tk, path, reader.data, chunks)
    inputs = export_inputs.inputs_of(tk, net, in_graph=with_preprocessing)
    norm = inputs.normalization if with_preprocessing else None
    meta = {"format": f"ticket-export-{fmt}", "model": tk.model.spec, "ticket_weights_sha256": tk.weights_sha256}
    meta |= inputs.metadata()  # every format: what the network expects of its input
    layers: tuple[CsrLayer, ...] = ()
    onnx = None
    records: tuple[LayerRecord, ...] = ()
    stored: str | None = None
    if fmt == "onnx":
        dataset = tk.data.dataset
        meta["masks_sha256"] = tk.masks_sha256 or ""
        if norm is None:
            example = export_onnx.onnx_example(net, dataset, 2, 0)
            check = export_onnx.onnx_example(net, dataset, export_onnx.ONNX_CHECK_BATCH, 1)
        else:  # raw values in [0, 1]: the graph normalises them
            example = export_onnx.raw_example(dataset, 2, 0)
            check = export_onnx.raw_example(dataset, export_onnx.ONNX_CHECK_BATCH, 1)
        blob, tensors = export_onnx.onnx_bytes(net, masked_state(net, masks), example, meta, norm)
        onnx = export_onnx.check_onnx(blob, net, masks, check, torch.get_num_threads(), norm)
    else:
        if fmt == "masked":
            state = masked_state(net, masks)
        elif fmt == "prune":
            state = prune_state(net, masks)
        elif fmt == "csr":
            state, layers = csr_state(net, masks)
            meta["layers"] = json.dumps({la.name: la.to_dict(metadata=True) for la in layers})
        elif fmt == "sparse":
            stored, block = sparse_layouts.choose(layout, tk, masks, called_directly(net.module))
            snet = make_sparse(net, masks, device="cpu", input_shape=image_shape(inputs), layout=stored, block=block)
            state, records = sparse_file.sparse_tensors(snet), snet.layers
            meta |= sparse_file.sparse_metadata(snet) | {"masks_sha256": tk.masks_sha256 or ""}
        else:
            state = {n: m.to(torch.bool).contiguous() for n, m in masks.items()}
        blob, tensors = encode(state, out, meta), len(state)
    size = write_atomic(out, blob, overwrite=overwrite, checked_at_start=True)
    result = summary(net, masks, tk, path, fmt, out, size, tensors, layers, onnx)
    return replace(result, inputs=inputs, sparse_layers=records, layout=stored)


def summary(
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    tk: ticket_io.Ticket,
    path: Path,
    fmt: str,
    out: Path,
    size: int,
    tensors: int,
    layers: tuple[CsrLayer, ...],
    onnx: export_onnx.OnnxInfo | None,
) -> ExportResult:
    """The export's size report: the file written beside the dense float32 checkpoint."""
    dense = len(st_save(dense_state(net)))
    return ExportResult(
        ticket=str(path),
        format=fmt,
        out=str(out),
        file_bytes=size,
        dense_float32_bytes=dense,
        ratio=size / dense,
        ticket_bytes=path.stat().st_size,
        kept=sum(int(m.sum()) for m in masks.values()),
        total=sum(m.numel() for m in masks.values()),
        tensors=tensors,
        integrity=tk.integrity,
        layers=layers,
        csr_payload_bytes=sum(la.csr_bytes for la in layers) if fmt == "csr" else None,
        onnx=onnx,
    )
