"""`train_weak`: a ticket's surviving weights trained with its mask fixed (a weak ticket), as `ticket train-weak`
trains them (the same spec building, resolve.build_weak_spec, and the same run, weak.run.train_weak), returning its
typed result."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ticketcli.api.args import optional_path, progress_display, reader_spec, trackers
from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.saved import saved_path
from ticketcli.api.ticket import Ticket
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.methods.base import Progress
from ticketcli.report import console
from ticketcli.report import plots as report_plots
from ticketcli.report import progress as report_progress
from ticketcli.runtime.threads import using
from ticketcli.settings.resolve import build_weak_spec
from ticketcli.track import base as track
from ticketcli.track import feed as track_feed
from ticketcli.weak import run as weak_run
from ticketcli.weak.result import WeakResult


@speaks_keywords("train_weak", aliases={"force": "overwrite"})
def train_weak(
    ticket: str | os.PathLike[str] | Ticket,
    *,
    epochs: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    precision: str | None = None,
    dense_baseline: bool = False,
    out: str | Path | None = None,
    plot: str | Path | None = None,
    overwrite: bool = False,
    progress: bool | Progress = True,
    device: str = "auto",
    weights: str | Path | None = None,
    trust_model_code: bool = False,
    data_dir: str | Path | None = None,
    threads: int | None = None,
    log_to: str | list[str] | None = None,
) -> WeakResult:
    """Rewind a ticket (a path, or a Ticket that was loaded or saved) to its init and train only its surviving
    weights with the mask fixed, as `ticket train-weak` does; returns what `ticket train-weak --json` prints (a
    WeakResult: `.masked` with its per-epoch history and final accuracies, `.dense` with dense_baseline=True,
    `.weights_check`, `.sparsity`).

    epochs, lr, batch_size, precision: the weight training (None: train-weak's defaults, the paper's Appendix B).
    dense_baseline: also train the dense network from the same init. out: write the trained weights (a
    .safetensors name); plot: a PNG of both runs' curves; both checked before the work, an existing file replaced
    only with overwrite=True. progress: a bar on stderr, False, or a callable per epoch. device, weights,
    trust_model_code, data_dir, threads: as for Ticket.evaluate. log_to: experiment trackers, as `--log-to`
    ("tensorboard:DIR", "mlflow:URI" or a list of them; a tracker that fails is a warning)."""
    path = saved_path(ticket, "the ticket", "train_weak")
    spec = build_weak_spec({"epochs": epochs, "lr": lr, "batch_size": batch_size, "precision": precision})
    reader = reader_spec(device, weights, trust_model_code, data_dir, threads)
    out, plot = optional_path(out, "out"), optional_path(plot, "plot")
    if plot is not None:
        check_destination(plot, overwrite=overwrite)  # before the work, not after (train_weak checks `out`)
    dests = trackers(log_to)
    with track.tracked(dests, lambda: track_feed.weak_info(path), console.warn) as log:
        with progress_display(progress, spec.epochs, "train-weak") as shown, using(reader.threads) as used:
            result = weak_run.train_weak(
                path,
                reader,
                spec=spec,
                dense_baseline=dense_baseline,
                out=out,
                overwrite=overwrite,
                progress=track.tee(shown, None if log is None else track_feed.weak_epochs(log, console.warn)),
                chunks=report_progress.phases_of(shown),
            )
        result = replace(result, threads=used)
        if plot is not None:
            write_atomic(plot, report_plots.weak_plot(result), overwrite=overwrite, checked_at_start=True)
            result = replace(result, plot=plot)
        if log is not None:
            track_feed.guarded(track_feed.weak_final, console.warn)(log, result)
    return result
