"""Deciding, on the whole network, which layers of the sparse form compute sparse: a sequence model's Linear
layers timed in the network (a layer alone does not pay what its product's layout costs the ops after it), and
`remeasure`, which times every masked layer of a form again on its device, one dense layer at a time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

import torch
from torch import nn

from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse.graph import DIRECT, ids_example, layer_inputs, replace_module
from ticketcli.export.sparse.measure import (
    DENSE,
    MARGIN,
    MIN_ROUND_S,
    REPEATS,
    SPARSE,
    Choice,
    LayerRecord,
    choose_in_network,
    compare,
    decide,
    interleaved,
    seconds,
)


class Form(Protocol):
    """What remeasure reads and rewrites of a SparseNet (net.py, which imports this module)."""

    module: nn.Module
    layers: tuple[LayerRecord, ...]

    @property
    def device(self) -> torch.device: ...


IN_NETWORK_S = 30.0  # the most seconds the whole-network choice may take; beyond, each layer's timing alone stands
SCREEN = 0.7  # a sequence's layer timed alone at least this fraction of dense's speed is tried in the network


def worth_trying(record: LayerRecord, sparse: sparse_layers.SparseLinear, dense: nn.Module, x: torch.Tensor) -> bool:
    """A layer of a sequence model worth timing in the whole network: one at least SCREEN of dense's speed alone,
    with its product contiguous (`record`) or left transposed (the most it can gain, where the next layer reads its
    product as it comes)."""
    if record.speedup is None or record.speedup >= SCREEN:
        return True
    sparse.transposed_out = True
    ts, td = compare(sparse, dense, x)
    sparse.transposed_out = None
    return td >= SCREEN * ts


def in_network(
    module: nn.Module,
    example: torch.Tensor,
    made: Mapping[str, tuple[nn.Module, sparse_layers.SparseLinear]],
    records: list[LayerRecord],
    batch: int,
    dev: torch.device,
) -> list[LayerRecord]:
    """The decisions for a sequence model's Linear layers, taken on the whole network: a layer alone on its input
    does not pay what its product's layout costs the ops after it (a residual add reads a transposed product
    several times slower) nor what it saves the next sparse layer. Each layer in `made` is timed in the network
    dense, sparse with a contiguous product, and sparse with its product left transposed, the others as decided
    (measure.choose_in_network), where that fits in IN_NETWORK_S (a large network keeps the decisions each layer
    got alone, on its input as it comes and with a contiguous product, the layout the ops after it read as they
    read dense's); the whole form is then timed against every such layer dense: where it is not faster, they are
    all dense."""

    def put(name: str, form: nn.Module, transposed: bool | None = None) -> Callable[[], None]:
        def setup() -> None:
            if isinstance(form, sparse_layers.SparseLinear):
                form.transposed_out = transposed
            replace_module(module, name, form)

        return setup

    def run() -> object:
        return module(example)

    options = {n: [put(n, d), put(n, s, False), put(n, s, True)] for n, (d, s) in made.items()}
    screened = {n: module.get_submodule(n) for n in made}  # each layer as timed alone (a contiguous product)
    call_s = seconds(run, dev)
    within = len(options) * 3 * (REPEATS + 1) * max(call_s, MIN_ROUND_S) <= IN_NETWORK_S
    chosen: dict[str, Choice] = {}
    if within:
        chosen = choose_in_network(run, options, chained(module, example, options), dev)
    kept = {n: module.get_submodule(n) for n in made}

    def all_dense() -> None:
        for n, (d, _) in made.items():
            replace_module(module, n, d)

    def as_chosen() -> None:
        for n, m in kept.items():
            replace_module(module, n, m)

    form_s, dense_s = interleaved(run, [as_chosen, all_dense], dev)
    some = any(m is not made[n][0] for n, m in kept.items())
    slower = some and form_s >= dense_s * (1 - MARGIN)
    (all_dense if slower else as_chosen)()
    out = []
    for r in records:
        c = chosen.get(r.name)
        if r.name not in made or (c is None and not slower):
            out.append(r)
            continue
        if c is None:  # timed alone, then undone by the whole network's time
            why = f"dense: the network with its sparse layers measured {dense_s / form_s:.2g}x dense"
            out.append(replace(r, form=DENSE, reason=why) if screened[r.name] is not made[r.name][0] else r)
            continue
        td, ts = c.times[0], min(c.times[1:])
        sparse = c.option != 0 and not slower
        if sparse:
            layout = "left transposed" if c.option == 2 else "contiguous"
            why = f"sparse {td / ts:.2g}x faster in the network (its product {layout})"
        elif c.option:
            why = f"dense: the network with its sparse layers measured {dense_s / form_s:.2g}x dense"
        else:
            why = f"dense: the network {td / ts:.2g}x with it sparse"
        timed = (c.times[c.option] if sparse else ts, td)
        record = decide(r.name, r.kind, r.shape, r.nnz, timed, batch, str(dev))
        out.append(replace(record, form=SPARSE if sparse else DENSE, reason=why))
    return out


def chained(
    module: nn.Module, example: torch.Tensor, options: Mapping[str, list[Callable[[], None]]]
) -> dict[str, int]:
    """Where the whole-network choice starts: every layer sparse, its product left transposed (option 2) where the
    next layer reads it as it comes (through an activation: an MLP's two layers), else contiguous (option 1). Started
    from dense, neither layer of such a pair would pay alone, and one layer changed at a time never finds it."""
    names = list(options)
    for setups in options.values():
        setups[2]()
    seen = layer_inputs(module, names, example)
    start = {n: 1 for n in names}
    for before, after in zip(names, names[1:]):
        flat = seen[after].reshape(-1, seen[after].shape[-1])
        if not flat.is_contiguous() and flat.t().is_contiguous():
            start[before] = 2
    return start


@torch.no_grad()
def remeasure(snet: Form, batch: int, input_shape: tuple[int, ...] | None, *, unmeasured_only: bool = False) -> None:
    """Time every masked layer of `snet` again on its device (its dense form made one layer at a time) and put
    each in the form that wins there; `snet.layers` is replaced by the new records. `unmeasured_only`: only the
    layers not timed yet."""
    module, dev = snet.module, snet.device
    todo = [r for r in snet.layers if (not unmeasured_only or r.sparse_ms is None) and r.reason != DIRECT]
    if not todo:
        return
    names = [r.name for r in todo]
    example = ids_example(module, batch, dev) if input_shape is None else torch.randn(batch, *input_shape, device=dev)
    inputs = {} if example is None else layer_inputs(module, names, example)
    records = []
    for r in snet.layers:
        if r.name not in names or (example is not None and r.name not in inputs):  # never called: read as a table
            records.append(r)
            continue
        layer = module.get_submodule(r.name)
        sparse: nn.Module
        if isinstance(layer, (sparse_layers.SparseLinear, sparse_layers.SparseConv2d)):
            sparse, dense = layer, sparse_layers.dense_layer(layer)
        elif sparse_layers.lowerable(layer):
            weight = sparse_layers.weight_of(layer)
            bias = sparse_layers.param(layer, "bias")
            sparse, dense = sparse_layers.sparse_layer(layer, sparse_layers.csr_of(weight, weight != 0), bias), layer
        else:
            records.append(r)
            continue
        x = inputs.get(r.name)
        if x is None:
            if isinstance(layer, (nn.Conv2d, sparse_layers.SparseConv2d)):
                records.append(r)
                continue
            x = torch.randn(batch, sparse_layers.weight_of(dense).shape[1], device=dev)
        record = decide(r.name, r.kind, r.shape, r.nnz, compare(sparse, dense, x), batch, str(dev))
        record = replace(record, layout=r.layout)  # a structured layer stays stored as it was
        replace_module(module, r.name, sparse if record.form == SPARSE else dense)
        records.append(record)
        del sparse, dense, layer, x  # the losing form goes before the next layer's dense form is made
    snet.layers = tuple(records)
    sparse_layers.dense_linears_take_transposed_inputs(module)
