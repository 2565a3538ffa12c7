"""`extract` in the Python API: a ticket extracted as `ticket extract` extracts one, from keyword options instead
of flags (the same spec building, resolve.py, and the same run, runs.extract.run_extraction), returned unsaved."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from torch import nn

from ticketcli.api import data as api_data
from ticketcli.api.args import optional_path, progress_display
from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.masks import masked
from ticketcli.api.ticket import Ticket
from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination
from ticketcli.methods import METHODS
from ticketcli.methods.base import Progress
from ticketcli.models.registry import parse_model
from ticketcli.report.console import warn
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import summary as runs_summary
from ticketcli.runtime.threads import using
from ticketcli.settings.registry import check_threads
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.run import RUN
from ticketcli.settings.track import TRACK
from ticketcli.specs.run import ModelSpec
from ticketcli.ticketfile.ticket import check_ticket_name
from ticketcli.track import base as track
from ticketcli.track import feed as track_feed

# extract() takes these as its own arguments (model, data) or not at all (where the ticket goes: Ticket.save)
NOT_OPTIONS = frozenset({"model", "dataset", "method", "sparsity", "epochs", "seed", "device", "threads", "log_to"})
UNSAVED = Path("<unsaved ticket>")  # what the trackers record as the ticket of a run whose ticket is not saved yet


def option_keywords() -> frozenset[str]:
    """The keywords extract()'s **options take: every `ticket extract` setting it does not name itself."""
    return frozenset(RUN.config_keys()) - NOT_OPTIONS


@speaks_keywords("extract", option_keywords, aliases={"force": "overwrite"})
def extract(
    model: str | nn.Module,
    data: api_data.Data = "digits",
    *,
    method: str | None = None,
    sparsity: float | None = None,
    epochs: int | None = None,
    seed: int | None = None,
    progress: bool | Progress = True,
    device: str = "auto",
    threads: int | None = None,
    config: str | Path | None = None,
    log_to: str | list[str] | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Ticket:
    """Extract a ticket, as `ticket extract` does, and return it: unsaved (Ticket.save writes it), or written to
    `out` (a .safetensors name; an existing file only with overwrite=True), which is checked before the work.

    model: a spec string ("mlp:64-16-10", "resnet20", "pkg.module:factory") or your own nn.Module (its Linear
    and Conv2d weights and biases are masked; their values are redrawn from the seed, as for a factory). data:
    a dataset name ("digits", "fashion-mnist"), or your examples as (x, y) tensors, a Dataset or a DataLoader
    (a seeded 20% held out for testing, then n_val/n_extract drawn), {"train": ..., "test": ...}, or the three
    splits as {"extract": ..., "val": ..., "test": ...}. options: every other `ticket extract` option by its
    Python name (lr=, weight_decay=, aug_density=, layer_densities=[...], data_dir=, ...), checked as the CLI
    checks them (UsageError with the same message). progress: a bar on stderr, False, or a callable per epoch.
    threads: torch CPU threads for the run (None: the config file's, else torch's own), restored afterwards.
    log_to: also log the run to experiment trackers, as `--log-to` does: "tensorboard:DIR", "mlflow:URI" or a
    list of them (a tracker that fails is a warning on stderr; the run goes on). Errors name keywords
    (`epochs=`), and an unknown keyword names the closest one."""
    if not isinstance(model, (str, nn.Module)):
        raise UsageError(f"model must be a spec string or a torch.nn.Module, got {type(model).__name__}")
    config = optional_path(config, "config")
    out = optional_path(out, "out")
    if out is not None:  # before the work, not after it
        check_ticket_name(out)
        check_destination(out, overwrite=overwrite)
    flags = dict(options, method=method, sparsity=sparsity, epochs=epochs, seed=seed, device=device, threads=threads)
    # the caller's own module or examples are no setting: None, not given
    flags.update(log_to=log_to, dataset=data if isinstance(data, str) else None)
    flags["model"] = model if isinstance(model, str) else None
    settings = merge_settings(flags, config, RUN.plus(TRACK))
    given = None if isinstance(data, str) else api_data.given(data, settings["seed"])
    own = module_spec(model).to_string() if isinstance(model, nn.Module) else None
    spec = build_extract_spec(settings, None if given is None else given.info, own)
    splits = None
    if given is not None:
        splits = api_data.splits_for(given, settings["n_extract"], settings["n_val"], spec.data.split_seed)
        api_data.check_fits(spec.model, splits.x_extract, given.info.classes)
    trackers = track.check(settings["log_to"])
    with (
        _progress(progress, spec.method.name, spec.method.epochs) as callback,
        using(check_threads(settings["threads"], "threads")),
        track.tracked(trackers, lambda: track_feed.extract_info(spec), warn) as log,
        api_data.labels_within_outputs(),
    ):
        logged, steps = track_feed.extract_epochs(log, warn) if log is not None else (None, None)
        run = runs_extract.run_extraction(
            spec,
            progress=track.tee(callback, logged),
            splits=splits,
            module=model if isinstance(model, nn.Module) else None,
        )
        if log is not None and steps is not None:
            summary = runs_summary.extract_summary(spec, run.ticket, UNSAVED, None, run.source, run.details)
            track_feed.guarded(track_feed.extract_final, warn)(log, summary, steps.last)
    ticket = Ticket(run.ticket)
    if out is not None:  # a file that appeared at `out` during the run is kept, the ticket written beside it
        ticket._write(out, overwrite, checked_at_start=True)
    return ticket


def module_spec(module: nn.Module) -> ModelSpec:
    """The model record of a caller's module: its class as a factory "pkg.module:Class" (which `ticket evaluate
    --trust-model-code` can rebuild when that class is importable and takes no arguments)."""
    if masked(module):
        raise UsageError("the module carries masks; remove_masks(module) first")
    cls = type(module)
    return parse_model(f"{cls.__module__}:{cls.__name__}")


def _progress(progress: bool | Progress, label: str, epochs: int) -> AbstractContextManager[Progress | None]:
    """The caller's callable (told each epoch's progress record: "epoch", "epochs", "loss", "accuracy",
    "sparsity"), or the command line's display (progress=True, for a method with epochs)."""
    return progress_display(progress, epochs, label, quiet=not METHODS.get(label).load().uses_epochs)
