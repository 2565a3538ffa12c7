"""`ticket bench`'s workflow: open a ticket as `evaluate` does, build every form, check each against the ticket's
network on the test split, time the forms that agree interleaved at each batch size, and name the fastest."""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from ticketcli.bench import forms as bench_forms
from ticketcli.bench import timing
from ticketcli.bench.result import DENSE, Agreement, BenchResult, FormReport, TicketBench, Timing
from ticketcli.errors import Interrupted, TicketCliError, UsageError
from ticketcli.methods.base import Progress
from ticketcli.models.registry import text_model
from ticketcli.runs.build import OpenTicket, open_ticket
from ticketcli.runs.inputs import resolve_device
from ticketcli.specs.bench import FORMS, BenchSpec
from ticketcli.specs.run import ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io

TOLERANCE = 1e-5  # float32 rounding: a form's largest logit difference at most this times the largest |logit|
CHECK_CHUNK = 1024  # test examples per forward pass of the agreement check
assert tuple(bench_forms.FORMS) == FORMS, "specs/bench.py names every form of forms.py, in order"


def logits(run: bench_forms.Run, x: torch.Tensor) -> torch.Tensor:
    return torch.cat([run(x[i : i + CHECK_CHUNK]).float() for i in range(0, len(x), CHECK_CHUNK)])


def agreement(out: torch.Tensor, ref: torch.Tensor, y: torch.Tensor) -> Agreement:
    """A form's test logits against the ticket network's: a classifier's (examples, classes), or a language model's
    (sequences, positions, vocabulary) with targets per position, whose every position counts (its accuracy is
    next-character accuracy, and both forms' bits per character are reported)."""
    n = int(y.numel())

    def acc(z: torch.Tensor) -> float:
        return int((z.argmax(-1).reshape(y.shape) == y).sum()) / n

    worst = float(torch.finfo(torch.float32).max)  # outputs of another shape: as far apart as float32 goes
    same = out.shape == ref.shape
    diff = float((out - ref).abs().max()) if same else worst
    bits: tuple[float | None, float | None] = (None, None)
    if y.dim() > 1:  # targets per position: a language model
        bits = (bits_per_char(out, y) if same else None, bits_per_char(ref, y))
    return Agreement(diff, TOLERANCE * float(ref.abs().max()), acc(out), acc(ref), n, *bits)


def bits_per_char(z: torch.Tensor, y: torch.Tensor) -> float:
    """The mean next-character cross-entropy of logits z (..., vocab) against targets y, in bits."""
    return float(F.cross_entropy(z.reshape(-1, z.shape[-1]).double(), y.reshape(-1))) / math.log(2)


