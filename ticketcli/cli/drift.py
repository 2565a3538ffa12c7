"""`ticket drift`: train weights from the init and measure weight drift, negative pre-activations and activation
sparsity."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from ticketcli import catalog, report
from ticketcli.atomic import check_destination, write_atomic
from ticketcli.cli.common import errors_to_exit_codes, warn_unverified
from ticketcli.cli.declared import choices
from ticketcli.cli.drift_features import (
    ActControl,
    ActTarget,
    FreezeStatsAfter,
    Relufy,
    RelufyEpochs,
    RelufyTo,
    Tradeoff,
    Workers,
    run_features,
    spec_help,
)
from ticketcli.cli.options import (
    DataDir,
    DatasetName,
    Device,
    Download,
    Json,
    MaxMemory,
    MaxParams,
    Quiet,
    Threads,
    TrustModelCode,
)
from ticketcli.contract import document, drift_command
from ticketcli.drift.spec import DEFAULT_TEXT_MODEL, INPUTS, default
from ticketcli.errors import UsageError
from ticketcli.interrupts import stop_on_signals
from ticketcli.settings.setting import Panel, with_default
from ticketcli.specs import DataSpec

# Built at run time from drift's registries as the catalog lists them (without torch), so mypy cannot read them:
# to mypy each is the str its value is.
if TYPE_CHECKING:
    ActivationName = str
    LossName = str
    InputsName = str
else:
    ActivationName = choices(catalog.DRIFT_ACTIVATIONS)
    LossName = choices(catalog.DRIFT_LOSSES)
    InputsName = choices(INPUTS)
OptimizerName = Literal["adam", "sgd"]


def drift(
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Model spec: an MLP, e.g. mlp:784-256-256-10 (+res for skips between equal-width hidden layers, "
            "+norm=batch|layer|rms before each hidden activation, +bias for biases), lenet300, resnet20, resnet18, "
            "vit:p4-d64-l4-h4, or the character-level gpt-nano:l2-d64-h4-c64 (trains on --text). Default: the "
            f"paper's MLP (three hidden layers of 256) sized to the dataset; with --text, {DEFAULT_TEXT_MODEL}. "
            "With --ticket only the ticket's own model factory, confirming that it may be imported.",
            rich_help_panel=Panel.MODEL,
        ),
    ] = None,
    activation: Annotated[
        Optional[ActivationName],
        typer.Option(
            help=spec_help(
                "Activation at every activation site (an MLP's hidden layers, a ResNet's ReLUs, the MLP blocks of "
                "a ViT or GPT-nano); relu2-clip is min(relu(x)^2, --clip).",
                "activation",
            ),
            rich_help_panel=Panel.TRAINING,
        ),
    ] = None,
    clip: Annotated[
        Optional[float], typer.Option(help=spec_help("c of relu2-clip.", "clip"), rich_help_panel=Panel.TRAINING)
    ] = None,
    inputs: Annotated[
        Optional[InputsName],
        typer.Option(
            help=spec_help(
                "data: the dataset's images; gaussian: N(0,1) features; uniform: U[0,1] features (random inputs get "
                "random labels, fresh every step).",
                "inputs",
            ),
            rich_help_panel=Panel.DATA,
        ),
    ] = None,
    loss: Annotated[
        Optional[LossName],
        typer.Option(
            help=spec_help("cross-entropy, or mse against one-hot targets.", "loss"),
            rich_help_panel=Panel.TRAINING,
        ),
    ] = None,
    optimizer: Annotated[
        Optional[OptimizerName],
        typer.Option(help=spec_help("Weight optimiser.", "optim.name"), rich_help_panel=Panel.TRAINING),
    ] = None,
    lr: Annotated[
        Optional[float], typer.Option(help=spec_help("Learning rate.", "optim.lr"), rich_help_panel=Panel.TRAINING)
    ] = None,
    momentum: Annotated[
        Optional[float], typer.Option(help=spec_help("SGD momentum.", "optim.momentum"), rich_help_panel=Panel.TRAINING)
    ] = None,
    batch_size: Annotated[
        Optional[int], typer.Option(help=spec_help("Minibatch size.", "batch_size"), rich_help_panel=Panel.TRAINING)
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option(help=spec_help("Optimiser steps.", "steps"), rich_help_panel=Panel.TRAINING)
    ] = None,
    log_every: Annotated[
        Optional[int],
        typer.Option(
            help=spec_help("Measure every this many steps (and at step 0 and the last step).", "log_every"),
            rich_help_panel=Panel.MEASURE,
        ),
    ] = None,
    seeds: Annotated[
        Optional[str],
        typer.Option(
            help=spec_help(
                "Comma-separated seeds of the weights, split and batches; several give mean +- std.", "seeds"
            ),
            rich_help_panel=Panel.MODEL,
        ),
    ] = None,
    probe_size: Annotated[
        Optional[int],
        typer.Option(
            help=spec_help(
                "Size of the fixed batch every statistic is measured on (validation split, or random inputs).",
                "probe_size",
            ),
            rich_help_panel=Panel.MEASURE,
        ),
    ] = None,
    zero_threshold: Annotated[
        Optional[float],
        typer.Option(
            help=spec_help(
                "Smooth activations (gelu, silu, gelu2): |a| below this counts as zero in sparsity and dead units; "
                "relu-type activations count exact zeros.",
                "zero_threshold",
            ),
            rich_help_panel=Panel.MEASURE,
        ),
    ] = None,
    ticket: Annotated[
        Optional[Path],
        typer.Option(
            help="Rebuild this ticket's network (fingerprint-checked) and train only its surviving weights.",
            rich_help_panel=Panel.MODEL,
        ),
    ] = None,
    weights: Annotated[
        Optional[Path],
        typer.Option(help="The checkpoint a --ticket was extracted from, if it was.", rich_help_panel=Panel.MODEL),
    ] = None,
    trust_model_code: TrustModelCode = False,
    max_params: MaxParams = None,
    max_memory: MaxMemory = None,
    dataset: Annotated[
        Optional[DatasetName],
        typer.Option(
            help=with_default(
                "Dataset (sizes the default model; the inputs with --inputs data).", default(DataSpec, "name")
            ),
            rich_help_panel=Panel.DATA,
        ),
    ] = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    threads: Threads = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a PNG: weight mean per layer, negative pre-activation share and sparsity vs step.",
            rich_help_panel=Panel.OUTPUT,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite --plot if it exists.", rich_help_panel=Panel.OUTPUT)
    ] = False,
    json_out: Json = False,
    quiet: Quiet = False,
    act_sparsity: ActControl = None,
    act_target: ActTarget = None,
    freeze_stats_after: FreezeStatsAfter = None,
    relufy: Relufy = False,
    relufy_from: Annotated[
        Optional[ActivationName],
        typer.Option("--from", help="--relufy: the smooth activation trained first.", rich_help_panel=Panel.RELUFY),
    ] = None,
    relufy_to: RelufyTo = None,
    relufy_epochs: RelufyEpochs = None,
    tradeoff: Tradeoff = None,
    workers: Workers = None,
    text: Annotated[
        Optional[Path],
        typer.Option(
            help="Plain UTF-8 text a gpt-nano model learns next-character prediction on, split into training and "
            "validation blocks by the seed. Default for gpt-nano: the fortunes files literature, science, "
            "computers, wisdom (<--data-dir>/fortunes, then /usr/share/games/fortunes).",
            rich_help_panel=Panel.DATA,
        ),
    ] = None,
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    # torch: imported when the command runs, not for --help
    from ticketcli.drift import options as drift_options
    from ticketcli.drift import run as drift_run
    from ticketcli.drift.options import build_drift_spec
    from ticketcli.resolve import build_model_policy, data_location
    from ticketcli.threads import check_threads, using

    with errors_to_exit_codes(), stop_on_signals(outputs=(plot,) if plot is not None else (), unit="step") as position:
        if ticket is not None:
            clash = [f for f, v in (("--seeds", seeds), ("--dataset", dataset)) if v is not None]
            if clash:
                raise UsageError(f"{', '.join(clash)} cannot be combined with --ticket (the ticket fixes them)")
        elif weights is not None or trust_model_code:
            raise UsageError(f"{'--weights' if weights is not None else '--trust-model-code'} only goes with --ticket")
        n_threads = check_threads(threads)
        # with --ticket, --model may only confirm the ticket's own factory (ModelPolicy); the ticket fixes the model
        policy = build_model_policy(
            trust_model_code=trust_model_code,
            max_params=max_params,
            max_memory=max_memory,
            model=model if ticket is not None else None,
        )
        if ticket is not None:
            model = None
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        settings = dict(
            model=model,
            activation=activation,
            clip=clip,
            inputs=inputs,
            loss=loss,
            optimizer=optimizer,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            steps=steps,
            log_every=log_every,
            seeds=seeds,
            probe_size=probe_size,
            zero_threshold=zero_threshold,
            dataset=dataset,
            device=device,
            text=text,
        )
        features = drift_options.build_features(
            act_sparsity=act_sparsity,
            act_target=act_target,
            freeze_stats_after=freeze_stats_after,
            relufy=relufy,
            relufy_from=relufy_from,
            relufy_to=relufy_to,
            relufy_epochs=relufy_epochs,
            tradeoff=tradeoff,
            workers=workers,
            model=model,
            ticket=ticket is not None,
            activation=activation,
            inputs=inputs,
        )
        location = data_location(None if data_dir is None else str(data_dir), download)
        if features is not None:
            on_ticket = dict(ticket=ticket, weights=None if weights is None else str(weights), policy=policy)
            result = run_features(features, settings, location, position, quiet=quiet, threads=n_threads, **on_ticket)
            warn_unverified(result)
            if plot is not None:
                write_atomic(plot, result.pop("_figure")(result), overwrite=force)
                result["plot"] = str(plot)
            else:
                result.pop("_figure")
            show = result.pop("_show")
            report.print_json(document(drift_command(result), result)) if json_out else show(result)
            return
        spec = build_drift_spec(settings, location)
        total = spec.steps * (1 if ticket is not None else len(spec.seeds))
        with report.drift_progress(total, quiet=quiet) as progress, using(n_threads) as used:
            result = drift_run.run_drift(
                spec,
                ticket=ticket,
                weights=None if weights is None else str(weights),
                progress=position.track(progress),
                policy=policy,
            )
        result["threads"] = used
        warn_unverified(result)
        if plot is not None:
            write_atomic(plot, report.drift_plot(result), overwrite=force)
            result["plot"] = str(plot)
    report.print_json(document(drift_command(result), result)) if json_out else report.drift_tables(result)
