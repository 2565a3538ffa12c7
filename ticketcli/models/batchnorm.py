"""BatchNorm in masked networks: batch statistics while masks or weights train, running statistics recomputed
("recalibrated") for evaluation, so that a ticket (masks + seed) re-evaluates exactly.

Convention. Built-in models use BatchNorm without learned affine parameters, as edge-popup does
(allenai/hidden-networks, utils/bn_type.py: `NonAffineBatchNorm`, BatchNorm2d with affine=False): nothing of it is
masked or initialised, and score training normalises every batch with its own statistics. Edge-popup then
evaluates with the running averages its training run happened to accumulate (momentum 0.1 over the changing
masks); those depend on the whole trajectory, which a ticket does not store. Here they are recomputed instead, for
the final masks and weights, by one fixed pass over the ticket's own extraction split in split order, in chunks of
CALIBRATION_BATCH examples, with cumulative averages (momentum None), in train mode (the procedure of
torch.optim.swa_utils.update_bn). benchmarks/architectures.py measures both on ResNet-20 (docs/results.md).

A user's model keeps whatever BatchNorm it has (affine parameters stay frozen at their factory values, unmasked);
it gets the same treatment. Tickets written before this convention existed (no `batchnorm` record) are evaluated
as they were extracted: every BatchNorm in eval mode with the statistics the factory or checkpoint gave it
("frozen").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ticketcli.errors import UsageError

CALIBRATION_BATCH = 500  # examples per recalibration chunk (10 chunks of the usual 5000-example extraction split)
RECORD = {"statistics": "recalibrated", "split": "extract", "batch_size": CALIBRATION_BATCH}  # the ticket's record
# recalibrate: the default (above). trajectory: edge-popup's running averages over training (measured in the
# benchmark, not stored in tickets). frozen: the module's own statistics in eval mode (tickets without a record).
MODES = ("recalibrate", "trajectory", "frozen")

# Told the chunks of a phase of work over the data (BatchNorm recalibration, evaluation) as they finish: (phase, chunks
# done, chunks in the phase), first (phase, 0, total) when the phase starts. It only records counts (the progress
# display reads them), so the loops stay as they are: no synchronisation is added for it.
ChunkProgress = Callable[[str, int, int], None]


BatchNorm = nn.modules.batchnorm._BatchNorm  # the common base of BatchNorm1d/2d/3d and SyncBatchNorm


def find(module: nn.Module) -> list[BatchNorm]:
    """Every BatchNorm layer (1d, 2d, 3d, SyncBatchNorm) of a module."""
    return [m for m in module.modules() if isinstance(m, BatchNorm)]


@contextmanager
def statistics(layers: list[BatchNorm], mode: str, use: str) -> Iterator[None]:
    """Run the enclosed forward passes with BatchNorm normalising by `use`: "batch" (the batch's own statistics,
    running averages untouched except in trajectory mode), "running" (the running averages, eval mode) or
    "calibrate" (batch statistics, running averages accumulated cumulatively). Restores the layers' flags after."""
    if mode == "frozen" or not layers:
        yield
        return
    saved = [(m.training, m.track_running_stats, m.momentum) for m in layers]
    for m in layers:
        m.training = use != "running"
        m.track_running_stats = use != "batch" or mode == "trajectory"
        if use == "calibrate":
            m.momentum = None  # cumulative moving average: every chunk counts equally
    try:
        yield
    finally:
        for m, (training, track, momentum) in zip(layers, saved):
            m.training, m.track_running_stats, m.momentum = training, track, momentum


EXTRACT_HINT = "choose --batch-size and --n-extract so that no batch (the last one included) holds a single example"


def check_batch(n: int, hint: str = EXTRACT_HINT) -> None:
    """Batch statistics need two examples at least (torch refuses one per channel)."""
    if n < 2:
        raise UsageError(
            "a BatchNorm network normalises with batch statistics, and a batch of 1 example has none", hint=hint
        )


@contextmanager
def buffers_as(module: nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """The module's floating-point buffers (BatchNorm statistics) temporarily in `dtype`, for a forward pass in
    that dtype (SynFlow's float64 pass; eval-mode BatchNorm refuses mixed dtypes)."""
    saved = [
        (m, name, b)
        for m in module.modules()
        for name, b in m.named_buffers(recurse=False)
        if b.is_floating_point() and b.dtype != dtype
    ]
    for m, name, b in saved:
        setattr(m, name, b.to(dtype))
    try:
        yield
    finally:
        for m, name, b in saved:
            setattr(m, name, b)


@torch.no_grad()
def recalibrate(
    layers: list[BatchNorm],
    forward: Callable[[torch.Tensor], object],
    x: torch.Tensor,
    batch_size: int,
    chunks: ChunkProgress | None = None,
) -> None:
    """Reset the running statistics and accumulate them over x in order, in ceil(n / batch_size) chunks of
    nearly equal size (each then counts about as much as it holds), never fewer than 2 examples a chunk; `chunks`
    is told each chunk as phase "recalibration"."""
    n = x.shape[0]
    check_batch(n)
    for m in layers:
        m.reset_running_stats()
    parts = x.tensor_split(min(math.ceil(n / batch_size), n // 2))
    if chunks is not None:
        chunks("recalibration", 0, len(parts))
    with statistics(layers, "recalibrate", "calibrate"):
        for i, chunk in enumerate(parts, 1):
            forward(chunk)
            if chunks is not None:
                chunks("recalibration", i, len(parts))


def read_record(record: object) -> int:
    """The calibration batch size from a ticket's `batchnorm` record; ValueError when it is not one we wrote."""
    if not isinstance(record, dict) or set(record) != set(RECORD):
        raise ValueError(f"unsupported batchnorm record {record!r}")
    size = record["batch_size"]
    if (
        record["statistics"] != "recalibrated"
        or record["split"] != "extract"
        or isinstance(size, bool)
        or not isinstance(size, int)
        or not 1 <= size <= 1 << 20
    ):
        raise ValueError(f"unsupported batchnorm record {record!r}")
    return size
