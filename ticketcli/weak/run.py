"""train-weak: rewind a ticket to its init and train only its surviving weights, mask fixed (docs/method.md).

A strong ticket should also be a good weak ticket. Both runs (masked, and the optional dense baseline) start from
the ticket's own initialisation, see the same batch order and use the same optimiser (Appendix B: Adam, lr 1e-3,
batch 512, 40 epochs) on the ticket's own extraction split; validation accuracy is measured after every epoch.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as st_save

from ticketcli.errors import RunFailed
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.masking import mask_stats
from ticketcli.methods.base import Progress
from ticketcli.models.batchnorm import ChunkProgress
from ticketcli.runs.build import OpenTicket, open_ticket
from ticketcli.runs.header import TicketHeader
from ticketcli.runs.parts import SplitMetrics
from ticketcli.runs.record import counted_layers
from ticketcli.runtime import distributed, machine
from ticketcli.seeding import file_sha256, generator
from ticketcli.specs.run import ReaderSpec
from ticketcli.specs.weak import WeakSpec
from ticketcli.ticketfile.safetensors_file import check_safetensors_name
from ticketcli.train import WeightTrainer, evaluate, train_on_extract
from ticketcli.version import __version__
from ticketcli.weak.result import (
    CurvePoint,
    Measured,
    WeakResult,
    WeakRun,
    WeakSparsity,
    WeightsCheck,
    WrittenWeights,
)

WEIGHTS_FORMAT = "ticketcli-trained-weights"


def _measure(o: OpenTicket, masks: dict[str, torch.Tensor] | None, chunks: ChunkProgress | None = None) -> Measured:
    """Test and validation metrics of whatever weights o.net holds now (`chunks`: told their chunks)."""
    s = o.splits
    return Measured(
        test=SplitMetrics.of(evaluate(o.net, masks, s.x_test, s.y_test, chunks=chunks, phase="test")),
        val=SplitMetrics.of(evaluate(o.net, masks, s.x_val, s.y_val, chunks=chunks, phase="validation")),
    )


def train_run(
    o: OpenTicket,
    masks: dict[str, torch.Tensor] | None,
    spec: WeakSpec,
    *,
    label: str,
    progress: Progress | None = None,
    chunks: ChunkProgress | None = None,
) -> tuple[WeakRun, WeightTrainer]:
    """Train from the ticket's init under `masks` (None: dense); returns the run's report and its trainer.

    o.net holds the initial weights again when this returns. chunks: told the chunks of the measurements before
    and after the epochs (BatchNorm recalibration, test and validation evaluation)."""
    net, s = o.net, o.splits
    net.load_weights(o.weights)  # rewind
    initial = _measure(o, masks, chunks)
    trainer = WeightTrainer(net, masks, spec.optim, weights=o.weights, precision=spec.precision)
    curve: list[CurvePoint] = []

    def on_epoch(record: dict[str, Any]) -> None:
        net.load_weights(trainer.weights())
        val = evaluate(net, masks, s.x_val, s.y_val)
        point = {**record, "val_accuracy": val["accuracy"], "val_loss": val["loss"]}
        curve.append(CurvePoint(**point))
        if progress is not None:
            progress({**point, "run": label})

    t0 = time.perf_counter()
    # one generator tag for both runs: the masked run and the dense baseline see the same batch order
    train_on_extract(trainer, s, spec, generator(o.ticket.init.seed, "train-weak"), on_epoch=on_epoch)
    wall = time.perf_counter() - t0
    distributed.check_identical(trainer.weights(), f"the {label} run's trained weights")  # under torchrun only
    net.load_weights(trainer.weights())
    final = _measure(o, masks, chunks)
    net.load_weights(o.weights)
    best = max(curve, key=lambda p: p.val_accuracy)  # first epoch with the highest validation accuracy
    gain = (final.test.correct - initial.test.correct) / final.test.n  # exact, not a float difference
    run = WeakRun(
        initial=initial,
        final=final,
        gain=gain,
        best_val_epoch=best.epoch,
        best_val_accuracy=best.val_accuracy,
        curve=tuple(curve),
        wall_time_s=wall,
    )
    return run, trainer


def state_dict(trainer: WeightTrainer, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Trained weights as a plain CPU state dict, masked entries +0.0 (W * M may leave -0.0)."""
    return {n: torch.where(masks[n], w, torch.zeros_like(w)).cpu().contiguous() for n, w in trainer.weights().items()}


