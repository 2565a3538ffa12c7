"""The `ticket` command line: thin commands that parse options, build specs, call one core function, report."""

from __future__ import annotations

import enum
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

import ticketcli
from ticketcli import report, runs, sweep, weak
from ticketcli.data import DATASETS
from ticketcli.errors import GateFailed, TicketCliError, UsageError
from ticketcli.init import INIT_SCHEMES
from ticketcli.methods import METHODS
from ticketcli.specs import DataSpec, build_extract_spec, data_location, load_config, merge_settings, parse_floats
from ticketcli.ticket import check_destination, write_atomic


def choices(name: str, names: list[str]) -> type[enum.Enum]:
    """An Enum of a registry's names, so Typer lists and checks the choices."""
    return enum.Enum(name, {n: n for n in names}, type=str)


MethodName = choices("MethodName", METHODS.names())
InitName = choices("InitName", INIT_SCHEMES.names())
DatasetName = choices("DatasetName", DATASETS.names())
SweepExecutor = choices("SweepExecutor", ["local", "ray"])

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
CheckpointWeights = Annotated[Optional[Path], typer.Option(
    help="The checkpoint the ticket was extracted from (checked against its sha256).")]


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
    aux_width: Annotated[Optional[int], typer.Option(
        help="augmented, iterated: auxiliary score width as a multiple m of the original, i.e. scores of width "
             "n + m*n per layer (the paper's Aug-x1/x2/x4). Default: 1.")] = None,
    frozen_aux: Annotated[bool, typer.Option("--frozen-aux", help=(
        "augmented, iterated: auxiliary scores keep their random init and are never updated. Under Algorithm 1 "
        "they get zero gradient anyway, so this only differs from the default with --weight-decay > 0."))] = False,
    signed_scores: Annotated[bool, typer.Option("--signed-scores", help=(
        "edge-popup, augmented, iterated: rank raw scores S instead of |S| (the paper's NoAbs ablation)."))] = False,
    project_final: Annotated[bool, typer.Option("--project-final", help=(
        "augmented: train as usual, then keep exactly the requested density of the original coordinates "
        "(top-k of the original scores) as the final mask."))] = False,
    global_topk: Annotated[bool, typer.Option("--global", help=(
        "edge-popup, augmented, iterated: one top-k across all layers instead of one per layer."))] = False,
    iter_tolerance: Annotated[Optional[float], typer.Option(
        help="iterated: stop once the achieved sparsity is within this of the requested one. Default: 0.02.")] = None,
    max_rounds: Annotated[Optional[int], typer.Option(
        help="iterated: at most this many rounds, each a full score training of --epochs. Default: 8.")] = None,
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
                 aux_width=aux_width, frozen_aux=frozen_aux or None, signed_scores=signed_scores or None,
                 project_final=project_final or None, global_topk=global_topk or None,
                 iter_tolerance=iter_tolerance, max_rounds=max_rounds, seed=seed, model=model, bias=bias, init=init and init.value, init_k=init_k,
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
    weights: CheckpointWeights = None,
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


