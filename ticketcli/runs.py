"""End-to-end runs: build the network and data from specs, run a method, evaluate, write or re-check a ticket.

The entry points the commands call live here; the input checks they rely on are in runs_checks.py and what a run
records (ticket fields, summaries) in runs_record.py."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from os.path import abspath
from pathlib import Path

import torch
from torch import nn

from ticketcli import distributed, runs_checks, runs_record
from ticketcli.atomic import check_destination
from ticketcli.batchnorm import ChunkProgress
from ticketcli.budget import Budget
from ticketcli.checkpoint import Checkpointer, checkpoint_path, saved_at
from ticketcli.data import DATASETS, Splits, load_splits
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.init import INIT_SCHEMES, init_weights
from ticketcli.methods import Progress
from ticketcli.methods.base import Details
from ticketcli.models.build import build_model, check_param_count, frozen_copy, planned_shapes
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.runs_checks import check_input_shape, resolve_device
from ticketcli.runs_inspect import inspect_ticket as inspect_ticket  # numpy only; re-exported for callers of runs
from ticketcli.seeding import file_sha256, fingerprint, generator
from ticketcli.specs import DataSpec, InitSpec, ModelPolicy, ModelSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import evaluate


def build_net(
    model: ModelSpec,
    init: InitSpec,
    weights_path: str | None,
    limits: Budget = Budget(),
    module: nn.Module | None = None,
) -> tuple[MaskedNet, dict]:
    """The frozen network (on CPU) and its weights (drawn from init, or loaded from weights_path).

    A built-in model over the budget (its parameters and memory, worked out from the spec alone: budget.py) is
    refused before anything is built; a user's factory (run because the user named it) is counted once built.
    `module`: the caller's own nn.Module (the Python API) instead of the factory, used as a frozen copy (the
    caller's stays untouched)."""
    if model.arch != "user":
        planned_shapes(model, limits)
    module = build_model(model) if module is None else frozen_copy(module)
    if model.arch == "user":
        check_param_count(model, sum(p.numel() for p in module.parameters()), limits.max_params)
    weights = init_weights(module, init) if weights_path is None else runs_checks.load_checkpoint(weights_path, module)
    net = MaskedNet(module, model)
    net.load_weights(weights)
    return net, weights


def extract_ticket(
    spec: RunSpec,
    *,
    out: str | Path,
    overwrite: bool = False,
    progress: Progress | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    chunks: ChunkProgress | None = None,
) -> dict:
    """Run spec.method, rewind, evaluate, write the ticket; returns the summary that reports print.

    checkpoint_every: save resumable state to `<out>.ckpt` every N epochs; resume: continue from it (when it
    exists). The checkpoint is removed once the ticket is written. chunks: told the chunks of the final BatchNorm
    recalibrations and evaluations."""
    check_destination(out, overwrite=overwrite)  # fail before the work, not after
    ckpt = checkpoint_path(out)
    if checkpoint_every is not None and not resume:
        # a file of that name is the user's, not this run's: replaced only with --force (--resume reads it first,
        # and uses it only if it holds this very run's state)
        check_destination(ckpt, overwrite=True)  # a special file or an unwritable folder: refused even with --force
        if os.path.lexists(ckpt) and not overwrite:
            raise UsageError(
                f"{ckpt} already exists", hint="pass --resume to continue from it, or --force to overwrite it"
            )
    elif checkpoint_every is not None:
        check_destination(ckpt, overwrite=True)
    world = distributed.world()

    def saver(weights: dict[str, torch.Tensor], device: torch.device) -> Checkpointer:
        # every rank resumes from the checkpoint; only rank 0 writes it
        return Checkpointer(
            ckpt,
            every=checkpoint_every if world.main else None,
            identity=runs_record.run_identity(spec, weights, device),
            resume=resume,
            overwrite=overwrite,
        )

    run = run_extraction(
        spec, progress=progress, checkpoint=saver if checkpoint_every is not None or resume else None, chunks=chunks
    )
    run.ticket.checkpoint = saved_at(run.ticket.checkpoint, out)  # readers look for it beside the ticket first
    size = None
    if world.main:  # under torchrun only rank 0 writes; every rank holds the same masks (checked in run_extraction)
        size = ticket_io.save(run.ticket, out, overwrite=overwrite)
        if run.saver is not None:
            run.saver.remove()
    return runs_record.extract_summary(spec, run.ticket, out, size, run.source, run.details)


@dataclass
class Extraction:
    """An extraction's ticket (not yet written) and what its summary reports beside it."""

    ticket: ticket_io.Ticket
    source: str  # where the data came from
    details: Details
    saver: Checkpointer | None


