"""`Ticket.bench`: what `ticket bench` reports, from Python (a method of `Ticket`, defined here to keep ticket.py
small): the ticket opened as `Ticket.evaluate` opens it, then the bench's workflow (`bench.run`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from ticketcli.api import data as api_data
from ticketcli.api.keywords import speaks_keywords
from ticketcli.bench.result import BenchResult
from ticketcli.runs import build as runs_build
from ticketcli.runs import inputs as runs_inputs
from ticketcli.runtime.threads import using
from ticketcli.specs.bench import bench_spec
from ticketcli.specs.run import ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io


class Opens(Protocol):
    """What `bench` reads of its Ticket (api/ticket.py, which it may not import: the Ticket class holds it)."""

    _record: ticket_io.Ticket

    @property
    def _label(self) -> Path: ...

    def _reader(
        self,
        device: str,
        weights: str | Path | None,
        trust_model_code: bool,
        data_dir: str | Path | None,
        threads: int | None,
    ) -> ReaderSpec: ...

    def _data_for(self, data: api_data.Data | None, call: str) -> api_data.Data | None: ...


@speaks_keywords("Ticket.bench")
def bench(
    self: Opens,
    *,
    batch: Sequence[int] | None = None,
    repeats: int | None = None,
    forms: Sequence[str] | None = None,
    clock: str | None = None,
    device: str = "auto",
    weights: str | Path | None = None,
    trust_model_code: bool = False,
    data_dir: str | Path | None = None,
    threads: int | None = None,
) -> BenchResult:
    """What `ticket bench` reports, as a BenchResult: the ticket's network in every form that runs here, each
    checked against the ticket's network on its test split and timed interleaved with the others (latency,
    throughput, memory, load time, bytes on disk, speed-up over dense), and the verdict per batch size
    (`result.tickets[0].verdict`). batch: the batch sizes (None: 1, 64 and 512; a language model's count
    sequences of its context); forms: the forms besides dense (None: every form); clock: "wall" (None) or "thread"
    (the timing thread's CPU time: device="cpu", threads=1); threads: torch CPU threads (None: torch's own). Needs
    the ticket's own dataset."""
    from ticketcli.bench import run as bench_run  # the bench's forms import the exporters: only when used

    spec = bench_spec(batch, repeats, forms, clock)
    self._data_for(None, "bench")
    reader = self._reader(device, weights, trust_model_code, data_dir, threads)
    with using(reader.threads):
        bench_run.check_clock(spec.clock, runs_inputs.resolve_device(reader.device))
        opened = runs_build.open_loaded(self._record, self._label, reader)
        row = bench_run.bench_opened(opened, self._label, spec)
        return bench_run.bench_result([row], reader, spec)
