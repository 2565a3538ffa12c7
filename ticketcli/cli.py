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
        help="Model spec: mlp:784-256-256-256-10, lenet300, conv2, conv4, conv6, vgg:64-64-M-128-128-M-256-256-M "
             "(append +bias for biases; input shape and classes come from the dataset), or a factory "
             "my_pkg.my_module:build_net returning an nn.Module (its Linear/Conv2d weights and biases are masked). "
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
        help="Extraction examples drawn from the training set. Default: 5000 (fashion-mnist, mnist, cifar10), "
             "1000 (digits).")] = None,
    n_val: Annotated[Optional[int], typer.Option(
        help="Validation examples, disjoint from extraction. Default: 5000 (fashion-mnist, mnist, cifar10), "
             "400 (digits).")] = None,
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


ExportFormat = choices("ExportFormat", ["masked", "prune", "csr", "masks"])


@app.command()
def export(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    format: Annotated[ExportFormat, typer.Option(
        "--format", help="masked: W*M state dict for plain load_state_dict; prune: torch.nn.utils.prune layout "
                         "(<name>_orig + <name>_mask); csr: per-layer crow/col/values + a size report; masks: "
                         "unpacked bool masks keyed by parameter name.")],
    out: Annotated[Path, typer.Option(help="Where to write: .safetensors for safetensors, anything else "
                                           "(e.g. .pt) for a torch.save state dict.")],
    weights: Annotated[Optional[Path], typer.Option(
        help="The checkpoint the ticket was extracted from (checked against its sha256).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    json_out: Json = False,
) -> None:
    """Write a ticket's network for plain PyTorch: masked weights, prune layout, CSR or bool masks."""
    from ticketcli.export import export_ticket

    with errors_to_exit_codes():
        result = export_ticket(ticket, fmt=format.value, out=out, weights=None if weights is None else str(weights),
                               overwrite=force)
    report.print_json(result) if json_out else report.export_table(result)


def main() -> None:
    app()
