"""The `ticket` command line: thin commands that parse options, build specs, call one core function, report."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

import ticketcli
from ticketcli import report, runs
from ticketcli.data import DATASETS
from ticketcli.errors import GateFailed, TicketCliError
from ticketcli.init import INIT_SCHEMES
from ticketcli.methods import METHODS
from ticketcli.specs import DataSpec, build_extract_spec, data_location, merge_settings


def choices(name: str, names: list[str]) -> type[enum.Enum]:
    """An Enum of a registry's names, so Typer lists and checks the choices."""
    return enum.Enum(name, {n: n for n in names}, type=str)


MethodName = choices("MethodName", METHODS.names())
InitName = choices("InitName", INIT_SCHEMES.names())
DatasetName = choices("DatasetName", DATASETS.names())

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Extract, share and re-evaluate strong lottery tickets (binary masks over frozen random weights).")


@contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """The one place where errors become exit codes: 2 bad input, 1 failed gate or run, 130 interrupted."""
    try:
        yield
    except TicketCliError as e:
        report.error(str(e), e.hint)
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        report.error("interrupted; no output was written")
        raise typer.Exit(130) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ticketcli {ticketcli.__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Extract, share and re-evaluate strong lottery tickets."""


Json = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document on stdout instead of tables.")]
Device = Annotated[Optional[str], typer.Option(help="auto | cpu | cuda | cuda:N. Default: auto.")]
DataDir = Annotated[Optional[Path], typer.Option(help="Look for dataset files here first "
                                                     "(then $TICKET_DATA, ~/.cache/ticketcli, /usr/share/datasets).")]
Download = Annotated[bool, typer.Option("--download", help="Allow torchvision to download the dataset "
                                                          "into ~/.cache/ticketcli if it is not found.")]


@app.command()
def extract(
    method: Annotated[Optional[MethodName], typer.Option(
                      help="Mask extraction method. Default: augmented.")] = None,
    sparsity: Annotated[Optional[float], typer.Option(
        help="Requested sparsity in (0, 1) = 1 - keep density. For augmented it sets the augmented-space keep "
             "density 1 - s; the achieved sparsity is measured and reported. Default: 0.9.")] = None,
    layer_densities: Annotated[Optional[str], typer.Option(
        help="Comma-separated keep density per layer (edge-popup, random), e.g. 0.1,0.2,0.2,0.5.")] = None,
    aug_density: Annotated[Optional[float], typer.Option(
        help="Augmented-space keep density for augmented; 0.5 is the canonical fixed-density double-scoring. "
             "Overrides --sparsity's augmented density.")] = None,
    seed: Annotated[Optional[int], typer.Option(
        help="Seed of the weights, the data split, score init and batch order. Default: 0.")] = None,
    model: Annotated[Optional[str], typer.Option(
        help="Model spec, e.g. mlp:784-256-256-256-10 (append +bias for biases). "
             "Default: the paper's MLP (three hidden layers of 256), sized to the dataset.")] = None,
    bias: Annotated[Optional[bool], typer.Option("--bias/--no-bias",
                                                 help="Give every layer a (masked) bias. Default: no bias.")] = None,
    init: Annotated[Optional[InitName], typer.Option(
                    help="Weight initialisation scheme. Default: scaled-kaiming-uniform.")] = None,
    init_k: Annotated[Optional[float], typer.Option(
        help="fan_in scale k of the init: bound or std gain/sqrt(k*fan_in). Default: 0.5.")] = None,
    weights: Annotated[Optional[Path], typer.Option(
        help="Frozen weights from this safetensors or PyTorch state-dict file instead of the seed.")] = None,
    dataset: Annotated[Optional[DatasetName], typer.Option(
                       help="Dataset. Default: fashion-mnist.")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    n_extract: Annotated[Optional[int], typer.Option(
        help="Extraction examples drawn from the training set. Default: 5000 (fashion-mnist), 1000 (digits).")] = None,
    n_val: Annotated[Optional[int], typer.Option(
        help="Validation examples, disjoint from extraction. Default: 5000 (fashion-mnist), 400 (digits).")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Score-training epochs. Default: 100.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the scores. Default: 0.01.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    betas: Annotated[Optional[str], typer.Option(help="Adam betas as 'b1,b2'. Default: 0.9,0.999.")] = None,
    eps: Annotated[Optional[float], typer.Option(help="Adam epsilon. Default: 1e-8.")] = None,
    weight_decay: Annotated[Optional[float], typer.Option(help="Adam weight decay. Default: 0.")] = None,
    device: Device = None,
    config: Annotated[Optional[Path], typer.Option(
        help="TOML file with any of these options (underscored names); flags override it.")] = None,
    out: Annotated[Path, typer.Option(help="Where to write the ticket.")] = Path("ticket.safetensors"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Extract a strong ticket (a mask over frozen random weights) and save it as a ticket file."""
    flags = dict(method=method and method.value, sparsity=sparsity, layer_densities=layer_densities, aug_density=aug_density,
                 seed=seed, model=model, bias=bias, init=init and init.value, init_k=init_k,
                 weights=None if weights is None else str(weights), dataset=dataset and dataset.value,
                 data_dir=None if data_dir is None else str(data_dir), download=download or None,
                 n_extract=n_extract, n_val=n_val, epochs=epochs, lr=lr, batch_size=batch_size, betas=betas,
                 eps=eps, weight_decay=weight_decay, device=device)
    with errors_to_exit_codes():
        spec = build_extract_spec(merge_settings(flags, config))
        with report.epoch_progress(spec.method.epochs, quiet=quiet or spec.method.name == "random",
                                   label=spec.method.name) as progress:
            summary = runs.extract_ticket(spec, out=out, overwrite=force, progress=progress)
    report.print_json(summary) if json_out else report.extract_table(summary)


@app.command()
def evaluate(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    min_accuracy: Annotated[Optional[float], typer.Option(
        help="Exit with code 1 if the test accuracy is below this (a fraction, e.g. 0.8).")] = None,
    weights: Annotated[Optional[Path], typer.Option(
        help="The checkpoint the ticket was extracted from (checked against its sha256).")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    json_out: Json = False,
) -> None:
    """Rebuild a ticket's network from its spec and seed, apply the masks and measure accuracy."""
    with errors_to_exit_codes():
        data = DataSpec(**data_location(None if data_dir is None else str(data_dir), download))
        result = runs.evaluate_ticket(ticket, data=data, device=device or "auto",
                                      weights=None if weights is None else str(weights))
        if min_accuracy is not None:
            result["gate"] = {"min_accuracy": min_accuracy, "passed": result["test"]["accuracy"] >= min_accuracy}
        report.print_json(result) if json_out else report.evaluate_table(result)
        if not result["reproduced"] and result["device"] == "cpu" and result["stored"]["device"] == "cpu":
            report.warn("the ticket was extracted on the CPU but its accuracy did not reproduce exactly here")
        if min_accuracy is not None and not result["gate"]["passed"]:
            raise GateFailed(f"test accuracy {result['test']['accuracy']:.4f} is below --min-accuracy {min_accuracy}")


@app.command()
def inspect(
    ticket: Annotated[Path, typer.Argument(help="A ticket file.")],
    json_out: Json = False,
) -> None:
    """Print a ticket's metadata, per-layer density and file size (needs no data)."""
    with errors_to_exit_codes():
        result = runs.inspect_ticket(ticket)
    report.print_json(result) if json_out else report.inspect_table(result)


from ticketcli import drift as drift_core  # noqa: E402  (kept with its command so branches merge cleanly)
from ticketcli.errors import UsageError  # noqa: E402

ActivationName = choices("ActivationName", drift_core.ACTIVATIONS.names())
LossName = choices("LossName", drift_core.LOSSES.names())
InputsName = choices("InputsName", list(drift_core.INPUTS))
OptimizerName = choices("OptimizerName", ["adam", "sgd"])


@app.command()
def drift(
    model: Annotated[Optional[str], typer.Option(
        help="MLP spec, e.g. mlp:784-256-256-10 (+bias for biases). Default: the paper's MLP (three hidden "
             "layers of 256) sized to the dataset.")] = None,
    activation: Annotated[Optional[ActivationName], typer.Option(
        help="Activation between hidden layers; relu2-clip is min(relu(x)^2, --clip). Default: relu.")] = None,
    clip: Annotated[Optional[float], typer.Option(help="c of relu2-clip. Default: 50.")] = None,
    inputs: Annotated[Optional[InputsName], typer.Option(
        help="data: the dataset's images; gaussian: N(0,1) features; uniform: U[0,1] features (random inputs get "
             "random labels, fresh every step). Default: data.")] = None,
    loss: Annotated[Optional[LossName], typer.Option(
        help="cross-entropy, or mse against one-hot targets. Default: cross-entropy.")] = None,
    optimizer: Annotated[Optional[OptimizerName], typer.Option(help="Weight optimiser. Default: adam.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Learning rate. Default: 0.001.")] = None,
    momentum: Annotated[Optional[float], typer.Option(help="SGD momentum. Default: 0.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Optimiser steps. Default: 500.")] = None,
    log_every: Annotated[Optional[int], typer.Option(
        help="Measure every this many steps (and at step 0 and the last step). Default: 10.")] = None,
    seeds: Annotated[Optional[str], typer.Option(
        help="Comma-separated seeds of the weights, split and batches; several give mean +- std. Default: 0.")] = None,
    probe_size: Annotated[Optional[int], typer.Option(
        help="Size of the fixed batch every statistic is measured on (validation split, or random inputs). "
             "Default: 1024.")] = None,
    zero_threshold: Annotated[Optional[float], typer.Option(
        help="Smooth activations (gelu, silu, gelu2): |a| below this counts as zero in sparsity and dead units; "
             "relu-type activations count exact zeros. Default: 0.01.")] = None,
    ticket: Annotated[Optional[Path], typer.Option(
        help="Rebuild this ticket's network (fingerprint-checked) and train only its surviving weights.")] = None,
    weights: Annotated[Optional[Path], typer.Option(
        help="The checkpoint a --ticket was extracted from, if it was.")] = None,
    dataset: Annotated[Optional[DatasetName], typer.Option(
        help="Dataset (sizes the default model; the inputs with --inputs data). Default: fashion-mnist.")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    plot: Annotated[Optional[Path], typer.Option(
        help="Write a PNG: weight mean per layer, negative pre-activation share and sparsity vs step.")] = None,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    with errors_to_exit_codes():
        if ticket is not None:
            clash = [f for f, v in (("--model", model), ("--seeds", seeds), ("--dataset", dataset)) if v is not None]
            if clash:
                raise UsageError(f"{', '.join(clash)} cannot be combined with --ticket (the ticket fixes them)")
        elif weights is not None:
            raise UsageError("--weights only goes with --ticket")
        if plot is not None and not plot.parent.is_dir():
            raise UsageError(f"cannot write --plot {plot}: directory {plot.parent} does not exist")
        settings = dict(model=model, activation=activation and activation.value, clip=clip,
                        inputs=inputs and inputs.value, loss=loss and loss.value,
                        optimizer=optimizer and optimizer.value, lr=lr, momentum=momentum, batch_size=batch_size,
                        steps=steps, log_every=log_every, seeds=seeds, probe_size=probe_size,
                        zero_threshold=zero_threshold, dataset=dataset and dataset.value, device=device)
        spec = drift_core.build_drift_spec(settings, data_location(None if data_dir is None else str(data_dir),
                                                                   download))
        total = spec.steps * (1 if ticket is not None else len(spec.seeds))
        with report.epoch_progress(total, quiet=quiet, label="drift") as progress:
            result = drift_core.run_drift(spec, ticket=ticket, weights=None if weights is None else str(weights),
                                          progress=progress)
        if plot is not None:
            report.drift_plot(result, plot)
            result["plot"] = str(plot)
    report.print_json(result) if json_out else report.drift_tables(result)


def main() -> None:
    app()
