"""The sparse runtime form as the bench writes and loads it: the `csr` export's file (every masked parameter as
CSR of its (shape[0], rest) view, the rest dense), loaded with each masked Linear layer computing with its CSR
weight and every other masked parameter made dense again. The one place the bench makes this form."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file
from safetensors.torch import save as st_save
from torch import nn

from ticketcli.bench import kernels
from ticketcli.export import run as export_run
from ticketcli.models.masked import MaskedNet

PARTS = ("crow_indices", "col_indices", "values", "shape")


def sparse_bytes(net: MaskedNet, masks: dict[str, torch.Tensor]) -> bytes:
    """The form's file: the csr export's state (safetensors)."""
    state, _ = export_run.csr_state(net, masks)
    return st_save(state)


def load_into(module: nn.Module, path: Path, device: torch.device) -> nn.Module:
    """Load the form's file into `module` (the ticket's architecture on `device`): masked Linear weights become
    CSR layers (kernels.SparseLinear), other masked parameters dense tensors; returns the module."""
    state = load_file(path, device=str(device))
    masked = sorted({k.removesuffix(".crow_indices") for k in state if k.endswith(".crow_indices")})
    owners = dict(module.named_modules())
    dense = {k: v for k, v in state.items() if not any(k == f"{n}.{p}" for n in masked for p in PARTS)}
    sparse: dict[str, torch.Tensor] = {}
    for n in masked:
        shape = [int(s) for s in state[f"{n}.shape"].tolist()]
        crow, col = state[f"{n}.crow_indices"].to(torch.int64), state[f"{n}.col_indices"].to(torch.int64)
        rows = shape[0] if shape else 1
        size = (rows, math.prod(shape) // rows)
        with warnings.catch_warnings():  # torch calls its CSR support beta, once per process: not ours to show
            warnings.simplefilter("ignore")
            m = torch.sparse_csr_tensor(crow, col, state[f"{n}.values"], size=size, check_invariants=True)
        owner, _, attr = n.rpartition(".")
        if attr == "weight" and isinstance(owners.get(owner), nn.Linear) and len(shape) == 2:
            sparse[owner] = m
        else:
            dense[n] = m.to_dense().reshape(shape)
    module.load_state_dict({k: v for k, v in dense.items() if k.rpartition(".")[0] not in sparse}, strict=False)
    for owner, weight in sparse.items():
        bias = dense.get(f"{owner}.bias")
        parent, _, attr = owner.rpartition(".")
        setattr(module.get_submodule(parent) if parent else module, attr, kernels.SparseLinear(weight, bias))
    return module
