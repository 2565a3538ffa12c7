"""Running sweep-k's tasks: one extraction per task with a fixed torch thread count, so its arithmetic (and so its
record) does not depend on the executor or the number of workers; in-process or in a local spawn pool, or on Ray."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from ticketcli.errors import RunFailed, TicketCliError, UsageError
from ticketcli.files.atomic import ScratchFolder
from ticketcli.methods.registry import option
from ticketcli.runs import extract as runs_extract
from ticketcli.runtime.pool import run_pool
from ticketcli.sweep.plan import SweepTask
from ticketcli.sweep.result import SweepRecord


def run_task(task: SweepTask, threads: int) -> tuple[SweepRecord, bytes]:
    """One extraction with exactly `threads` torch threads; returns its record and the ticket file's bytes."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with ScratchFolder("ticket-sweep-") as tmp:
            path = tmp / f"{task.id}.safetensors"
            summary = runs_extract.extract_ticket(task.spec, out=path)
            payload = path.read_bytes()
    finally:
        torch.set_num_threads(previous)
    m = summary.metrics
    record = SweepRecord(
        **task.identity(),
        method=summary.method.to_json(),  # the ticket's method record, as extract and inspect report it
        requested_sparsity=task.spec.method.sparsity,
        layer_densities=task.spec.method.layer_densities,
        test_accuracy=m.test.accuracy,
        val_accuracy=m.val.accuracy,
        test_loss=m.test.loss,
        achieved_sparsity=summary.sparsity.achieved,
        masks_sha256=summary.masks_sha256,
        device=m.device,
        threads=threads,
        wall_time_s=m.wall_time_s,
        ticket=None,  # records.store names the ticket it keeps in --out-dir
        ticket_sha256=None,
        test_bits_per_char=m.test.bits_per_char,  # a language model's run; None for an image model's
        val_bits_per_char=m.val.bits_per_char,
    )
    return record, payload


def run_local(
    tasks: Iterable[SweepTask], workers: int, threads: int
) -> Iterator[tuple[SweepTask, tuple[SweepRecord, bytes]]]:
    return run_pool(
        run_task, tasks, workers=workers, threads=threads, describe=lambda t: f"{t.id} (out of memory or killed)"
    )


def run_ray(
    tasks: list[SweepTask], threads: int, address: str | None
) -> Iterator[tuple[SweepTask, tuple[SweepRecord, bytes]]]:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray installed", hint="pip install 'ticketcli[ray]'") from None
    started = not ray.is_initialized()
    if started:
        # Ship this very package (ticketcli, two levels up) to the workers, so the cluster runs the driver's code.
        pkg = str(Path(__file__).resolve().parents[1])
        try:
            ray.init(
                address=address,
                runtime_env={"py_modules": [pkg]},
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        except Exception as e:  # ConnectionError, ValueError, RuntimeError... depending on the address
            raise UsageError(
                f"cannot connect to Ray at {address or 'a new local cluster'}: {str(e).splitlines()[0][:200]}"
            ) from None
    try:
        remote = ray.remote(num_cpus=threads)(run_task)
        refs = {remote.remote(t, threads): t for t in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:  # the task raised: re-raise a user-facing error as is
                if isinstance(e.cause, TicketCliError):
                    raise e.cause from None
                raise
            except ray.exceptions.RayError as e:  # the worker or the cluster failed
                raise RunFailed(f"Ray could not run {refs[done[0]].id}: {str(e).splitlines()[0][:200]}") from None
            yield refs[done[0]], result
    finally:
        if started:
            ray.shutdown()


def cost(task: SweepTask) -> int:
    """Relative work of a run: score-training epochs, times the rounds for iterated (up to max_rounds)."""
    m = task.spec.method
    return m.epochs * (option(m, "max_rounds") if m.name == "iterated" else 1) if m.name != "random" else 0