def run_extraction(
    spec: RunSpec,
    *,
    progress: Progress | None = None,
    checkpoint: Callable[[dict[str, torch.Tensor], torch.device], Checkpointer] | None = None,
    splits: Splits | None = None,
    module: nn.Module | None = None,
    chunks: ChunkProgress | None = None,
) -> Extraction:
    """Run spec.method, rewind, evaluate: the ticket of `ticket extract` and of the Python API's extract.

    checkpoint: makes the resumable-state saver from the initial weights and device. splits: the caller's data
    instead of spec.data's dataset; module: the caller's nn.Module instead of spec.model's builder. chunks: told the
    chunks of the final BatchNorm recalibrations and evaluations (after the method's epochs)."""
    device = resolve_device(spec.device)
    method_class = runs_checks.method_for_run(spec.method.name, checkpointing=checkpoint is not None)
    net, weights = build_net(spec.model, spec.init, spec.weights, run_budget(spec), module)
    # absolute here; saved relative to the ticket's folder (checkpoint.saved_at), wherever the ticket is written
    from_file = None if spec.weights is None else {"path": abspath(spec.weights), "sha256": file_sha256(spec.weights)}
    splits = load_splits(spec.data) if splits is None else splits
    check_input_shape(spec.model, splits, net)
    net.to(device)
    splits = splits.to(device)
    net.calibration = splits.x_extract  # BatchNorm's evaluation statistics come from the extraction split
    saver = None if checkpoint is None else checkpoint(weights, device)

    t0 = time.perf_counter()
    result = method_class().extract(
        net,
        splits,
        spec.method,
        device=device,
        generator=generator(spec.init.seed, "method"),
        progress=progress,
        checkpoint=saver,
    )
    wall = time.perf_counter() - t0

    masks = {n: result.masks[n].to(device) for n in net.names}
    distributed.check_identical(masks, "the final masks")  # under torchrun only
    trained = runs_record.trained_metrics(net, result.trained_weights, masks, splits, chunks=chunks)
    net.load_weights(weights)  # rewind: the ticket is always evaluated on the original initialisation
    metrics = runs_record.run_metrics(
        net, masks, splits, spec, device=device, wall=wall, trained=trained, chunks=chunks
    )
    tk = runs_record.make_ticket(spec, net, masks, weights, splits, result, metrics=metrics, checkpoint=from_file)
    return Extraction(tk, splits.info["source"], result.details, saver)


def run_budget(spec: RunSpec) -> Budget:
    """What an extraction may cost: its limits at its training batch size."""
    return Budget(spec.max_params, spec.max_memory, train_batch=spec.method.batch_size)


def policy_budget(policy: ModelPolicy) -> Budget:
    """What rebuilding a ticket may cost: the policy's limits at the batch size of the command that rebuilds it."""
    return Budget(policy.max_params, policy.max_memory, train_batch=policy.train_batch)


def ticket_model(tk: ticket_io.Ticket, path: Path, policy: ModelPolicy) -> ModelSpec:
    """The ticket's model spec, parsed, once the policy allows building it: a factory the ticket names is never
    imported unless the user opted in (--trust-model-code, or --model naming that same factory)."""
    try:
        model = parse_model(tk.model["spec"])
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    if policy.model is not None:
        given = parse_model(policy.model)
        if model.arch != "user" or given.factory != model.factory:
            raise UsageError(
                f"--model {policy.model[:80]} is not this ticket's model ({model.to_string()[:80]})",
                hint="with a ticket, --model only confirms the model factory the ticket names",
            )
    elif model.arch == "user" and not policy.trust_model_code:
        module = str(model.factory).partition(":")[0]
        raise UsageError(
            f"{path} names the model factory {model.factory}: rebuilding it would import and run "
            f"module {module!r}, which a ticket alone never does",
            hint=f"if you trust this ticket, pass --trust-model-code or --model {model.factory}",
        )
    return model


