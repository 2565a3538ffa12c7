"""`ticket train-weak`: rewind a ticket to its init and train only its surviving weights (a weak ticket)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from ticketcli.cli.common import errors_to_exit_codes, warn_precision, warn_unverified
from ticketcli.cli.declared import declared, given_settings
from ticketcli.cli.options import TicketFile
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.report import plots as report_plots
from ticketcli.report import progress as report_progress
from ticketcli.report import study_tables as report_study_tables
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.runtime.world import check_rendezvous_timeout, quiet_rank
from ticketcli.settings.flags import WEAK_FLAGS
from ticketcli.settings.reader import READER, build_reader_spec
from ticketcli.settings.track import TRACK_FLAG
from ticketcli.settings.weak import WEAK


@declared(WEAK, READER, TRACK_FLAG, flags=WEAK_FLAGS)
def train_weak(
    ticket: TicketFile,
    dense_baseline: bool = False,
    out: Optional[Path] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    rendezvous_timeout: Optional[float] = None,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the weight-training settings of settings/weak.py (@declared): one flag each
) -> None:
    """Rewind a ticket to its init and train only its surviving weights with the mask fixed (a weak ticket)."""
    r = given_settings(READER, given)
    from ticketcli.files.atomic import make_parents
    from ticketcli.runtime.threads import using
    from ticketcli.settings.registry import check_threads
    from ticketcli.settings.resolve import build_weak_spec
    from ticketcli.ticketfile.safetensors_file import check_safetensors_name
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    with errors_to_exit_codes():  # every refusal that needs no torch, before torch is imported
        spec = build_weak_spec(given_settings(WEAK, given))
        check_threads(r["threads"])  # before --rendezvous-timeout, as the flags are checked
        rendezvous_s = check_rendezvous_timeout(rendezvous_timeout)
        reader = build_reader_spec(**r)
        trackers = track.check(given_settings(TRACK_FLAG, given)["log_to"])
        if out is not None:
            check_safetensors_name(out, "the trained weights file", hint=f"name it {out.stem or 'weights'}.safetensors")
            make_parents(out)  # as every --out: its folders are made
            check_destination(out, overwrite=force)
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after

    from ticketcli.runs import inputs as runs_inputs  # torch: imported once the command line is accepted
    from ticketcli.runtime import distributed
    from ticketcli.weak import run as weak

    outputs = tuple(p for p in (out, plot) if p is not None)
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs) as position:
        track_ranks = () if quiet_rank() else trackers  # rank 0 alone logs under torchrun
        with track.tracked(track_ranks, lambda: track_feed.weak_info(ticket), console.warn) as log:
            with (
                distributed.joined(
                    lambda: runs_inputs.resolve_device(reader.device), rendezvous_s=rendezvous_s
                ) as world,
                report_progress.display(spec.epochs, quiet=quiet or not world.main, label="train-weak") as progress,
                using(reader.threads) as used,
            ):
                warn_precision(spec.precision, reader.device)
                logged = None if log is None else track_feed.weak_epochs(log, console.warn)
                result = weak.train_weak(
                    ticket,
                    reader,
                    spec=spec,
                    dense_baseline=dense_baseline,
                    out=out,
                    overwrite=force,
                    progress=position.track(track.tee(progress, logged)),
                    chunks=report_progress.phases_of(progress),
                )
                result = replace(result, threads=used)
            if not world.main:
                return
            warn_unverified(result)
            if plot is not None:
                write_atomic(plot, report_plots.weak_plot(result), overwrite=force, checked_at_start=True)
                result = replace(result, plot=str(plot))
            if log is not None:
                track_feed.guarded(track_feed.weak_final, console.warn)(log, result)
        console.print_json(result.to_document()) if json_out else report_study_tables.weak_table(result)
