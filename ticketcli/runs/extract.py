"""`ticket extract` and the Python API's extract: build the network and data from specs, run the method, rewind,
evaluate, and write the ticket (with resumable checkpoints)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from os.path import abspath
from pathlib import Path

import torch
from torch import nn

from ticketcli.data.datasets import Splits, load_splits
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination
from ticketcli.files.checkpoint import Checkpointer, checkpoint_path
from ticketcli.methods.base import Details, Progress
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.runs import build as runs_build
from ticketcli.runs import inputs as runs_inputs
from ticketcli.runs import record as runs_record
from ticketcli.runs import summary as runs_summary
from ticketcli.runs.build import run_budget
from ticketcli.runs.inputs import check_input_shape, resolve_device
from ticketcli.runtime import distributed
from ticketcli.seeding import file_sha256, generator
from ticketcli.selection.structure import check_fits, pattern_of
from ticketcli.specs.run import RunSpec
from ticketcli.ticketfile import ticket as ticket_io


def extract_ticket(
    spec: RunSpec,
    *,
    out: str | Path,
    overwrite: bool = False,
    progress: Progress | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    chunks: ChunkProgress | None = None,
) -> runs_summary.ExtractionResult:
    """Run spec.method, rewind, evaluate, write the ticket; returns the result that reports print.

    checkpoint_every: save resumable state to `<out>.ckpt` every N epochs; resume: continue from it (when it
    exists). The checkpoint is removed once the ticket is written. chunks: told the chunks of the final BatchNorm
    recalibrations and evaluations."""
    ticket_io.check_ticket_name(out)  # before the work, as the destination is
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
    cp = run.ticket.checkpoint
    run.ticket.checkpoint = None if cp is None else cp.saved_at(out)  # readers look for it beside the ticket first
    size = None
    if world.main:  # under torchrun only rank 0 writes; every rank holds the same masks (checked in run_extraction)
        size = ticket_io.save(run.ticket, out, overwrite=overwrite, checked_at_start=True)
        if run.saver is not None:
            run.saver.remove()
    return runs_summary.extract_summary(spec, run.ticket, out, size, run.source, run.details)


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
    method_class = runs_inputs.method_for_run(spec.method.name, checkpointing=checkpoint is not None)
    net, weights = runs_build.build_net(spec.model, spec.init, spec.weights, run_budget(spec), module)
    # a layer the structure cannot tile is refused before any data is read
    check_fits(pattern_of(spec.method.options), {n: tuple(net.weights[n].shape) for n in net.names})
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