def rebuild(
    tk: ticket_io.Ticket,
    path: Path,
    weights_path: str | None,
    policy: ModelPolicy = ModelPolicy(),
    module: nn.Module | None = None,
) -> tuple[MaskedNet, dict]:
    """The ticket's network from its spec and seed (or checkpoint), checked against shapes and fingerprint.

    Refused before anything runs or is allocated: masks that no longer match their recorded digest, a factory
    the policy does not allow importing, a model over policy.max_params or whose shapes differ from the ticket's.
    `module`: the caller's own nn.Module for a factory's ticket (nothing is imported), weights drawn as for it."""
    ticket_io.require_intact(tk, path)
    model = ticket_model(tk, path, policy if module is None else replace(policy, trust_model_code=True))
    if module is not None and model.arch != "user":
        raise UsageError(f"{path} is a ticket of the built-in model {model.to_string()[:80]}; it takes no module")
    try:
        INIT_SCHEMES.get(tk.init["scheme"])
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    runs_checks.check_planned(tk, model, path, policy_budget(policy))
    init = InitSpec(scheme=tk.init["scheme"], k=float(tk.init.get("k", InitSpec.k)), seed=tk.init["seed"])
    if tk.checkpoint is not None:
        weights_path = runs_checks.checkpoint_file(tk, path, weights_path, policy.max_params)
    elif weights_path is not None:
        raise UsageError(f"{path} was built from seed {init.seed}; it takes no --weights")
    try:
        net, weights = build_net(model, init, weights_path, policy_budget(policy), module)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    runs_checks.check_user_model(model, tk.model, net, path)
    runs_checks.batchnorm_convention(tk.model, net, path)
    if net.shapes() != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} "
            f"({runs_checks.shape_difference(tk.shapes, net.shapes())})"
        )
    fp = fingerprint(weights)
    if fp != tk.weights_sha256:
        raise TicketFileError(
            f"{path}: weights fingerprint mismatch (rebuilt {fp[:12]}, ticket {tk.weights_sha256[:12]}); "
            f"the network cannot be reproduced here (ticket made with torch {tk.created_by.get('torch')}, "
            f"this is torch {torch.__version__})"
        )
    return net, weights


@dataclass
class OpenTicket:
    """A loaded ticket with its rebuilt network (initial weights), masks and data splits, all on `device`."""

    ticket: ticket_io.Ticket
    net: MaskedNet
    weights: dict[str, torch.Tensor]  # the initial weights (CPU), fingerprint-checked
    masks: dict[str, torch.Tensor]  # param -> bool mask on device
    splits: Splits
    device: torch.device


def open_ticket(
    path: str | Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
) -> OpenTicket:
    """Load and validate a ticket, rebuild its network and its own data splits (evaluate, train-weak)."""
    path = Path(path)
    tk = ticket_io.load(path, max_params=policy.max_params)
    return open_loaded(tk, path, data=data, device=device, weights=weights, policy=policy)


def open_loaded(
    tk: ticket_io.Ticket,
    path: Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
    splits: Splits | None = None,
    module: nn.Module | None = None,
) -> OpenTicket:
    """open_ticket for a ticket already read (`path` names it in messages); splits: the caller's data instead of
    the ticket's own dataset, module: the caller's nn.Module for a factory's ticket (rebuild)."""
    if splits is None and tk.data["dataset"] not in DATASETS:  # before anything is built
        raise TicketFileError(f"{path}: unknown dataset {tk.data['dataset'][:80]!r}")
    dev = resolve_device(device)
    net, init_weights_ = rebuild(tk, path, weights, policy, module)
    if splits is None:
        spec = replace(
            data,
            name=tk.data["dataset"],
            n_extract=tk.data["n_extract"],
            n_val=tk.data["n_val"],
            split_seed=tk.data["split_seed"],
        )
        splits = load_splits(spec)
    check_input_shape(parse_model(tk.model["spec"]), splits, net)
    net.to(dev)
    masks = {n: m.to(dev) for n, m in tk.masks.items()}
    splits = splits.to(dev)
    net.calibration = splits.x_extract  # as at extraction: BatchNorm statistics recomputed from this split
    return OpenTicket(tk, net, init_weights_, masks, splits, dev)


def evaluate_ticket(
    path: str | Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
    chunks: ChunkProgress | None = None,
) -> dict:
    """Rebuild a ticket's network, apply its masks and re-measure test and validation accuracy; `chunks` is told
    the chunks of the BatchNorm recalibration and of both evaluations as they finish."""
    path = Path(path)
    tk = ticket_io.load(path, max_params=policy.max_params)
    return evaluate_loaded(tk, path, data=data, device=device, weights=weights, policy=policy, chunks=chunks)


def evaluate_loaded(
    tk: ticket_io.Ticket,
    path: Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
    splits: Splits | None = None,
    module: nn.Module | None = None,
    chunks: ChunkProgress | None = None,
) -> dict:
    """evaluate_ticket for a ticket already read (the Python API's Ticket.evaluate); see open_loaded."""
    o = open_loaded(tk, path, data=data, device=device, weights=weights, policy=policy, splits=splits, module=module)
    tk, net, masks, splits, dev = o.ticket, o.net, o.masks, o.splits, o.device
    test = evaluate(net, masks, splits.x_test, splits.y_test, chunks=chunks, phase="test")
    val = evaluate(net, masks, splits.x_val, splits.y_val, chunks=chunks, phase="validation")
    return runs_record.evaluation_summary(path, tk, dev, test, val)
