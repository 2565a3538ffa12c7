"""Which layout a sparse export stores its layers in (`--layout`), and the structured layers made at export and at
load.

csr  every layer that measured faster sparse: its CSR arrays (the others dense).
bsr  a `--block RxC` ticket: every masked layer's weight as BSR of R x C blocks (structured.py), whatever it
     measured; it computes as BSR where torch's BSR product runs (the CPU's takes square blocks only), as CSR where
     not, and dense where that measured faster on the device.
2:4  a ticket whose masks keep at most 2 of every 4 inputs (`--structure 2:4`, or 1:4): every masked layer in the
     compressed 2:4 layout; on CUDA a Linear layer computes with torch's semi-structured kernels, elsewhere as CSR
     or dense, as measured at export.
auto bsr for a block ticket, 2:4 for an N:M ticket whose masks fit it, csr otherwise.

A layer's record (measure.LayerRecord) keeps the layout stored (`layout`), the kernel it computes with here
(`kernel`), and why."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import replace

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import structured
from ticketcli.export.sparse.graph import layer_kind
from ticketcli.export.sparse.measure import DENSE, SPARSE, LayerRecord, compare, decide
from ticketcli.export.sparse.structured import BSR, CSR, TWO_FOUR
from ticketcli.selection.structure import Blocks, Structure, is_blocks, pattern_of
from ticketcli.ticketfile import ticket as ticket_io

Stored = dict[str, torch.Tensor]  # a layer's weight as the file stores it: "<part>" -> array


def choose(
    requested: str, tk: ticket_io.Ticket, masks: Mapping[str, torch.Tensor], tables: Collection[str] = ()
) -> tuple[str, tuple[int, int] | None]:
    """(the layout to store, the block of bsr) for `--layout requested`, or one UsageError when the ticket's masks
    do not allow it. The masks are read one after the other (a ticket's, from its file: seeded.LazyMasks), and
    not at all for csr or an unstructured ticket's auto. `tables`: layers the network reads as a table (a GPT's
    token embedding), stored dense whatever the layout, whose masks are not asked to fit it."""
    pattern = pattern_of(tk.method.options())

    def weights() -> Iterator[tuple[str, torch.Tensor]]:
        return ((n, m) for n, m in masks.items() if n.rpartition(".")[0] not in tables and m.dim() >= 2)

    if requested == "auto":
        if isinstance(pattern, Blocks):
            requested = BSR
        elif isinstance(pattern, Structure) and not any(_no_two_four(m) for _, m in weights()):
            requested = TWO_FOUR
        else:
            requested = CSR
    if requested == BSR:
        if not isinstance(pattern, Blocks):
            raise UsageError(
                "--layout bsr needs a block ticket, and this ticket's masks are "
                + ("unstructured" if pattern is None else f"{pattern.text()}, not blocks"),
                hint="extract with --block RxC (e.g. 4x4), or --layout csr",
            )
        for name, m in weights():
            if not is_blocks(m.cpu().numpy(), pattern.rows, pattern.cols):
                raise UsageError(
                    f"--layout bsr (the ticket records --block {pattern.text()}): the mask of {name[:80]} is not "
                    f"whole {pattern.text()} blocks"
                )
        return BSR, (pattern.rows, pattern.cols)
    if requested == TWO_FOUR:
        for name, m in weights():
            why = _no_two_four(m)
            if why is not None:
                raise UsageError(
                    f"--layout 2:4 needs at most 2 kept of every 4 inputs, and {name[:80]}: {why}",
                    hint="extract with --structure 2:4, or --layout csr",
                )
        return TWO_FOUR, None
    if requested != CSR:
        raise UsageError(f"unknown layout {requested[:20]!r}; choose from auto, csr, bsr, 2:4")
    return CSR, None


def _no_two_four(mask: torch.Tensor) -> str | None:
    return structured.fits_two_four(mask.reshape(mask.shape[0], -1))


def lower(
    layer: nn.Module,
    name: str,
    mask: torch.Tensor,
    x: torch.Tensor | None,
    layout: str,
    block: tuple[int, int] | None,
    batch: int,
    dev: torch.device,
) -> tuple[LayerRecord, nn.Module | None, Stored]:
    """A masked layer of a bsr or 2:4 export, its weight already W * M: (its record, the module that computes it
    on `dev`, or None where the dense layer stays, its stored arrays). Timed against dense where `x` is given."""
    weight = sparse_layers.weight_of(layer)
    w2 = weight.reshape(weight.shape[0], -1)
    m2 = mask.reshape(w2.shape).to(dev, torch.bool)
    kind = layer_kind(layer)
    shape, nnz = tuple(weight.shape), int(m2.sum())
    bias = sparse_layers.param(layer, "bias")
    kernels: dict[str, nn.Module] = {}  # the sparse forms that run here, each timed against dense
    if layout == BSR:
        assert block is not None
        crow, col, values = structured.bsr_arrays(w2, m2, block)
        stored: Stored = {"crow_indices": crow.cpu(), "col_indices": col.cpu(), "values": values.cpu()}
        refusal = structured.bsr_refusal(dev, block)
        if refusal is None:
            padded = (int(crow.numel() - 1) * block[0], structured.padded(w2.shape[1], block[1]))
            kernels[BSR] = structured.bsr_layer(layer, structured.bsr_tensor(crow, col, values, padded), bias)
    else:
        values24, positions = structured.pack_two_four(w2, m2)
        stored = {"values": values24.cpu(), "positions": positions.cpu()}
        # timed as CSR here: the semi-structured kernels are made where the file is loaded on CUDA
        refusal = structured.semi_structured(w2, bias, layer)[1] if dev.type != "cuda" else "made at load"
    kernels[CSR] = sparse_layers.sparse_layer(layer, sparse_layers.csr_of(weight, m2), bias)
    timed = {k: compare(m, layer, x) for k, m in kernels.items()} if x is not None else {}
    # the fastest sparse kernel against dense (BSR before CSR, untimed: the layout's own kernel where it runs)
    kernel = max(timed, key=lambda k: timed[k][1] / max(timed[k][0], 1e-12)) if timed else next(iter(kernels))
    record = decide(name, kind, shape, nnz, timed.get(kernel), batch, str(dev))
    reason = record.reason.replace("sparse", kernel, 1)  # "bsr 2.1x faster", "dense: csr 0.3x"
    others = [f"{k} {td / ts:.2g}x" for k, (ts, td) in timed.items() if k != kernel]
    if others:
        reason += f" ({', '.join(others)})"
    if kernel != layout and refusal is not None:
        reason += f" ({layout} stored; {refusal})"
    record = replace(record, layout=layout, kernel=kernel if record.form == SPARSE else None, reason=reason[:200])
    return record, kernels[kernel] if record.form == SPARSE else None, stored


def loaded(
    layer: nn.Module,
    record: LayerRecord,
    w2: torch.Tensor,
    bsr: torch.Tensor | None,
    bias: torch.Tensor | None,
    dev: torch.device,
) -> tuple[nn.Module, LayerRecord]:
    """A bsr or 2:4 layer of a file on `dev`: `w2` its dense (out, in) W * M (CPU), `bsr` its BSR tensor (bsr
    only). The structured kernel where it runs here (and was not measured slower on this kind of device), else CSR
    or dense as the record measured; the record says which and why."""
    layout = record.layout or CSR
    measured_here = record.device is not None and record.device.partition(":")[0] == dev.type  # a file's text
    shape = tuple(sparse_layers.weight_of(layer).shape)
    to = None if bias is None else bias.to(dev)
    if measured_here and record.form == DENSE:  # dense won on this kind of device
        return _dense(layer, w2.reshape(shape).to(dev), to), replace(record, kernel=None)
    why = ""
    if layout == BSR and bsr is not None and not (measured_here and record.kernel == CSR):
        block = (int(bsr.values().shape[1]), int(bsr.values().shape[2]))
        refusal = structured.bsr_refusal(dev, block)
        if refusal is None:
            made = structured.bsr_layer(layer, bsr.to(dev), to)
            refusal = structured.bsr_fails(made)
        if refusal is None:
            reason = record.reason if measured_here else f"{BSR}: not measured on {dev.type}"
            return made, replace(record, form=SPARSE, kernel=BSR, reason=reason)
        why = f"{layout} stored; here {refusal}"
    elif layout == TWO_FOUR:
        made24, why24 = structured.semi_structured(w2.to(dev), to, layer)
        if made24 is not None:
            return made24, replace(record, form=SPARSE, kernel=TWO_FOUR, reason=f"{why24}, not measured")
        why = f"{layout} stored; here {why24}"
    csr = sparse_layers.sparse_layer(layer, sparse_layers.csr_of(w2.to(dev), w2.to(dev) != 0), to)
    if measured_here and (record.kernel == CSR or layout == TWO_FOUR):
        reason = record.reason  # CSR measured fastest at export, on this kind of device
    else:
        reason = f"csr, not measured here ({why})" if not measured_here else f"csr ({why})"
    return csr, replace(record, form=SPARSE, kernel=CSR, reason=reason[:200])


def _dense(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module:
    """The layer itself (on the meta device until now) holding the dense W * M."""
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias, requires_grad=False)
    return layer.to(weight.device)
