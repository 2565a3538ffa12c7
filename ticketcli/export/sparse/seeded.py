"""A ticket's network regenerated from its seed straight into the sparse form, one layer at a time: the parameters
are drawn in the order `models.init.init_weights` draws them, from the same generator, so each is bit for bit the
full network's; each is hashed into the weights' fingerprint, masked from the ticket's packed bits a few rows at a
time, turned into its CSR arrays and let go before the next is drawn. At most one layer is ever dense in memory
beside those the form itself keeps dense (a GPT's token embedding, read as a table; a layer measured faster
dense). A bsr or 2:4 layout (`--layout`) unpacks each layer's whole mask while that layer is dense, and stores it
as an export does (layouts.lower).
Where asked, each Linear layer is timed dense while its dense form exists anyway, then sparse once the dense weight
is gone (one form after the other: the sparse kernel's workspace never comes on top of the dense weight), and
load.py times the convolutions afterwards (search.remeasure: again one layer dense at a time)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ticketcli.errors import TicketFileError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse import layouts
from ticketcli.export.sparse.graph import DIRECT, layer_kind, replace_module
from ticketcli.export.sparse.measure import DENSE, SPARSE, LayerRecord, decide, median_time
from ticketcli.export.sparse.net import SparseNet
from ticketcli.export.sparse.skeleton import called_directly, meta_network, positions
from ticketcli.export.sparse.structured import CSR
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.masked import fan_in, layer_of, masked_names
from ticketcli.runs import build as runs_build
from ticketcli.runs import checks as runs_checks
from ticketcli.specs.run import ModelPolicy, ModelSpec
from ticketcli.ticketfile import ticket as ticket_io


def regenerable(tk: ticket_io.Ticket, model: ModelSpec) -> bool:
    """A ticket whose network can be regenerated a layer at a time: a built-in model drawn from its seed (no
    checkpoint) whose every parameter is masked and which holds no state-dict buffer (no BatchNorm statistics to
    recompute from data; a position embedding, a fixed function of the geometry, is made again:
    skeleton.meta_network). Others are rebuilt whole (load.py)."""
    if model.arch == "user" or tk.checkpoint is not None:
        return False
    module = meta_network(model)
    names = [n for n, _ in module.named_parameters()]
    return names == masked_names(module) and list(module.state_dict()) == names  # position embeddings aside


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None on a C library without it."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_memory() -> None:
    """Hand the C heap's freed pages back to the system. After a big tensor is freed, glibc serves allocations of
    up to 32 MiB from its heap and keeps up to 64 MiB of freed heap: building a layer's CSR a few rows at a time
    would otherwise leave tens of MiB of chunk temporaries resident on top of the dense layer."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class _Bits:
    """One parameter's packed mask bits (as the ticket stores them: row-major, first element in the MSB), read
    from the open ticket and unpacked a few rows at a time: a layer's mask is never whole in memory."""

    def __init__(self, mf: ticket_io.MaskFile, name: str, shape: tuple[int, ...]):
        self.mf, self.name = mf, name
        self.cols = math.prod(shape[1:]) if len(shape) > 1 else 1

    def rows(self, start: int, stop: int) -> torch.Tensor:
        release_freed_memory()  # the previous rows' temporaries
        first, last = start * self.cols, stop * self.cols
        packed = np.frombuffer(self.mf.read(self.name, first // 8, (last + 7) // 8), dtype=np.uint8)
        bits = np.unpackbits(packed, bitorder="big")
        part = bits[first % 8 : first % 8 + (last - first)].view(np.bool_)
        return torch.from_numpy(part).reshape(stop - start, self.cols)


@dataclass(frozen=True)
class Plan:
    """How `regenerate` makes each layer: the `layout` stored (layouts.py: csr, or bsr of `block`, or 2:4), the
    layers the network reads as a table (`direct`: kept dense), the batch a Linear layer is timed at (None: none
    timed) and the rows per example it multiplies (a GPT's context); `stored` collects a structured layer's arrays
    as it is made."""

    layout: str = CSR
    block: tuple[int, int] | None = None
    direct: frozenset[str] = frozenset()
    batch: int | None = None
    positions: int = 1
    stored: dict[str, layouts.Stored] = field(default_factory=dict)

    def example(self, features: int, device: torch.device) -> torch.Tensor:
        """A Linear layer's timing input of `features`: (batch, features), or (batch, positions, features) for a
        GPT's, as its forward pass gives them."""
        assert self.batch is not None
        positions = () if self.positions == 1 else (self.positions,)
        return torch.randn(self.batch, *positions, features, device=device)


class LazyMasks(Mapping[str, torch.Tensor]):
    """A ticket's masks read one at a time from its open file as they are asked for (layouts.choose reads them
    one after the other): never all in memory at once."""

    def __init__(self, mf: ticket_io.MaskFile, shapes: dict[str, tuple[int, ...]]):
        self.mf, self.shapes = mf, shapes

    def __getitem__(self, name: str) -> torch.Tensor:
        shape = self.shapes[name]
        return _Bits(self.mf, name, shape).rows(0, shape[0]).reshape(shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self.shapes)

    def __len__(self) -> int:
        return len(self.shapes)


def regenerate(
    path: Path,
    policy: ModelPolicy,
    *,
    device: torch.device,
    batch: int | None,
    metadata: dict[str, str],
    layout: str = CSR,
) -> SparseNet:
    """The ticket at `path` in the sparse form on `device`, its network regenerated from the seed one layer at a
    time and checked against the ticket's fingerprint; `batch`: each Linear layer timed sparse against dense at
    that batch as it is made (None: none timed); `layout`: as export's --layout (auto, csr, bsr, 2:4), checked
    against the ticket's masks (read one at a time) before anything is drawn."""
    with ticket_io.MaskFile(path) as mf:
        tk = mf.scan.ticket
        ticket_io.require_intact(tk, path)
        model = runs_build.ticket_model(tk, path, policy)
        runs_checks.check_planned(tk, model, path, runs_build.policy_budget(policy))
        module = meta_network(model)
        params = dict(module.named_parameters())
        direct = frozenset(called_directly(module))  # gpt-nano's token embedding: a table, kept dense
        shapes = {n: tuple(p.shape) for n, p in params.items() if p.dim() >= 2}  # what a layout checks
        stored, block = layouts.choose(layout, tk, LazyMasks(mf, shapes), direct)
        plan = Plan(stored, block, direct, batch, positions(module))
        init = tk.init.spec()
        scheme = INIT_SCHEMES.get(init.scheme)
        g = torch.Generator().manual_seed(init.seed)
        digest = hashlib.sha256()
        pending: dict[str, dict[str, torch.Tensor]] = {}
        records: list[LayerRecord] = []
        for name, p in params.items():  # init_weights' order, generator and draws
            owner = layer_of(name)
            weight = params.get(owner + ".weight") if p.dim() == 1 else None
            w = scheme(p.shape, fan_in(p, weight), init.k, g).to(torch.float32).contiguous()
            digest.update(w.numpy().data)  # seeding.fingerprint's bytes, without a copy
            pending.setdefault(owner, {})[name.rpartition(".")[2]] = w
            del w
            layer = module.get_submodule(owner)
            if set(pending[owner]) == {n for n, _ in layer.named_parameters(recurse=False)}:
                records.append(_layer(module, owner, layer, pending.pop(owner), mf, device, plan))
            del layer  # a layer made sparse lets its dense weight go here, before the next is drawn
        if digest.hexdigest() != tk.weights_sha256:
            raise TicketFileError(
                f"{path}: weights fingerprint mismatch (rebuilt {digest.hexdigest()[:12]}, ticket "
                f"{tk.weights_sha256[:12]}); the network cannot be reproduced here (ticket made with torch "
                f"{tk.created_by.torch}, this is torch {torch.__version__})"
            )
    snet = SparseNet(module.to(device), tuple(records), source="ticket", layer_by_layer=True, metadata=metadata)
    snet.stored = plan.stored
    return snet


def _layer(
    module: nn.Module,
    name: str,
    layer: nn.Module,
    drawn: dict[str, torch.Tensor],
    mf: ticket_io.MaskFile,
    device: torch.device,
    plan: Plan,
) -> LayerRecord:
    """One layer, its weights drawn: masked from its packed bits (the bias in place), its weight's CSR built a few
    rows at a time, and put into `module` sparse, or dense (W * M) where it cannot be lowered, where the network
    reads it as a table, or where the plan times it and a Linear layer measured faster dense. (A convolution's
    input shape is known only once the network can run: load.py times it afterwards.) A bsr or 2:4 plan makes
    each lowerable layer from its whole mask (`_structured`)."""
    w = drawn.pop("weight")
    bits = _Bits(mf, f"{name}.weight", tuple(w.shape))
    kind, shape = layer_kind(layer), tuple(w.shape)
    bias = drawn.pop("bias", None)
    if bias is not None:
        bias.mul_(_Bits(mf, f"{name}.bias", tuple(bias.shape)).rows(0, bias.shape[0]).reshape(-1))
    lowerable = sparse_layers.lowerable(layer)
    if lowerable and name not in plan.direct and plan.layout != CSR:
        return _structured(module, name, layer, w, bias, bits, device, plan)
    batch = plan.batch
    timed = lowerable and batch is not None and isinstance(layer, nn.Linear) and name not in plan.direct
    whole = timed or not lowerable or name in plan.direct
    csr = sparse_layers.csr_rows(w.reshape(w.shape[0], -1), bits.rows, zero_dropped=whole)
    del bits
    nnz = int(csr.values().numel())
    if whole:  # the dense layer: W * M in place of the meta tensors
        _dense(layer, w.to(device), None if bias is None else bias.to(device))
    del w
    if not lowerable or name in plan.direct:
        record = decide(name, kind, shape, nnz, None, 0, str(device))
        why = DIRECT if name in plan.direct else "dense: a grouped or non-zero-padded convolution is not lowered"
        return replace(record, form=DENSE, reason=why)
    sparse = sparse_layers.sparse_layer(layer, csr.to(device), None if bias is None else bias.to(device))
    times = None
    if timed and batch is not None:
        x = plan.example(shape[1], device)
        dense_s = median_time(layer, x)  # the dense form first, then let go of it: never both with a kernel's workspace
        layer.weight = nn.Parameter(torch.empty(shape, device="meta"), requires_grad=False)
        times = (median_time(sparse, x), dense_s)
    record = decide(name, kind, shape, nnz, times, batch or 0, str(device))
    if record.form == SPARSE:
        replace_module(module, name, sparse)
    elif timed:  # dense won: W * M again, from the CSR arrays
        layer.weight = nn.Parameter(sparse_layers.dense_of(csr).reshape(shape).to(device), requires_grad=False)
    return record


def _structured(
    module: nn.Module,
    name: str,
    layer: nn.Module,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    bits: _Bits,
    device: torch.device,
    plan: Plan,
) -> LayerRecord:
    """A layer of a bsr or 2:4 plan: its whole mask unpacked (a quarter of its dense size, while the layer is dense
    anyway), W * M made dense in the layer, then lowered as an export lowers it (layouts.lower: the BSR or 2:4
    arrays kept in `plan.stored`, the layer computing with the fastest kernel that runs here, timed on Linear
    layers where the plan times)."""
    shape = tuple(w.shape)
    mask = bits.rows(0, shape[0]).reshape(shape)
    w.mul_(mask)
    _dense(layer, w.to(device), None if bias is None else bias.to(device))
    del w
    x = None
    if plan.batch is not None and isinstance(layer, nn.Linear):
        x = plan.example(shape[1], device)
    record, made, plan.stored[name] = layouts.lower(
        layer, name, mask, x, plan.layout, plan.block, plan.batch or 0, device
    )
    if made is not None:
        replace_module(module, name, made)
    return record


def _dense(layer: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """The layer's meta tensors replaced by these (W * M and b * m)."""
    layer.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        layer.bias = nn.Parameter(bias, requires_grad=False)
