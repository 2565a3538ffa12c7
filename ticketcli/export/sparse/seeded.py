"""A ticket's network regenerated from its seed straight into the sparse form, one layer at a time: the parameters
are drawn in the order `models.init.init_weights` draws them, from the same generator, so each is bit for bit the
full network's; each is hashed into the weights' fingerprint, masked from the ticket's packed bits a few rows at a
time, turned into its CSR arrays and let go before the next is drawn. At most one layer is ever dense in memory.
Where asked, each Linear layer is timed dense while its dense form exists anyway, then sparse once the dense weight
is gone (one form after the other: the sparse kernel's workspace never comes on top of the dense weight), and
load.py times the convolutions afterwards (search.remeasure: again one layer dense at a time)."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ticketcli.errors import TicketFileError
from ticketcli.export.sparse import layers as sparse_layers
from ticketcli.export.sparse.graph import layer_kind, replace_module
from ticketcli.export.sparse.measure import DENSE, SPARSE, LayerRecord, decide, median_time
from ticketcli.export.sparse.net import SparseNet
from ticketcli.models.build import build_model
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.masked import fan_in, layer_of, masked_names
from ticketcli.runs import build as runs_build
from ticketcli.runs import checks as runs_checks
from ticketcli.specs.run import ModelPolicy, ModelSpec
from ticketcli.ticketfile import ticket as ticket_io


def regenerable(tk: ticket_io.Ticket, model: ModelSpec) -> bool:
    """A ticket whose network can be regenerated a layer at a time: a built-in model drawn from its seed (no
    checkpoint) whose every parameter is masked and which holds no buffer (no BatchNorm statistics to recompute
    from data). Others are rebuilt whole (load.py)."""
    if model.arch == "user" or tk.checkpoint is not None:
        return False
    with torch.device("meta"):
        module = build_model(model)
    names = [n for n, _ in module.named_parameters()]
    return names == masked_names(module) and not list(module.buffers())


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


def regenerate(
    path: Path, policy: ModelPolicy, *, device: torch.device, batch: int | None, metadata: dict[str, str]
) -> SparseNet:
    """The ticket at `path` in the sparse form on `device`, its network regenerated from the seed one layer at a
    time and checked against the ticket's fingerprint; `batch`: each Linear layer timed sparse against dense at
    that batch as it is made (None: none timed)."""
    with ticket_io.MaskFile(path) as mf:
        tk = mf.scan.ticket
        ticket_io.require_intact(tk, path)
        model = runs_build.ticket_model(tk, path, policy)
        runs_checks.check_planned(tk, model, path, runs_build.policy_budget(policy))
        with torch.device("meta"):
            module = build_model(model)
        init = tk.init.spec()
        scheme = INIT_SCHEMES.get(init.scheme)
        g = torch.Generator().manual_seed(init.seed)
        params = dict(module.named_parameters())
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
                records.append(_layer(module, owner, layer, pending.pop(owner), mf, device, batch))
            del layer  # a layer made sparse lets its dense weight go here, before the next is drawn
        if digest.hexdigest() != tk.weights_sha256:
            raise TicketFileError(
                f"{path}: weights fingerprint mismatch (rebuilt {digest.hexdigest()[:12]}, ticket "
                f"{tk.weights_sha256[:12]}); the network cannot be reproduced here (ticket made with torch "
                f"{tk.created_by.torch}, this is torch {torch.__version__})"
            )
    return SparseNet(module.to(device), tuple(records), source="ticket", layer_by_layer=True, metadata=metadata)


def _layer(
    module: nn.Module,
    name: str,
    layer: nn.Module,
    drawn: dict[str, torch.Tensor],
    mf: ticket_io.MaskFile,
    device: torch.device,
    batch: int | None,
) -> LayerRecord:
    """One layer, its weights drawn: masked from its packed bits (the bias in place), its weight's CSR built a few
    rows at a time, and put into `module` sparse, or dense (W * M) where it cannot be lowered or where `batch` is
    given and a Linear layer measured faster dense at that batch. (A convolution's input shape is known only
    once the network can run: load.py times it afterwards.)"""
    w = drawn.pop("weight")
    bits = _Bits(mf, f"{name}.weight", tuple(w.shape))
    kind, shape = layer_kind(layer), tuple(w.shape)
    bias = drawn.pop("bias", None)
    if bias is not None:
        bias.mul_(_Bits(mf, f"{name}.bias", tuple(bias.shape)).rows(0, bias.shape[0]).reshape(-1))
    lowerable = sparse_layers.lowerable(layer)
    timed = lowerable and batch is not None and isinstance(layer, nn.Linear)
    csr = sparse_layers.csr_rows(w.reshape(w.shape[0], -1), bits.rows, zero_dropped=timed or not lowerable)
    del bits
    nnz = int(csr.values().numel())
    if timed or not lowerable:  # the dense layer: W * M in place of the meta tensors
        layer.weight = nn.Parameter(w.to(device), requires_grad=False)
        if bias is not None:
            layer.bias = nn.Parameter(bias.to(device), requires_grad=False)
    del w
    if not lowerable:
        record = decide(name, kind, shape, nnz, None, 0, str(device))
        return replace(record, form=DENSE, reason="dense: a grouped or non-zero-padded convolution is not lowered")
    sparse = sparse_layers.sparse_layer(layer, csr.to(device), None if bias is None else bias.to(device))
    times = None
    if timed and batch is not None:
        x = torch.randn(batch, shape[1], device=device)
        dense_s = median_time(layer, x)  # the dense form first, then let go of it: never both with a kernel's workspace
        layer.weight = nn.Parameter(torch.empty(shape, device="meta"), requires_grad=False)
        times = (median_time(sparse, x), dense_s)
    record = decide(name, kind, shape, nnz, times, batch or 0, str(device))
    if record.form == SPARSE:
        replace_module(module, name, sparse)
    elif timed:  # dense won: W * M again, from the CSR arrays
        layer.weight = nn.Parameter(sparse_layers.dense_of(csr).reshape(shape).to(device), requires_grad=False)
    return record
