"""`ticket drift`: train weights from the init and measure weight drift, negative pre-activations and activation
sparsity."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Optional

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import declared, given_settings
from ticketcli.cli.drift_features import (
    run_features,
)
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination, write_atomic
from ticketcli.report import console
from ticketcli.report import progress as report_progress
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.drift import DRIFT, FEATURES
from ticketcli.settings.flags import DRIFT_FLAGS
from ticketcli.settings.reader import DRIFT_READER
from ticketcli.settings.track import TRACK_FLAG


@declared(DRIFT, FEATURES, DRIFT_READER, TRACK_FLAG, flags=DRIFT_FLAGS)
def drift(
    ticket: Optional[Path] = None,
    weights: Optional[Path] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    json_out: bool = False,
    quiet: bool = False,
    **given: Any,  # the settings of settings/drift.py (@declared): one flag each
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    # torch: imported when the command runs, not for --help
    from ticketcli.drift import run as drift_run
    from ticketcli.report import drift_views
    from ticketcli.runtime.threads import using
    from ticketcli.settings import drift_options
    from ticketcli.settings.drift_options import build_drift_spec
    from ticketcli.settings.registry import check_threads
    from ticketcli.settings.resolve import build_model_policy, data_location
    from ticketcli.track import base as track
    from ticketcli.track import feed as track_feed

    settings, flags, r = (given_settings(t, given) for t in (DRIFT, FEATURES, DRIFT_READER))
    model = settings["model"]
    with errors_to_exit_codes(), stop_on_signals(outputs=(plot,) if plot is not None else (), unit="step") as position:
        if ticket is not None:
            clash = [f for f, k in (("--seeds", "seeds"), ("--dataset", "dataset")) if settings[k] is not None]
            if clash:
                raise UsageError(f"{', '.join(clash)} cannot be combined with --ticket (the ticket fixes them)")
        elif weights is not None or r["trust_model_code"]:
            raise UsageError(f"{'--weights' if weights is not None else '--trust-model-code'} only goes with --ticket")
        n_threads = check_threads(r["threads"])
        trackers = track.check(given_settings(TRACK_FLAG, given)["log_to"])
        # with --ticket, --model may only confirm the ticket's own factory (ModelPolicy); the ticket fixes the model
        policy = build_model_policy(
            trust_model_code=bool(r["trust_model_code"]),
            max_params=r["max_params"],
            max_memory=r["max_memory"],
            model=model if ticket is not None else None,
        )
        if ticket is not None:
            model = settings["model"] = None
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        features = drift_options.build_features(
            **{**flags, "relufy": bool(flags["relufy"])},
            model=model,
            ticket=ticket is not None,
            activation=settings["activation"],
            inputs=settings["inputs"],
        )
        with track.tracked(trackers, partial(track_feed.drift_info, model, ticket), console.warn) as log:
            location = data_location(r["data_dir"], bool(r["download"]))
            if features is not None:
                on_ticket = dict(ticket=ticket, weights=None if weights is None else str(weights), policy=policy)
                feature = run_features(
                    features, settings, location, position, quiet=quiet, threads=n_threads, **on_ticket
                )
                warn_unverified(feature)
                if plot is not None:
                    write_atomic(plot, drift_views.figure(feature), overwrite=force)
                    feature = replace(feature, plot=str(plot))
                if log is not None:
                    track_feed.guarded(track_feed.drift_final, console.warn)(log, feature, console.warn)
                console.print_json(feature.to_document()) if json_out else drift_views.show(feature)
                return
            spec = build_drift_spec(settings, location)
            total = spec.steps * (1 if ticket is not None else len(spec.seeds))
            with report_progress.drift_progress(total, quiet=quiet) as progress, using(n_threads) as used:
                result = drift_run.run_drift(
                    spec,
                    ticket=ticket,
                    weights=None if weights is None else str(weights),
                    progress=position.track(progress),
                    policy=policy,
                )
            result = replace(result, threads=used)
            warn_unverified(result)
            if plot is not None:
                write_atomic(plot, drift_views.figure(result), overwrite=force)
                result = replace(result, plot=str(plot))
            if log is not None:
                track_feed.guarded(track_feed.drift_final, console.warn)(log, result, console.warn)
    console.print_json(result.to_document()) if json_out else drift_views.show(result)
