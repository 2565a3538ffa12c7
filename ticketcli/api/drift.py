"""`drift`: weights trained from the init while weight drift, negative pre-activations and activation sparsity are
measured, with the activation-sparsity control, ReLUfication and the trade-off sweep, as `ticket drift` runs them:
the keywords are grouped as the command groups its flags and handed to the same DriftCommand, which checks them
together and runs what they ask for; returns its typed result."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ticketcli.api.args import listed, optional_path, optional_text
from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.saved import saved_path
from ticketcli.api.ticket import Ticket
from ticketcli.drift.command import DriftCommand, Result
from ticketcli.drift.runflags import GROUPS
from ticketcli.runtime.interrupts import Position
from ticketcli.settings.track import LOG_TO

# drift's own arguments, and the groups whose keywords it names itself
NAMED = frozenset({"model", "dataset", "seeds", "threads"})
OWN_GROUPS = ("run", "features", "reader")


def option_keywords() -> frozenset[str]:
    """The keywords drift's **options take: `ticket drift`'s settings (drift/settings.py) it does not name."""
    return frozenset(s.name for g in OWN_GROUPS for s in GROUPS[g]) - NAMED


@speaks_keywords("drift", option_keywords, aliases={"force": "overwrite"})
def drift(
    model: str | None = None,
    data: str | None = None,
    *,
    seeds: Sequence[int] | str | None = None,
    ticket: str | os.PathLike[str] | Ticket | None = None,
    weights: str | Path | None = None,
    plot: str | Path | None = None,
    overwrite: bool = False,
    run_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: str | Path | None = None,
    threads: int | None = None,
    log_to: str | list[str] | None = None,
    progress: bool = True,
    **options: Any,
) -> Result:
    """Train a network's weights from its init and measure how far they drift, the share of negative
    pre-activations and the activation sparsity, as `ticket drift` does; returns what `ticket drift --json` prints:
    a DriftResult (per seed, `.runs` with each measurement and the summary), or with tradeoff= a TradeoffResult.

    model: a model spec string with activation sites (default drift's MLP); data: a dataset name (sizes the
    default model; the inputs with inputs="data"); seeds: the seeds (default 0); ticket: rebuild this ticket (a
    path or a loaded/saved Ticket) and train only its surviving weights (weights: the checkpoint it was extracted
    from). options: every other `ticket drift` option by its Python name (steps=, log_every=, activation=,
    inputs=, lr=, act_sparsity=, act_target=, relufy=True, relufy_to=, tradeoff=, trust_model_code=, ...),
    checked as the command checks them. plot: a PNG of the measurements (an existing file replaced only with
    overwrite=True, checked before the work). run_dir: keep the run in this new folder (resumable;
    checkpoint_every: steps between saved states); resume: continue the run kept there, with its recorded
    settings. log_to: experiment trackers, as `--log-to`. progress: a bar on stderr, or False."""
    optional_text(model, "model", "a model spec string")
    optional_text(data, "data", "a dataset name")
    given = {"model": model, "dataset": data, "seeds": listed(seeds, "seeds"), "threads": threads, **options}
    groups = {g: {s.name: _value(given.get(s.name), s.switch) for s in GROUPS[g]} for g in OWN_GROUPS}
    groups["track"] = {"log_to": None if log_to is None else list(LOG_TO.check(log_to, "--log-to"))}
    source = None if ticket is None else str(saved_path(ticket, "the ticket", "drift"))
    groups["inputs"] = {
        "ticket": source,
        "weights": optional_path(weights, "weights"),
        "checkpoint_every": checkpoint_every,
    }
    where = {k: optional_path(v, k) for k, v in (("plot", plot), ("run_dir", run_dir), ("resume", resume))}
    command = DriftCommand(_path(where["plot"]), force=overwrite, quiet=not progress, checked=lambda _: None)
    return command.run(groups, Position("step"), run_dir=_path(where["run_dir"]), resume=_path(where["resume"]))


def _value(value: object, switch: bool) -> object:
    """A keyword's value as the command line hands the flag over: a switch that is off and a path as text."""
    if switch and value is False:
        return None
    return str(value) if isinstance(value, os.PathLike) else value


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)
