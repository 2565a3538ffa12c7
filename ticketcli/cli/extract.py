"""`ticket extract`: extract a strong ticket and save it as a ticket file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ticketcli.cli.common import (
    errors_to_exit_codes,
    model_size,
    warn_low_space,
    warn_missed_sparsity,
    warn_precision,
)
from ticketcli.cli.declared import declared, given_settings
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.report import tables as report_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.runtime.world import check_rendezvous_timeout
from ticketcli.settings.flags import EXTRACT_FLAGS
from ticketcli.settings.registry import check_threads
from ticketcli.settings.run import RUN
from ticketcli.settings.track import TRACK


@declared(RUN, TRACK, flags=EXTRACT_FLAGS)
def extract(
    config: Optional[Path] = None,
    out: Path = Path("ticket.safetensors"),
    force: bool = False,
    checkpoint_every: Optional[int] = None,
    resume: bool = False,
    global_old: bool = False,
    rendezvous_timeout: Optional[float] = None,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the settings of settings/run.py and --log-to (@declared): one flag each; its own: flags.py
) -> None:
    """Extract a strong ticket (a mask over frozen random weights) and save it as a ticket file."""
    from ticketcli.data import places
    from ticketcli.files.atomic import check_destination, make_parents
    from ticketcli.settings.resolve import build_extract_spec, merge_settings
    from ticketcli.ticketfile.ticket import check_ticket_name
    from ticketcli.track import base as track

    flags = {**given_settings(RUN, given), **given_settings(TRACK, given)}
    if global_old:
        flags["global_topk"] = True
        console.warn("--global is deprecated: use --global-topk (as the config key and the Python API call it)")
    # every refusal that needs no torch, before torch is imported: the settings and their combinations, the
    # destination (its folders made, as --out-dir's are), the dataset's files
    with errors_to_exit_codes():
        settings = merge_settings(flags, config, RUN.plus(TRACK))
        spec = build_extract_spec(settings)
        trackers = track.check(settings["log_to"])
        rendezvous_s = check_rendezvous_timeout(rendezvous_timeout)
        if checkpoint_every is not None:
            EXTRACT_FLAGS["checkpoint_every"].check(checkpoint_every)
        threads = check_threads(settings["threads"])
        places.check_present(spec.data)
        check_ticket_name(out)
        make_parents(out)
        check_destination(out, overwrite=force)

    # torch comes in with these: imported here, once the command line is accepted
    from ticketcli.files.checkpoint import checkpoint_path
    from ticketcli.files.checkpoint import describe as describe_checkpoint
    from ticketcli.methods import METHODS
    from ticketcli.methods.registry import option
    from ticketcli.runs import extract as runs_extract
    from ticketcli.runs import inputs as runs_inputs
    from ticketcli.runtime import distributed
    from ticketcli.runtime import threads as torch_threads
    from ticketcli.track import feed as track_feed

    ckpt = checkpoint_path(out)
    with errors_to_exit_codes(), stop_on_signals(outputs=(out,), note=lambda: describe_checkpoint(ckpt)) as position:
        if resume and not ckpt.exists():
            console.warn(f"--resume: no checkpoint at {ckpt}; starting from the beginning")
        n = model_size(spec.model)
        # --threads auto: the cores free now, no more than a step's multiply-adds (weights x batch) can share
        auto = None if threads is not None else torch_threads.choose(n * spec.method.batch_size or None)
        # a ticket holds a bit per weight; a checkpoint scores and Adam's two moments in float32 (and auxiliaries)
        warn_low_space({out: n // 8 + (64 << 10), **({ckpt: 16 * n + (64 << 10)} if checkpoint_every else {})})
        with (
            distributed.joined(lambda: runs_inputs.resolve_device(spec.device), rendezvous_s=rendezvous_s) as world,
            # methods without epochs (snip, grasp, synflow, random): no loop, a heartbeat only
            report_progress.display(
                spec.method.epochs if METHODS.get(spec.method.name).load().uses_epochs else None,
                quiet=quiet or not world.main,
                label=spec.method.name,
            ) as progress,
            torch_threads.using(threads, auto) as used,
            track.tracked(trackers if world.main else (), lambda: track_feed.extract_info(spec), console.warn) as log,
        ):
            warn_precision(spec.method.precision, spec.device)
            logged, steps = track_feed.extract_epochs(log, console.warn) if log is not None else (None, None)
            summary = runs_extract.extract_ticket(
                spec,
                out=out,
                overwrite=force,
                progress=position.track(track.tee(progress, logged)),
                checkpoint_every=checkpoint_every,
                resume=resume,
                chunks=report_progress.phases_of(progress),  # the final recalibration and evaluation
            )
            summary = replace(summary, threads=used, threads_auto=auto)
            if log is not None and steps is not None:
                track_feed.guarded(track_feed.extract_final, console.warn)(log, summary, steps.last)
    if world.main:
        sp = summary.sparsity
        warn_missed_sparsity(sp.requested, sp.achieved, sp.rounds, option(spec.method, "iter_tolerance"))
        console.print_json(summary.to_document()) if json_out else report_tables.extract_table(summary)