@app.command("sweep-k")
def sweep_k(
    sparsity: Annotated[Optional[float], typer.Option(
        help="Requested sparsity of fixed edge-popup, random and the double-scoring methods. Default: 0.9.")] = None,
    seeds: Annotated[str, typer.Option(
        show_default=False, help="Comma-separated seeds; each seed's runs share one initialisation. Default: 0,1,2.")] = "0,1,2",
    densities: Annotated[Optional[str], typer.Option(
        help="Comma-separated scalar keep densities for the edge-popup sweep, also the pool of the layerwise "
             "draws. Default: the paper's 0.01,0.02,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.65,0.8.")] = None,
    layerwise: Annotated[int, typer.Option(
        show_default=False, help="Random layerwise keep-density tuples per seed, drawn from the density pool. Default: 8.")] = 8,
    band: Annotated[str, typer.Option(
        show_default=False, help="Achieved-sparsity band LO-HI of the constrained validation oracle. Default: 0.85-0.95.")] = "0.85-0.95",
    workers: Annotated[int, typer.Option(
        show_default=False, help="Local worker processes (spawned); workers x threads must not exceed the CPU cores. Default: 1.")] = 1,
    threads: Annotated[int, typer.Option(
        show_default=False, help="Torch threads per run, fixed so that results do not depend on --workers or the executor. "
             "Default: 1.")] = 1,
    executor: Annotated[SweepExecutor, typer.Option(
        show_default=False, help="local (a process pool of --workers) or ray (needs pip install 'ticketcli[ray]'). "
             "Default: local.")] = SweepExecutor.local,
    ray_address: Annotated[Optional[str], typer.Option(
        help="Ray cluster address for --executor ray (e.g. auto or ray://host:10001). "
             "Default: a new local Ray instance.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(
        help="Keep every run's ticket and record here; re-running skips runs already finished there.")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        help="Write a PNG: accuracy per configuration (left), accuracy vs achieved sparsity (right). "
             "Default: no plot.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --plot if it exists.")] = False,
    model: Annotated[Optional[str], typer.Option(
        help="Model spec, e.g. mlp:784-256-256-256-10. Default: the paper's MLP, sized to the dataset.")] = None,
    bias: Annotated[Optional[bool], typer.Option("--bias/--no-bias",
                                                 help="Give every layer a (masked) bias. Default: no bias.")] = None,
    init: Annotated[Optional[InitName], typer.Option(
                    help="Weight initialisation scheme. Default: scaled-kaiming-uniform.")] = None,
    init_k: Annotated[Optional[float], typer.Option(help="fan_in scale k of the init. Default: 0.5.")] = None,
    dataset: Annotated[Optional[DatasetName], typer.Option(help="Dataset. Default: fashion-mnist.")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    n_extract: Annotated[Optional[int], typer.Option(
        help="Extraction examples. Default: 5000 (fashion-mnist), 1000 (digits).")] = None,
    n_val: Annotated[Optional[int], typer.Option(
        help="Validation examples. Default: 5000 (fashion-mnist), 400 (digits).")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Score-training epochs per run. Default: 100.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the scores. Default: 0.01.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    device: Device = None,
    config: Annotated[Optional[Path], typer.Option(
        help="TOML file with model, data and training options (as for extract); flags override it.")] = None,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Edge-popup over scalar and layerwise keep densities vs double-scoring: the hyperparameter-stability table."""
    flags = dict(method="edge-popup", sparsity=sparsity, model=model, bias=bias, init=init and init.value,
                 init_k=init_k, dataset=dataset and dataset.value,
                 data_dir=None if data_dir is None else str(data_dir), download=download or None,
                 n_extract=n_extract, n_val=n_val, epochs=epochs, lr=lr, batch_size=batch_size, device=device)
    with errors_to_exit_codes():
        seed_list, band_range, pool = sweep_options(seeds, band, densities, layerwise, workers, threads, executor)
        fixed_by_sweep = sorted({"method", "seed", "layer_densities", "aug_density", "weights"} & set(load_config(config)))
        if fixed_by_sweep:
            raise UsageError(f"{config} sets {', '.join(fixed_by_sweep)}, which sweep-k chooses itself",
                             hint="remove these keys for sweep-k")
        base = build_extract_spec(merge_settings({**flags, "seed": seed_list[0]}, config))
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        tasks = sweep.build_plan(base, seeds=seed_list, densities=pool, layerwise=layerwise,
                                 double_scoring=sweep.double_scoring_methods())
        with report.sweep_progress(len(tasks), quiet=quiet) as progress:
            result = sweep.sweep_k(tasks, band=band_range, workers=workers, threads=threads,
                                   executor=executor.value, ray_address=ray_address, out_dir=out_dir,
                                   on_result=progress)
        result["settings"] = {
            "sparsity": base.method.sparsity, "seeds": seed_list, "densities": list(pool), "layerwise": layerwise,
            "band": list(band_range), "model": base.model.to_string(), "dataset": base.data.name,
            "epochs": base.method.epochs, "double_scoring": sweep.double_scoring_methods(), "workers": workers,
            "threads": threads, "executor": executor.value, "out_dir": None if out_dir is None else str(out_dir)}
        if plot is not None:
            write_atomic(plot, report.sweep_plot(result), overwrite=force)
            result["plot"] = str(plot)
    report.print_json(result) if json_out else report.sweep_table(result)


def sweep_options(seeds: str, band: str, densities: str | None, layerwise: int, workers: int, threads: int,
                  executor: enum.Enum) -> tuple[list[int], tuple[float, float], tuple[float, ...]]:
    """Validate sweep-k's own options: seeds, band, density pool, worker and thread counts."""
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if not seed_list or min(seed_list) < 0 or len(set(seed_list)) != len(seed_list):
        raise UsageError(f"--seeds must be distinct non-negative integers, got {seeds!r}")
    parts = band.split("-")
    try:
        lo, hi = (float(parts[0]), float(parts[1])) if len(parts) == 2 else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or not 0 <= lo <= hi <= 1:
        raise UsageError(f"--band must be LO-HI with 0 <= LO <= HI <= 1, got {band!r}")
    pool = sweep.PAPER_DENSITIES if densities is None else parse_floats(densities, "--densities")
    if not all(0 < d <= 1 for d in pool):
        raise UsageError(f"--densities must lie in (0, 1], got {densities!r}")
    if layerwise < 0 or workers < 1 or threads < 1:
        raise UsageError("--layerwise must be >= 0, --workers and --threads >= 1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if executor.value == "local" and workers * threads > cores:
        raise UsageError(f"--workers {workers} x --threads {threads} exceeds the {cores} CPU cores here",
                         hint="lower --workers or --threads")
    return seed_list, (lo, hi), tuple(pool)


@app.command("train-weak")
def train_weak(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    epochs: Annotated[Optional[int], typer.Option(help="Weight-training epochs (Appendix B). Default: 40.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the weights. Default: 0.001.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    dense_baseline: Annotated[bool, typer.Option(
        "--dense-baseline", help="Also train the unmasked network from the same init with the same optimiser "
                                 "and batch order, and report it beside.")] = False,
    out: Annotated[Optional[Path], typer.Option(
        help="Write the trained weights here as a plain safetensors state dict (masked entries zero), "
             "with metadata linking it to the ticket. Default: not written.")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        help="Write a PNG of validation accuracy and training loss per epoch (masked vs dense). "
             "Default: no plot.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out and --plot if they exist.")] = False,
    weights: CheckpointWeights = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Rewind a ticket to its init and train only its surviving weights with the mask fixed (a weak ticket)."""
    with errors_to_exit_codes():
        spec = weak.build_weak_spec(epochs=epochs, batch_size=batch_size, lr=lr)
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        data = DataSpec(**data_location(None if data_dir is None else str(data_dir), download))
        with report.runs_progress(spec.epochs, quiet=quiet) as progress:
            result = weak.train_weak(ticket, data=data, spec=spec, device=device or "auto",
                                     weights=None if weights is None else str(weights), dense_baseline=dense_baseline,
                                     out=out, overwrite=force, progress=progress)
        if plot is not None:
            write_atomic(plot, report.weak_plot(result), overwrite=force)
            result["plot"] = str(plot)
        report.print_json(result) if json_out else report.weak_table(result)


def main() -> None:
    app()