def check_sparsity(weights: dict[str, torch.Tensor], masks: dict[str, torch.Tensor]) -> WeightsCheck:
    """The trained weights must be zero wherever the mask is: count nonzeros inside and outside the mask."""
    masks = {n: m.cpu() for n, m in masks.items()}
    outside = sum(int(((w != 0) & ~masks[n]).sum()) for n, w in weights.items())
    nonzero = sum(int((w != 0).sum()) for w in weights.values())
    if outside:
        raise RunFailed(f"{outside} masked weights became nonzero during training (a bug in masked training)")
    return WeightsCheck(nonzero_after=nonzero, masked_nonzero_after=outside, unchanged=True)


def train_weak(
    path: str | Path,
    reader: ReaderSpec = ReaderSpec(),
    *,
    spec: WeakSpec = WeakSpec(),
    dense_baseline: bool = False,
    out: str | Path | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
    chunks: ChunkProgress | None = None,
) -> WeakResult:
    """Train a ticket's surviving weights with its mask fixed (and optionally the dense net); write them to `out`.
    chunks: told the chunks of each run's measurements before and after its epochs."""
    path = Path(path)
    if out is not None:
        check_safetensors_name(
            out, "the trained weights file", hint=f"name it {Path(out).stem or 'weights'}.safetensors"
        )
        check_destination(out, overwrite=overwrite)  # fail before the work, not after
    policy = replace(reader.policy, train_batch=spec.batch_size)  # what the budget weighs (budget.py)
    o = open_ticket(path, replace(reader, policy=policy))
    tk = o.ticket
    masked, trainer = train_run(o, o.masks, spec, label="masked", progress=progress, chunks=chunks)
    trained = state_dict(trainer, o.masks)
    weights_check = check_sparsity(trained, o.masks)
    stats = mask_stats({n: m.cpu() for n, m in o.masks.items()})
    sparsity = WeakSparsity(
        requested=tk.sparsity.requested,
        kept=stats.kept,
        total=stats.total,
        achieved=1.0 - stats.density,
        per_layer=counted_layers(o.masks, tk.sparsity),
    )
    ticket_sha = file_sha256(str(path))
    data_record = tk.data.split()
    data_record["n_test"] = int(o.splits.y_test.numel())
    dense = None
    if dense_baseline:
        dense, _ = train_run(o, None, spec, label="dense", progress=progress, chunks=chunks)
    written = None
    if out is not None and distributed.world().main:  # under torchrun only rank 0 writes
        meta = {
            "format": WEIGHTS_FORMAT,
            "ticket": str(path),
            "ticket_sha256": ticket_sha,
            "weights_sha256": tk.weights_sha256,
            "model": tk.model.spec,
            "method": tk.method.name,
            "epochs": str(spec.epochs),
            "batch_size": str(spec.batch_size),
            "optimizer": json.dumps(spec.optim.to_dict()),
            "data": json.dumps(data_record),
            "final": json.dumps({"test": masked.final.test.accuracy, "val": masked.final.val.accuracy}),
            "created_by": json.dumps({"ticketcli": __version__, **machine.record()}),
        }
        size = write_atomic(out, st_save(trained, metadata=meta), overwrite=overwrite, checked_at_start=True)
        written = WrittenWeights(path=str(out), file_bytes=size)
    return WeakResult(
        header=TicketHeader.of(path, tk),
        ticket_sha256=ticket_sha,
        device=str(o.device),
        data=data_record,
        spec=spec,
        sparsity=sparsity,
        weights_check=weights_check,
        masked=masked,
        integrity=tk.integrity,
        dense=dense,
        processes=distributed.world().size if distributed.world().active else None,
        out=written,
    )
