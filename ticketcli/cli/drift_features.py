"""`ticket drift`'s activation-sparsity control, ReLUfication and trade-off sweep: their options (shared with the
command's signature in cli/drift.py) and the run that serves them once drift.options has validated them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from ticketcli import report
from ticketcli.cli.declared import choices
from ticketcli.drift.spec import CONTROL_MODES, RELUFY_TARGETS, ControlSpec, DriftSpec, Features, RelufySpec, default
from ticketcli.settings.setting import Panel, with_default

if TYPE_CHECKING:
    ActControlName = str
    RelufyTarget = str
else:
    ActControlName = choices(CONTROL_MODES)
    RelufyTarget = choices(RELUFY_TARGETS)


def spec_help(text: str, path: str, spec: type = DriftSpec) -> str:
    """Help text ending in 'Default: X.', X the default of the drift.spec field at `path` ("optim.lr")."""
    return with_default(text, default(spec, path))


ActControl = Annotated[
    Optional[ActControlName],
    typer.Option(
        help="Control activation sparsity while training, at every activation site: topk keeps each example's "
        "largest activations per layer and zeroes the rest; percentile subtracts a running per-unit quantile "
        "of the pre-activations so that the --act-target share falls below zero. Default: no control.",
        rich_help_panel=Panel.ACT_CONTROL,
    ),
]
ActTarget = Annotated[
    Optional[float],
    typer.Option(
        help=spec_help("Target activation sparsity for --act-sparsity, in (0, 1).", "target", ControlSpec),
        rich_help_panel=Panel.ACT_CONTROL,
    ),
]
FreezeStatsAfter = Annotated[
    Optional[int],
    typer.Option(
        help="Percentile centering: stop updating the statistics after this many training steps (accumulation "
        "stop). Default: never.",
        rich_help_panel=Panel.ACT_CONTROL,
    ),
]
Relufy = Annotated[
    bool,
    typer.Option(
        "--relufy",
        help="ReLUfication: train --steps with --from, swap --to in at every activation keeping the weights, "
        "fine-tune --relufy-epochs epochs; report accuracy and post-activation sparsity before and after.",
        rich_help_panel=Panel.RELUFY,
    ),
]
RelufyTo = Annotated[
    Optional[RelufyTarget],
    typer.Option("--to", help="--relufy: the ReLU variant swapped in.", rich_help_panel=Panel.RELUFY),
]
RelufyEpochs = Annotated[
    Optional[int],
    typer.Option(
        help=spec_help("--relufy: fine-tuning epochs over the extraction split.", "epochs", RelufySpec),
        rich_help_panel=Panel.RELUFY,
    ),
]
Tradeoff = Annotated[
    Optional[str],
    typer.Option(
        help="Trade-off sweep: comma-separated target activation sparsities, one controlled run each (with "
        "--act-sparsity, default topk); accuracy vs achieved sparsity and the cliff (largest accuracy drop "
        "between neighbouring targets). --model may list several models, comma-separated, to overlay them. "
        "--plot draws the curves.",
        rich_help_panel=Panel.TRADEOFF,
    ),
]
Workers = Annotated[
    Optional[int],
    typer.Option(
        help=spec_help(
            "--tradeoff: runs in parallel in this many processes (--threads torch threads each, by default one, so "
            "that the results do not depend on it); workers x threads must not exceed the CPU cores.",
            "workers",
            Features,
        ),
        rich_help_panel=Panel.TRADEOFF,
    ),
]


def run_features(
    features: Features,
    settings: dict[str, Any],
    location: dict[str, Any],
    position: Any,
    *,
    quiet: bool,
    threads: int | None = None,
    **on_ticket: Any,
) -> dict[str, Any]:
    """Run the validated feature with `threads` torch threads (None: torch's own; --tradeoff: per worker, default
    1); the result carries `_figure` (result -> PNG bytes) and `_show` (the tables)."""
    # torch: imported when the command runs, not for --help
    from ticketcli.data import DATASETS
    from ticketcli.drift import relufy as relufy_core
    from ticketcli.drift import run as drift_run
    from ticketcli.drift import views as drift_views
    from ticketcli.drift.options import build_drift_spec
    from ticketcli.threads import per_worker, using

    if features.targets is not None:
        each = per_worker(features.workers, threads)
        return _tradeoff(features, settings, location, position, quiet=quiet, threads=each)
    if features.relufy is not None:
        settings = {**settings, "activation": features.relufy.source}
    spec = build_drift_spec(settings, location)
    per_run = spec.steps
    if features.relufy is not None:
        n = spec.data.n_extract or DATASETS.get(spec.data.name).n_extract  # the bar's total; the run counts
        per_run += relufy_core.fine_tune_steps(n, spec.batch_size, features.relufy.epochs)
    total = per_run * (1 if on_ticket.get("ticket") is not None else len(spec.seeds))
    with report.drift_progress(total, quiet=quiet) as progress, using(threads) as used:
        if features.relufy is not None:
            result = relufy_core.run_relufy(spec, features.relufy, progress=position.track(progress), **on_ticket)
        else:
            result = drift_run.run_drift(spec, control=features.control, progress=position.track(progress), **on_ticket)
            result["schema"] = "ticket.drift-control/1"
    result["threads"] = used
    extra = drift_views.relufy_table if features.relufy is not None else drift_views.control_table

    def show(r: dict) -> None:
        report.drift_tables(r)
        extra(r)

    return {**result, "_figure": report.drift_plot, "_show": show}


def _tradeoff(
    features: Features, settings: dict, location: dict, position: Any, *, quiet: bool, threads: int
) -> dict[str, Any]:
    from ticketcli.drift import tradeoff as drift_tradeoff
    from ticketcli.drift import views as drift_views
    from ticketcli.drift.options import build_drift_spec

    assert features.control is not None and features.targets is not None
    specs = [build_drift_spec({**settings, "model": m}, location) for m in features.models]
    tasks = drift_tradeoff.plan(specs, features.targets, features.control.mode, features.control.freeze_after)
    done = 0
    with report.epoch_progress(len(tasks), quiet=quiet, label="tradeoff") as progress:
        track: Callable[[dict], None] = position.track(progress)

        def on_result(r: dict) -> None:
            nonlocal done
            done += 1
            track(
                {
                    "epoch": done,
                    "unit": "run",
                    "loss": r["loss"],
                    "accuracy": r["accuracy"],
                    "sparsity": r["achieved_sparsity"],
                }
            )

        result = drift_tradeoff.run_tradeoff(tasks, workers=features.workers, threads=threads, on_result=on_result)
    return {**result, "_figure": drift_views.tradeoff_plot, "_show": drift_views.tradeoff_table}
