"""`ticket drift`: train weights from the init and measure weight drift, negative pre-activations and activation
sparsity, with its activation-sparsity control, ReLUfication and trade-off sweep. The command declares its flags,
hands them to the drift package's DriftCommand (which checks them together and runs what they ask for, with its
progress display, plot and trackers) and reports the result."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import declared, given_settings
from ticketcli.drift.settings import DRIFT, DRIFT_FLAGS, DRIFT_READER, FEATURES
from ticketcli.report import console
from ticketcli.runtime.interrupts import stop_on_signals
from ticketcli.settings.track import TRACK_FLAG


@declared(DRIFT, FEATURES, DRIFT_READER, TRACK_FLAG, flags=DRIFT_FLAGS)
def drift(
    ticket: Optional[Path] = None,
    weights: Optional[Path] = None,
    plot: Optional[Path] = None,
    force: bool = False,
    run_dir: Optional[Path] = None,
    checkpoint_every: Optional[int] = None,
    resume: Optional[Path] = None,
    json_out: bool = False,
    quiet: bool = False,
    **given: object,  # the settings of drift/settings.py (@declared): one flag each
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    # the command checks every flag before it imports what runs (torch with it)
    from ticketcli.drift.command import DriftCommand
    from ticketcli.drift.views import show

    command = DriftCommand(plot, force=force, quiet=quiet, checked=warn_unverified)
    outputs = (plot,) if plot is not None else ()
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs, unit="step", note=command.note) as position:
        groups = {
            "run": given_settings(DRIFT, given),
            "features": given_settings(FEATURES, given),
            "reader": given_settings(DRIFT_READER, given),
            "track": given_settings(TRACK_FLAG, given),
            "inputs": {"ticket": ticket, "weights": weights, "checkpoint_every": checkpoint_every},
        }
        result = command.run(groups, position, run_dir=run_dir, resume=resume)
    console.print_json(result.to_document()) if json_out else show(result)
