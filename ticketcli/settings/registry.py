"""Every setting's range by name, across commands: flags, config keys and API keywords of the same name are checked
against the same range (the README's "Config files and value ranges" lists them)."""

from __future__ import annotations

from typing import Any

from ticketcli.ranges import FLOAT, INT, Range
from ticketcli.settings.run import BATCH, RUN, SEED, THREADS
from ticketcli.settings.setting import option_flag

# drift's own settings (train-weak takes epochs, lr, batch_size from extract's): drift builds its specs in
# drift/options.py and checks each value here
DRIFT_RANGES: dict[str, Range] = {
    "steps": INT(1, 10_000_000),
    "log_every": INT(1, 10_000_000),
    "probe_size": BATCH,
    "momentum": FLOAT(0, 1, hi_open=True),
    "clip": FLOAT(0, 1e6, lo_open=True),
    "zero_threshold": FLOAT(0, 1e6, lo_open=True),
    "seeds": SEED,
}
# sweep-k's own counts
SWEEP_RANGES: dict[str, Range] = {"layerwise": INT(0, 10_000), "workers": INT(1, 4096), "threads": THREADS}

RANGES: dict[str, Range] = {
    **{s.name: s.range for s in RUN if s.range is not None},
    **DRIFT_RANGES,
    **SWEEP_RANGES,
}


def check_setting(key: str, value: Any, what: str | None = None) -> Any:
    """`value` checked against RANGES[key] and normalised; `what` names it in the error (default: its flag)."""
    return RANGES[key].check(value, what or option_flag(key))
