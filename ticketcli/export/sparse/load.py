"""`load_sparse`: a sparse export (`ticket export --format sparse`) or a ticket file to the sparse runtime form."""

from __future__ import annotations

import os
from pathlib import Path

from safetensors import SafetensorError, safe_open
from torch import nn

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.export import inputs as export_inputs
from ticketcli.export.request import LAYOUTS
from ticketcli.export.run import recalibrate
from ticketcli.export.sparse import file as sparse_file
from ticketcli.export.sparse import layouts, seeded
from ticketcli.export.sparse.net import SparseNet, check_batch, make_sparse
from ticketcli.export.sparse.search import remeasure
from ticketcli.export.sparse.skeleton import called_directly, image_shape, meta_network
from ticketcli.models.masked import MaskedNet
from ticketcli.runs import build as runs_build
from ticketcli.runs.inputs import resolve_device
from ticketcli.specs.run import MAX_PARAMS, DataSpec, ModelPolicy, ModelSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.layout import FORMAT as TICKET_FORMAT
from ticketcli.ticketfile.meta import strict_json


def file_format(path: Path) -> str:
    """The `format` a safetensors file's metadata names ("" when it names none); one line for an unreadable file."""
    if not path.is_file():
        raise UsageError(f"{str(path)[:200]}: no such file")
    try:
        with safe_open(str(path), framework="pt") as f:
            return str((f.metadata() or {}).get("format", ""))
    except (SafetensorError, OSError, ValueError) as e:
        raise TicketFileError(f"{path}: not a safetensors file ({str(e).splitlines()[0][:120]})") from None


def load_sparse(
    path: str | Path,
    *,
    device: str = "cpu",
    measure: bool | None = None,
    batch: int = 64,
    max_params: int = MAX_PARAMS,
    trust_model_code: bool = False,
    data_dir: str | Path | None = None,
    layout: str = "auto",
) -> SparseNet:
    """The sparse runtime form (a SparseNet: call it like the network) of a sparse export or of a ticket file.

    A sparse export (`ticket export --format sparse`) is read as hostile input, its digest and every tensor
    checked before use, and its layers take the form the file records, unless `measure=True`, which times each CSR
    or dense layer again on `device` at `batch` examples and keeps it sparse only where sparse is faster there. A
    layer stored as BSR or 2:4 (`--layout`) computes with torch's BSR product where it runs on `device`, with the
    semi-structured kernels on CUDA, and as CSR or dense elsewhere; its record says which and why.

    A ticket file is turned into the sparse form directly: a built-in model drawn from its seed is regenerated one
    layer at a time (never more than one layer dense in memory; `SparseNet.layer_by_layer` is True) and checked
    against the ticket's weights fingerprint; a ticket of a model factory, of a checkpoint or with BatchNorm
    statistics to recompute (from its dataset, found through `data_dir`) is rebuilt whole first. Its layers are
    measured unless `measure=False` (every layer sparse). `trust_model_code`: allow importing the factory a ticket
    names; `max_params`: refuse a bigger model before anything is built. `layout` (as export's `--layout`: "auto",
    "csr", "bsr" or "2:4") stores a ticket's layers as an export of that layout would, checked against its masks
    (auto: bsr for a block ticket, 2:4 for an N:M ticket that fits it, csr otherwise); an export keeps its own
    layout, which `layout` may name.

    A character-level language model (gpt-nano) takes (batch, length) character ids, length up to its context;
    its token embedding, whose weight the network reads as a table, stays dense."""
    batch = check_batch(batch)
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise UsageError(f"layout= must be one of {', '.join(LAYOUTS)}, got {str(layout)[:20]!r}")
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path= must be a file name, got {type(path).__name__}")
    path = Path(path)
    dev = resolve_device(device)
    fmt = file_format(path)
    if fmt == sparse_file.FORMAT:
        snet = sparse_file.read_export(path, device=dev, max_params=max_params, file_bytes=path.stat().st_size)
        stored = snet.metadata.get("layout", "")
        if layout not in ("auto", stored):
            raise UsageError(
                f"{path} is an export stored as {stored[:20]!r}; layout= {layout!r} applies to a ticket file",
                hint="export the ticket again with --layout, or load the ticket itself with layout=",
            )
        if measure:
            remeasure(snet, batch, export_shape(snet.metadata))
        return snet
    if fmt != TICKET_FORMAT:
        raise TicketFileError(f"{path}: neither a ticket nor a sparse export (its format is {fmt[:40]!r})")
    policy = ModelPolicy(max_params=max_params, trust_model_code=trust_model_code)
    tk = ticket_io.scan(path).ticket  # the records, validated; the masks are read later, one layer at a time
    model = runs_build.ticket_model(tk, path, policy)
    inputs = export_inputs.inputs_of(tk, MaskedNet(_meta(model) if model.arch != "user" else nn.Identity(), model))
    metadata = inputs.metadata()
    shape = image_shape(inputs)
    if seeded.regenerable(tk, model):
        timed = measure is not False
        batched = batch if timed else None
        snet = seeded.regenerate(path, policy, device=dev, batch=batched, metadata=metadata, layout=layout)
        if timed:
            remeasure(snet, batch, shape, unmeasured_only=True)  # the convolutions
        return snet
    full = ticket_io.load(path, max_params=max_params)
    net, _ = runs_build.rebuild(full, path, None, policy)
    masks = {n: full.masks[n] for n in net.names}
    if net.batchnorms and net.bn_statistics == "recalibrate":
        recalibrate(net, masks, full, path, DataSpec() if data_dir is None else DataSpec(search_dirs=(str(data_dir),)))
    stored, block = layouts.choose(layout, full, masks, called_directly(net.module))
    timed = measure is not False
    snet = make_sparse(
        net, masks, device=dev, measure=timed, batch=batch, input_shape=shape, layout=stored, block=block
    )
    snet.source, snet.metadata = "ticket", metadata
    return snet


def _meta(model: ModelSpec) -> nn.Module:
    return meta_network(model)  # not built under torch.device("meta"): see skeleton.meta_network


def export_shape(metadata: dict[str, str]) -> tuple[int, ...] | None:
    """One example's shape as an export's metadata records it (None when it does not, or for character ids)."""
    if metadata.get("input_dtype") != "float32":
        return None
    try:
        shape = strict_json(metadata.get("input_shape", ""))
    except ValueError:
        return None
    ok = isinstance(shape, list) and 0 < len(shape) <= 4 and all(isinstance(d, int) and 0 < d < 2**20 for d in shape)
    return tuple(shape) if ok else None