def batch_of(x: torch.Tensor, size: int) -> torch.Tensor:
    """`size` test examples (the split repeated where it is shorter)."""
    return x[torch.arange(size, device=x.device) % len(x)].contiguous()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_peak(
    device: torch.device, build: bench_forms.Source, form: bench_forms.Form, x: torch.Tensor
) -> tuple[bench_forms.Built, int]:
    """Build a form on CUDA and run it once on `x`; the peak allocation above what was allocated before."""
    sync(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    built = form.build(build)
    built.run(x)
    sync(device)
    return built, torch.cuda.max_memory_allocated(device) - base


def bench_ticket(
    path: str | Path,
    reader: ReaderSpec = ReaderSpec(),
    spec: BenchSpec = BenchSpec(),
) -> TicketBench:
    """Bench one ticket: dense and every other form of the spec's, each checked, then timed interleaved."""
    return bench_opened(open_ticket(path, reader), Path(path), spec)


def bench_opened(o: OpenTicket, path: Path, spec: BenchSpec = BenchSpec()) -> TicketBench:
    """bench_ticket for a ticket already opened (the Python API's Ticket.bench opens it with runs.build.open_loaded);
    `path` names it in the result."""
    net, masks, dev = o.net, o.masks, o.device
    x, y = o.splits.x_test, o.splits.y_test  # a language model's: blocks of its context, a target per position
    reports: dict[str, FormReport] = {}
    runs: dict[str, bench_forms.Run] = {}
    names = [DENSE, *(f for f in spec.forms if f != DENSE)]
    batches, repeats = spec.batches, spec.repeats
    with torch.inference_mode(), tempfile.TemporaryDirectory(prefix="ticket-bench-") as scratch:
        net.calibrate(masks)  # BatchNorm statistics for these masks, as evaluate computes them
        ref = logits(lambda xb: net(xb, masks), x)
        if net.sequence:  # MaskedNet gives a language model's logits as (batch, vocab, positions), the loss's layout
            ref = ref.transpose(1, 2)  # every form gives the module's own: (batch, positions, vocab)
        src = bench_forms.Source(net, masks, dev, Path(scratch), o.ticket.data.dataset)
        largest = batch_of(x, max(batches))
        for name in names:
            form = bench_forms.FORMS[name]
            try:
                if dev.type == "cuda":
                    built, memory = cuda_peak(dev, src, form, largest)
                else:
                    built = form.build(src)
                    memory = built.memory_bytes
            except bench_forms.Unavailable as e:
                reports[name] = FormReport(name, form.description, False, str(e))
                continue
            agreed = agreement(logits(built.run, x), ref, y)
            description = form.description + (f" ({built.detail})" if built.detail else "")
            why = None if agreed.agrees else "its outputs differ from the ticket's network: timed, never recommended"
            reports[name] = FormReport(
                name, description, True, why, agreed, built.file_bytes, built.load_s, memory, detail=built.detail
            )
            runs[name] = built.run
        per_batch = {b: time_forms(runs, batch_of(x, b), repeats, dev, spec.clock) for b in batches}
    for name, report in reports.items():
        timings = tuple(t[name] for t in per_batch.values() if name in t)
        reports[name] = FormReport(**{**report.__dict__, "timings": timings})
    sparsity = o.ticket.sparsity.achieved
    return TicketBench(
        ticket=str(path),
        model=o.ticket.model.spec,
        sparsity=float(sparsity) if isinstance(sparsity, (int, float)) else None,
        forms=tuple(reports[n] for n in names),
        sequence_length=int(x.shape[1]) if net.spec is not None and text_model(net.spec.arch) else None,
        verdict=timing.verdict(agreeing(per_batch, reports)),
    )


def agreeing(per_batch: dict[int, dict[str, Timing]], reports: dict[str, FormReport]) -> dict[int, dict[str, Timing]]:
    """The timings of the forms whose outputs agree with the ticket's network: the only ones a verdict may name."""
    good = {n for n, r in reports.items() if r.agreement is not None and r.agreement.agrees}
    return {b: {n: t for n, t in timings.items() if n in good} for b, timings in per_batch.items()}


CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}


def check_clock(clock: str, device: torch.device) -> None:
    """The thread clock counts the timing thread's CPU time: all the work only with one torch thread on the CPU."""
    if clock == "thread" and (device.type != "cpu" or torch.get_num_threads() != 1):
        raise UsageError(
            f"--clock thread counts only the calling thread's CPU time: it needs --device cpu and --threads 1, not "
            f"{device} with {torch.get_num_threads()} thread(s)",
            hint="--clock wall measures any device and thread count",
        )


def time_forms(
    runs: dict[str, bench_forms.Run], xb: torch.Tensor, repeats: int, dev: torch.device, clock: str = "wall"
) -> dict[str, Timing]:
    """Each form's timings on the batch `xb`, interleaved, by `clock` (a key of CLOCKS)."""

    def call(run: bench_forms.Run) -> timing.Forward:
        def once() -> object:
            out = run(xb)
            sync(dev)
            return out

        return once

    return timing.interleaved({n: call(r) for n, r in runs.items()}, len(xb), repeats, clock=CLOCKS[clock])


def bench_paths(
    paths: Sequence[Path],
    reader: ReaderSpec = ReaderSpec(),
    spec: BenchSpec = BenchSpec(),
    *,
    progress: Progress | None = None,
) -> BenchResult:
    """Bench every ticket in turn (a folder's: one entry each; one that cannot be benched is an error entry and the
    loop goes on; an interrupt stops it)."""
    check_clock(spec.clock, resolve_device(reader.device))  # before any ticket is opened
    rows = []
    for done, path in enumerate(paths, 1):
        try:
            ticket_io.check_header(path)
            rows.append(bench_ticket(path, reader, spec))
        except Interrupted:
            raise
        except TicketCliError as e:
            if len(paths) == 1:
                raise
            rows.append(TicketBench(str(path), "", None, error=str(e) + (f" ({e.hint})" if e.hint else "")))
        if progress is not None:
            progress({"epoch": done, "unit": "ticket", "last": f"{path} ({rows[-1].verdict_line()[:60]})"})
    return bench_result(rows, reader, spec)


def bench_result(rows: Sequence[TicketBench], reader: ReaderSpec, spec: BenchSpec) -> BenchResult:
    """The result of the tickets benched, with where and how they were measured."""
    dev = resolve_device(reader.device)
    return BenchResult(
        device=str(dev),
        threads=torch.get_num_threads(),
        batches=spec.batches,
        repeats=spec.repeats,
        memory_measure="cuda-peak" if dev.type == "cuda" else "tensors",
        clock=spec.clock,
        tickets=tuple(rows),
    )
