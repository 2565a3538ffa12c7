"""What an extraction records: its ticket (the model, method, sparsity and metrics fields) and the run's identity
for --resume; the summary that `extract` prints is runs/summary.py's."""

from __future__ import annotations

from typing import Any

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.data.datasets import Splits
from ticketcli.masking import mask_stats
from ticketcli.methods import METHODS
from ticketcli.methods.base import Details, ExtractResult
from ticketcli.methods.registry import method_document, option
from ticketcli.models import batchnorm
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.models.masked import MaskedNet
from ticketcli.runtime import distributed, machine
from ticketcli.seeding import fingerprint
from ticketcli.settings.readers import method_options
from ticketcli.specs.run import ModelSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import SparsityRecord
from ticketcli.train import evaluate
from ticketcli.version import __version__


def model_record(model: ModelSpec, net: MaskedNet) -> JsonObject:
    """The ticket's `model` field: the spec, for a user's factory every parameter's name and shape, and for a
    network with BatchNorm how evaluation gets its statistics (batchnorm.RECORD)."""
    record = model.to_dict()
    if model.arch == "user":
        record["parameters"] = net.param_shapes()
        record["masked"] = list(net.names)
    if net.batchnorms:
        record["batchnorm"] = {**batchnorm.RECORD, "batch_size": net.calibration_batch}
    return record


def sparsity_report(masks: dict[str, torch.Tensor], spec: RunSpec, details: Details | None = None) -> JsonObject:
    """Requested vs achieved sparsity, globally and per parameter; for double-scoring the share of kept
    augmented entries that sit on auxiliary coordinates (so a user sees whether the auxiliary scores ever win)."""
    details = details or {}
    stats = mask_stats(masks)
    per = {n: s.counted() for n, s in stats.per_param.items()}
    report = {
        "requested": spec.method.sparsity,
        "achieved": 1.0 - stats.density,
        "kept": stats.kept,
        "total": stats.total,
        "per_layer": per,
    }
    if spec.method.layer_densities is not None:
        report["requested_layer_densities"] = list(spec.method.layer_densities)
    if "aug_density" in details:
        report["aug_density"] = details["aug_density"]
    aux = details.get("aux")
    if aux:
        for n, a in aux.items():
            per[n]["aux_share"] = a["aux_kept"] / a["aug_kept"] if a["aug_kept"] else 0.0
        aug_kept = sum(a["aug_kept"] for a in aux.values())
        report["aux_share"] = sum(a["aux_kept"] for a in aux.values()) / aug_kept if aug_kept else 0.0
    if option(spec.method, "project_final"):
        report["projected"] = True  # aux shares describe the trained augmented selection before projection
    if "rounds" in details:
        report["rounds"] = details["rounds"]
    return report


def run_identity(spec: RunSpec, weights: dict[str, torch.Tensor], device: torch.device) -> JsonObject:
    """Everything that decides an extraction's masks, for refusing to resume a checkpoint of another run."""
    data = {k: getattr(spec.data, k) for k in ("name", "n_extract", "n_val", "split_seed")}
    identity: dict[str, Any] = {
        "model": spec.model.to_dict(),
        "init": spec.init.to_dict(),
        "data": data,
        "method": method_document(spec.method),
        "weights_sha256": fingerprint(weights),
        "device": str(device),
        "torch": torch.__version__,
    }
    world = distributed.world()
    if world.active:  # the reduction order depends on the process count; each rank has its own cuda:N
        identity.update(device=device.type, processes=world.size)
    return identity


def trained_metrics(
    net: MaskedNet,
    trained: dict[str, torch.Tensor] | None,
    masks: dict[str, torch.Tensor],
    splits: Splits,
    *,
    chunks: ChunkProgress | None = None,
) -> JsonObject | None:
    """For weight-training methods: accuracy of their trained sparse network (for information, not the ticket).

    Loads `trained` into net: the caller rewinds to the initial weights afterwards."""
    if trained is None:
        return None
    net.load_weights(trained)
    return {
        "test": evaluate(net, masks, splits.x_test, splits.y_test, chunks=chunks, phase="trained test"),
        "val": evaluate(net, masks, splits.x_val, splits.y_val, chunks=chunks, phase="trained validation"),
        "note": "trained weights under the final mask, for information; the ticket is the rewound mask",
    }


def run_metrics(
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    splits: Splits,
    spec: RunSpec,
    *,
    device: torch.device,
    wall: float,
    trained: JsonObject | None,
    chunks: ChunkProgress | None = None,
) -> JsonObject:
    """The ticket's `metrics` field: accuracy and loss of the masks on the (rewound) initial weights (`chunks`: told
    the chunks of the BatchNorm recalibration and of both evaluations)."""
    metrics: JsonObject = {
        "test": evaluate(net, masks, splits.x_test, splits.y_test, chunks=chunks, phase="test"),
        "val": evaluate(net, masks, splits.x_val, splits.y_val, chunks=chunks, phase="validation"),
        "device": str(device),
        "wall_time_s": wall,
    }
    world = distributed.world()
    if world.active:
        metrics["processes"] = world.size
    if spec.method.precision != "fp32":
        metrics["precision"] = spec.method.precision  # of training; the accuracies above are always fp32
    if trained is not None:
        metrics["trained"] = trained
    return metrics


def make_ticket(
    spec: RunSpec,
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    weights: dict[str, torch.Tensor],
    splits: Splits,
    result: ExtractResult,
    *,
    metrics: JsonObject,
    checkpoint: JsonObject | None,
) -> ticket_io.Ticket:
    """The ticket of an extraction: masks, provenance, sparsity and metrics (weights are the initial ones)."""
    return ticket_io.Ticket.of(
        {n: m.cpu() for n, m in masks.items()},
        model=model_record(spec.model, net),
        init=spec.init.to_dict(),
        weights_sha256=fingerprint(weights),
        method=method_record(spec, METHODS.get(spec.method.name).load().score_init, result.details),
        data={k: v for k, v in splits.info.items() if k != "source"},
        sparsity=sparsity_report(masks, spec, result.details),
        metrics=metrics,
        created_by={"ticketcli": __version__, **machine.record()},
        checkpoint=checkpoint,
    )


def method_record(spec: RunSpec, score_init: dict[str, str] | None, details: Details) -> JsonObject:
    """The ticket's `method` field: name, sparsity, the options the method read (settings.readers.method_options;
    the others did not shape the ticket, so they are left out), the matched ticket, how scores started, score
    parameter counts."""
    method = method_document(spec.method)
    read = method_options(spec.method.name)
    return {
        "name": method["name"],
        "sparsity": method["sparsity"],
        **{k: v for k, v in method.items() if k in read},
        **({"matched_to": method["matched_to"]} if method["matched_to"] is not None else {}),
        "score_init": score_init,
        **({"score_params": details["score_params"]} if "score_params" in details else {}),
    }


def counted_layers(masks: dict[str, torch.Tensor], stored: SparsityRecord) -> dict[str, JsonObject]:
    """Per-parameter kept, total and achieved sparsity counted from a loaded ticket's masks (what the file claims is
    not repeated), with the auxiliary share it recorded when that is a number in [0, 1]."""
    layers = {}
    for name, s in mask_stats(masks).per_param.items():
        entry: JsonObject = s.counted()
        share = stored.layer(name).aux_share
        layers[name] = entry if share is None else {**entry, "aux_share": share}
    return layers
