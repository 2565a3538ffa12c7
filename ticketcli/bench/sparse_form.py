"""The sparse runtime form as the bench makes it: `sparse_module` on the bench's device (each masked layer timed
sparse against dense there, kept sparse only where that pays), written as `ticket export --format sparse` writes
it, and read back from that file as `tc.load_sparse` reads an export. The one place the bench makes this form."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from safetensors.torch import save as st_save

from ticketcli.data.registry import DATASETS
from ticketcli.errors import TicketFileError
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse.net import SparseNet, sparse_module
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import text_model


def input_shape(net: MaskedNet, dataset: str) -> tuple[int, ...] | None:
    """One example's shape, to time convolutions on: the dataset's, or the model spec's (None: a Linear-only
    network, whose layers are timed on their own widths, or a text network, timed on sequences of character ids)."""
    if net.spec is not None and text_model(net.spec.arch):
        return None
    if net.spec is not None and net.spec.input is not None:
        return tuple(net.spec.input)
    return DATASETS.get(dataset).shape if dataset in DATASETS else None


def sparse_form(
    net: MaskedNet, masks: dict[str, torch.Tensor], device: torch.device, dataset: str, workdir: Path
) -> tuple[SparseNet, int, float | None, str]:
    """(the form loaded back from its file, the file's bytes, the load's seconds, "" or why it was not read back).
    A model factory's network is not rebuilt from an export (its code is the caller's), nor a network the export's
    reader refuses: its form is the one made here, and its load time None."""
    made = sparse_module(net, masks, device=device, input_shape=input_shape(net, dataset))
    assert net.spec is not None  # runs_build.rebuild records the ticket's parsed model spec
    meta = {"model": net.spec.to_string()} | sparse_file.sparse_metadata(made)
    path = workdir / "sparse.safetensors"
    path.write_bytes(st_save(sparse_file.sparse_tensors(made), metadata=meta))
    size = path.stat().st_size
    if net.spec.arch == "user":
        return made, size, None, "made in memory: a model factory's export is not rebuilt from its file"
    t0 = time.perf_counter()
    try:
        loaded = sparse_file.read_export(path, device=device, file_bytes=size)
    except TicketFileError as e:  # a spec the export's reader does not rebuild: the form as made
        why = str(e).rpartition("not a valid sparse export: ")[2][:120]
        return made, size, None, f"made in memory, not read back from its file ({why})"
    return loaded, size, time.perf_counter() - t0, ""
