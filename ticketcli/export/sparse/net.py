"""SparseNet, the sparse runtime form of a masked network, and `sparse_module`, which makes it from a network and
its masks: every masked Linear (and Conv2d, lowered to a matmul) computes with a CSR kernel where that measured
faster than dense on the device, and stays a plain dense layer holding W * M elsewhere; everything else (biases,
norms, pooling) computes as in the original network. A character-level GPT (gpt-nano) is timed on sequences of
random character ids of its context, and its token embedding, whose weight its forward pass reads as a table
without calling the layer, stays dense."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import replace

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import layouts, structured
from ticketcli.export.sparse.graph import DIRECT, ids_example, layer_inputs, layer_kind, masked_layers, replace_module
from ticketcli.export.sparse.measure import (
    DENSE,
    SPARSE,
    LayerRecord,
    compare,
    decide,
)
from ticketcli.export.sparse.search import in_network, worth_trying
from ticketcli.models.masked import MaskedNet
from ticketcli.runs.inputs import resolve_device

AGREEMENT = 1e-5  # outputs agree when their largest difference is at most this fraction of the largest |logit|


class SparseNet(nn.Module):
    """A network whose masked layers compute with sparse kernels where that pays (`layers` says which and why).

    Call it like the original network (it runs without gradients). `module` is the network itself (its masked
    Linear/Conv2d layers replaced by SparseLinear/SparseConv2d where sparse, dense layers holding W * M elsewhere);
    `file_bytes` is the size of the sparse export it was loaded from (None otherwise); `source` says how it was
    made ("module", "export" or "ticket"), and `layer_by_layer` whether a ticket's network was regenerated one layer
    at a time; `metadata` holds the export metadata (the inputs the network expects, among them)."""

    def __init__(
        self,
        module: nn.Module,
        layers: tuple[LayerRecord, ...],
        *,
        source: str,
        file_bytes: int | None = None,
        layer_by_layer: bool = False,
        metadata: Mapping[str, str] | None = None,
    ):
        super().__init__()
        self.module = module
        self.layers = layers
        self.source = source
        self.file_bytes = file_bytes
        self.layer_by_layer = layer_by_layer
        self.metadata: dict[str, str] = dict(metadata or {})
        self.stored: dict[str, dict[str, torch.Tensor]] = {}  # a structured export's layers as stored (layouts.py)
        sparse_layers.dense_linears_take_transposed_inputs(module)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.module(x)
        return out.contiguous()  # a last Linear after a sparse layer returns a transposed view (layers)

    @property
    def sparse_layers(self) -> tuple[str, ...]:
        """The names of the layers that compute with a sparse kernel."""
        return tuple(r.name for r in self.layers if r.form == SPARSE)

    @property
    def device(self) -> torch.device:
        for t in (*self.module.parameters(), *self.module.buffers()):
            return t.device
        return torch.device("cpu")

    def nbytes(self) -> int:
        """Bytes the form's own tensors hold: CSR values and indices, dense layers, the other parameters and
        buffers."""
        total = 0
        for t in (*self.module.parameters(), *self.module.buffers()):
            if t.layout in (torch.sparse_csr, torch.sparse_bsr):
                parts = (t.crow_indices(), t.col_indices(), t.values())
                total += sum(p.numel() * p.element_size() for p in parts)
            else:
                total += t.numel() * t.element_size()
        for layer in self.module.modules():  # a semi-structured weight: its packed values and metadata
            if isinstance(layer, structured.SemiStructuredLinear):
                packed = (getattr(layer.weight, a, None) for a in ("packed", "meta"))
                total += sum(p.numel() * p.element_size() for p in packed if isinstance(p, torch.Tensor))
        return total


def read_directly(
    name: str, layer: nn.Module, masks: Mapping[str, torch.Tensor], batch: int, dev: torch.device
) -> LayerRecord:
    """The record of a masked layer whose weight the network reads without calling it (gpt-nano's token embedding
    looks up columns of a Linear's weight): it stays dense, holding W * M, as a sparse layer could not be read so."""
    shape = tuple(sparse_layers.weight_of(layer).shape)
    nnz = int(masks[f"{name}.weight"].sum())
    record = decide(name, layer_kind(layer), shape, nnz, None, batch, str(dev))
    return replace(record, form=DENSE, reason=DIRECT)


MAX_BATCH = 1 << 16  # examples a layer is timed at
MAX_EXAMPLE = 1 << 24  # values in one example of input_shape


def check_batch(batch: object) -> int:
    """`batch=` a whole number from 1 to MAX_BATCH, or one UsageError (the Python API takes any object)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise UsageError(f"batch= must be a whole number from 1 to {MAX_BATCH}, got {str(batch)[:40]}")
    return batch


def check_input_shape(shape: object) -> tuple[int, ...] | None:
    """`input_shape=` None or one example's shape: positive whole numbers, at most MAX_EXAMPLE values in all."""
    if shape is None:
        return None
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else ()
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
        raise UsageError(f"input_shape= must be one example's shape, e.g. (1, 28, 28), got {str(shape)[:40]}")
    if math.prod(dims) > MAX_EXAMPLE:
        raise UsageError(f"input_shape= {list(dims)} holds more than {MAX_EXAMPLE} values per example")
    return dims


@torch.no_grad()
def sparse_module(
    net: nn.Module | MaskedNet,
    masks: Mapping[str, torch.Tensor],
    *,
    device: str | torch.device = "cpu",
    measure: bool = True,
    batch: int = 64,
    input_shape: tuple[int, ...] | None = None,
) -> SparseNet:
    """The sparse runtime form of `net` (an nn.Module holding the ticket's weights, or a MaskedNet) under `masks`
    (parameter name -> bool mask, as a ticket holds them): a copy on `device` in which every masked Linear and
    Conv2d computes W * M, with a CSR kernel where `measure` found it faster than dense at `batch` examples (both
    timed interleaved, per layer, on `device`), densely where it did not. `measure=False` makes every lowerable
    layer sparse. `input_shape` (one example's, without the batch) is needed to time convolutions; a MaskedNet of a
    built-in model knows it. The copy's outputs are checked against the dense W * M on a random example."""
    return make_sparse(net, masks, device=device, measure=measure, batch=batch, input_shape=input_shape)


@torch.no_grad()
def make_sparse(
    net: nn.Module | MaskedNet,
    masks: Mapping[str, torch.Tensor],
    *,
    device: str | torch.device = "cpu",
    measure: bool = True,
    batch: int = 64,
    input_shape: tuple[int, ...] | None = None,
    layout: str = "csr",
    block: tuple[int, int] | None = None,
) -> SparseNet:
    """sparse_module's work, in `layout` (layouts.py: "csr", or "bsr" of `block`, or "2:4", checked by
    layouts.choose): the structured layouts keep each layer's stored arrays in `SparseNet.stored`."""
    if not isinstance(net, (nn.Module, MaskedNet)):
        raise UsageError(f"net= must be an nn.Module or a MaskedNet, got {type(net).__name__}")
    if not isinstance(masks, Mapping) or not all(isinstance(m, torch.Tensor) for m in masks.values()):
        raise UsageError("masks= must map parameter names to bool tensors, as a ticket's masks do")
    batch, input_shape = check_batch(batch), check_input_shape(input_shape)
    module = net.module if isinstance(net, MaskedNet) else net
    if input_shape is None and isinstance(net, MaskedNet) and net.spec is not None:
        input_shape = net.spec.input
    dev = device if isinstance(device, torch.device) else resolve_device(device)  # a name checked: one line
    module = copy.deepcopy(module).to(dev).eval()
    params = dict(module.named_parameters())
    for n, m in masks.items():
        if n not in params:
            raise UsageError(f"mask {n[:80]!r} names no parameter of the network")
        if tuple(m.shape) != tuple(params[n].shape):
            raise UsageError(f"mask {n[:80]!r} has shape {list(m.shape)}, its parameter {list(params[n].shape)}")
        params[n].mul_(m.to(dev, params[n].dtype))
    sparse_layers.dense_linears_take_transposed_inputs(module)  # each dense layer timed as it computes in the form
    targets = masked_layers(module, masks)
    if not targets:
        raise UsageError("the network has no masked nn.Linear or nn.Conv2d layer")
    convs = any(isinstance(m, nn.Conv2d) for _, m in targets)
    if convs and input_shape is None:
        raise UsageError("sparse_module needs input_shape= (one example's shape) for a network with convolutions")
    example = ids_example(module, batch, dev) if input_shape is None else torch.randn(batch, *input_shape, device=dev)
    try:
        inputs = {} if example is None else layer_inputs(module, [n for n, _ in targets], example)
        reference = None if example is None else module(example)
    except RuntimeError as e:  # the caller's input_shape and network disagree: say so in one line
        raise UsageError(f"input_shape= {list(input_shape or ())} does not fit the network: {str(e)[:120]}") from None
    order = [n for n, _ in targets]  # a layer never called (its weight read as a table) stays dense, unlowered
    direct = {n: read_directly(n, m, masks, batch, dev) for n, m in targets if example is not None and n not in inputs}
    targets = [(n, m) for n, m in targets if n not in direct]
    records = []
    stored: dict[str, dict[str, torch.Tensor]] = {}
    tried: dict[str, tuple[nn.Module, sparse_layers.SparseLinear]] = {}  # a sequence's Linear layers: both forms
    for name, layer in targets:
        if measure and example is not None:  # its input as it comes in the form so far (a sparse product's layout)
            inputs[name] = layer_inputs(module, [name], example)[name]
        if layout != "csr" and sparse_layers.lowerable(layer):
            x = inputs.get(name)
            if measure and x is None:
                x = torch.randn(batch, sparse_layers.weight_of(layer).shape[1], device=dev)
            mask = masks[f"{name}.weight"].to(dev)
            record, made, stored[name] = layouts.lower(
                layer, name, mask, x if measure else None, layout, block, batch, dev
            )
            if made is not None:
                replace_module(module, name, made)
            records.append(record)
            continue
        record, sparse = _lower(module, name, layer, masks, inputs.get(name), measure, batch, dev)
        records.append(record)
        x = inputs.get(name)
        if (
            isinstance(sparse, sparse_layers.SparseLinear)
            and x is not None
            and x.dim() > 2
            and worth_trying(record, sparse, layer, x)
        ):
            tried[name] = (layer, sparse)
    if measure and tried and example is not None:
        records = in_network(module, example, tried, records, batch, dev)
    records = sorted([*records, *direct.values()], key=lambda r: order.index(r.name))
    if example is not None and reference is not None:
        check_agreement(module(example), reference)
    snet = SparseNet(module, tuple(records), source="module")
    snet.stored = stored
    return snet


def _lower(
    module: nn.Module,
    name: str,
    layer: nn.Module,
    masks: Mapping[str, torch.Tensor],
    x: torch.Tensor | None,
    measure: bool,
    batch: int,
    dev: torch.device,
) -> tuple[LayerRecord, nn.Module | None]:
    """One layer's decision, and its replacement in `module` where it is sparse; with its sparse form (None where
    not lowered)."""
    weight = sparse_layers.weight_of(layer)
    mask = masks[f"{name}.weight"].to(dev)
    nnz = int(mask.sum())
    kind, shape = layer_kind(layer), tuple(weight.shape)
    if not sparse_layers.lowerable(layer):
        why = "dense: a grouped or non-zero-padded convolution is not lowered"
        return replace(decide(name, kind, shape, nnz, None, batch, str(dev)), form=DENSE, reason=why), None
    bias = sparse_layers.param(layer, "bias")
    sparse = sparse_layers.sparse_layer(layer, sparse_layers.csr_of(weight, mask), bias)
    times = None
    if measure:
        if x is None:  # a Linear-only network without a known input shape: its own in_features
            x = torch.randn(batch, weight.shape[1], device=dev)
        times = compare(sparse, layer, x)
    record = decide(name, kind, shape, nnz, times, batch, str(dev))
    if record.form == SPARSE:
        replace_module(module, name, sparse)
    return record, sparse


def check_agreement(out: torch.Tensor, reference: torch.Tensor) -> None:
    """The sparse form's outputs against the dense W * M's: float32 rounding apart, or the form is refused."""
    scale = float(reference.abs().max()) if reference.numel() else 0.0
    diff = float((out - reference).abs().max()) if reference.numel() else 0.0
    if diff > AGREEMENT * max(scale, 1e-30) * 10:
        raise UsageError(
            f"the sparse form does not reproduce this network (largest difference {diff:.3g} against logits up to "
            f"{scale:.3g}): its forward pass uses a masked layer's weight other than by calling the layer"
        )
