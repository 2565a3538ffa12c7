"""The `ticket` command line: thin commands that parse options, build specs, call one core function, report."""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

import ticketcli
from ticketcli import distributed, exits, report, runs, sweep, weak
from ticketcli.checkpoint import checkpoint_path
from ticketcli.checkpoint import describe as describe_checkpoint
from ticketcli.data import DATASETS
from ticketcli.errors import GateFailed, TicketCliError, UsageError
from ticketcli.init import INIT_SCHEMES
from ticketcli.interrupts import stop_on_signals
from ticketcli.methods import METHODS
from ticketcli.specs import (
    MAX_PARAMS,
    DataSpec,
    build_extract_spec,
    build_model_policy,
    check_setting,
    data_location,
    load_config,
    merge_settings,
    parse_floats,
)
from ticketcli.ticket import check_destination, write_atomic


def choices(name: str, names: list[str]) -> type[enum.Enum]:
    """An Enum of a registry's names, so Typer lists and checks the choices."""
    return enum.Enum(name, {n: n for n in names}, type=str)


MethodName = choices("MethodName", METHODS.names())
InitName = choices("InitName", INIT_SCHEMES.names())
DatasetName = choices("DatasetName", DATASETS.names())
SweepExecutor = choices("SweepExecutor", ["local", "ray"])


class OneLineErrors(TyperGroup):
    """The edge of the program, where every run ends in exactly one exit code (exits.exit_code): Click's own usage
    errors (unknown option, a value outside the choices, not a number) as one 'error:' line with exit code 2, like
    every other bad input, instead of Typer's multi-line box; a closed stdout or stderr quietly (141); a signal
    outside a command's own handling as one line (130/143); anything unexpected as one 'internal error:' line
    with exit code 70 (the traceback with TICKET_DEBUG=1)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        streams = exits.std_streams()
        try:
            # commands set their own handlers (naming the epoch, the files written); this one covers the rest
            with stop_on_signals(outputs=None, unit=None):
                rv = super().main(args, prog_name, complete_var, False, **extra)
            code = rv if isinstance(rv, int) else 0
        except BaseException as e:  # the last resort: whatever escaped becomes an exit code here and only here
            code = exits.exit_code(e, debug=os.environ.get("TICKET_DEBUG", "") not in ("", "0"), streams=streams)
        sys.exit(code)


app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Extract, share and re-evaluate strong lottery tickets (binary masks over frozen random weights).",
)


@contextmanager
def errors_to_exit_codes() -> Iterator[None]:
    """A command's own errors as exit codes (exits.report_error): 2 bad input, 1 failed gate or run, 130/143
    interrupted by SIGINT/SIGTERM (commands turn those into errors.Interrupted with interrupts.stop_on_signals).
    Anything else goes on to OneLineErrors, the last resort."""
    try:
        yield
    except TicketCliError as e:
        raise typer.Exit(exits.report_error(e)) from None
    except KeyboardInterrupt:
        report.error("interrupted by SIGINT; no output was written")
        raise typer.Exit(130) from None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"ticketcli {ticketcli.__version__}")
        raise typer.Exit()


DATA_PARALLEL_COMMANDS = ("extract", "train-weak")


@app.callback()
def main_options(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Extract, share and re-evaluate strong lottery tickets."""
    with errors_to_exit_codes():
        if distributed.from_environment().active and ctx.invoked_subcommand not in DATA_PARALLEL_COMMANDS:
            raise UsageError(
                f"`ticket {ctx.invoked_subcommand}` does not run under torchrun",
                hint=f"run it as a single process; torchrun runs {' and '.join(DATA_PARALLEL_COMMANDS)}",
            )


Json = Annotated[bool, typer.Option("--json", help="Print exactly one JSON document on stdout instead of tables.")]
Device = Annotated[
    Optional[str],
    typer.Option(
        help="auto | cpu | cuda | cuda:N | mps (auto: CUDA if available, else "
        "the CPU; under torchrun cuda means cuda:LOCAL_RANK). Default: auto."
    ),
]
Precision = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "fp32, or bf16: autocast the training forward pass to bfloat16 (meant for ConvNets on a GPU; usually "
            "slower on the CPU). Accuracies are always measured in fp32. Default: fp32."
        )
    ),
]
DataDir = Annotated[
    Optional[Path],
    typer.Option(
        help="Look for dataset files here first (then $TICKET_DATA, ~/.cache/ticketcli, /usr/share/datasets)."
    ),
]
Download = Annotated[
    bool,
    typer.Option(
        "--download", help="Allow torchvision to download the dataset into ~/.cache/ticketcli if it is not found."
    ),
]
CheckpointWeights = Annotated[
    Optional[Path], typer.Option(help="The checkpoint the ticket was extracted from (checked against its sha256).")
]
TrustModelCode = Annotated[
    bool,
    typer.Option(
        "--trust-model-code",
        help=(
            "Allow importing and running the model factory (pkg.module:function) the ticket names. A ticket alone "
            "never runs code: without this (or --model naming the same factory) such a ticket is refused."
        ),
    ),
]
TicketModel = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "The ticket's own model factory pkg.module:function: confirms that it may be imported (like "
            "--trust-model-code, for that factory only). Any other model is refused."
        )
    ),
]
MaxParams = Annotated[
    Optional[int],
    typer.Option(
        help=(f"Refuse a model with more parameters than this, before anything is built. Default: {MAX_PARAMS}.")
    ),
]


def warn_unverified(result: dict) -> None:
    """A ticket written before masks_sha256 existed still works; say once that its masks were not checked."""
    if result.get("integrity") == "not recorded":
        report.warn(
            f"{result.get('ticket')} records no masks_sha256 (an older ticket): its masks could not be "
            "checked for changes since it was written"
        )


@app.command()
def extract(
    method: Annotated[Optional[MethodName], typer.Option(help="Mask extraction method. Default: augmented.")] = None,
    sparsity: Annotated[
        Optional[float],
        typer.Option(
            help="Requested sparsity in (0, 1) = 1 - keep density. For augmented it sets the augmented-space keep "
            "density 1 - s; the achieved sparsity is measured and reported. Default: 0.9."
        ),
    ] = None,
    layer_densities: Annotated[
        Optional[str],
        typer.Option(help="Comma-separated keep density per layer (edge-popup, random), e.g. 0.1,0.2,0.2,0.5."),
    ] = None,
    aug_density: Annotated[
        Optional[float],
        typer.Option(
            help="Augmented-space keep density for augmented; 0.5 is the canonical fixed-density double-scoring. "
            "Overrides --sparsity's augmented density."
        ),
    ] = None,
    aux_width: Annotated[
        Optional[int],
        typer.Option(
            help="augmented, iterated: auxiliary score width as a multiple m of the original, i.e. scores of width "
            "n + m*n per layer (the paper's Aug-x1/x2/x4). Default: 1."
        ),
    ] = None,
    frozen_aux: Annotated[
        bool,
        typer.Option(
            "--frozen-aux",
            help=(
                "augmented, iterated: auxiliary scores keep their random init and are never updated. Under Algorithm 1 "
                "they get zero gradient anyway, so this only differs from the default with --weight-decay > 0."
            ),
        ),
    ] = False,
    signed_scores: Annotated[
        bool,
        typer.Option(
            "--signed-scores",
            help=("edge-popup, augmented, iterated: rank raw scores S instead of |S| (the paper's NoAbs ablation)."),
        ),
    ] = False,
    project_final: Annotated[
        bool,
        typer.Option(
            "--project-final",
            help=(
                "augmented: train as usual, then keep exactly the requested density of the original coordinates "
                "(top-k of the original scores) as the final mask."
            ),
        ),
    ] = False,
    global_topk: Annotated[
        bool,
        typer.Option(
            "--global", help=("edge-popup, augmented, iterated: one top-k across all layers instead of one per layer.")
        ),
    ] = False,
    iter_tolerance: Annotated[
        Optional[float],
        typer.Option(
            help="iterated: stop once the achieved sparsity is within this of the requested one. Default: 0.02."
        ),
    ] = None,
    max_rounds: Annotated[
        Optional[int],
        typer.Option(help="iterated: at most this many rounds, each a full score training of --epochs. Default: 8."),
    ] = None,
    seed: Annotated[
        Optional[int], typer.Option(help="Seed of the weights, the data split, score init and batch order. Default: 0.")
    ] = None,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Model spec: mlp:784-256-256-256-10 (+res: skips between equal-width hidden layers; "
            "+norm=batch|layer|rms), lenet300, conv2, conv4, conv6, vgg:64-64-M-128-128-M-256-256-M, resnet20, "
            "resnet18, wrn:16-4 (depth-width), vit:p4-d64-l4-h4 (patch, width, blocks, heads; -m2: MLP ratio) "
            "(append +bias for biases; input shape and classes come from the dataset), or a factory "
            "my_pkg.my_module:build_net or torchvision.models:resnet18 returning an nn.Module (its Linear/Conv2d "
            "weights and biases are masked; a factory taking num_classes gets the dataset's). "
            "Default: the paper's MLP (three hidden layers of 256), sized to the dataset."
        ),
    ] = None,
    bias: Annotated[
        Optional[bool], typer.Option("--bias/--no-bias", help="Give every layer a (masked) bias. Default: no bias.")
    ] = None,
    init: Annotated[
        Optional[InitName], typer.Option(help="Weight initialisation scheme. Default: scaled-kaiming-uniform.")
    ] = None,
    init_k: Annotated[
        Optional[float],
        typer.Option(help="fan_in scale k of the init: bound or std gain/sqrt(k*fan_in). Default: 0.5."),
    ] = None,
    weights: Annotated[
        Optional[Path],
        typer.Option(help="Frozen weights from this safetensors or PyTorch state-dict file instead of the seed."),
    ] = None,
    dataset: Annotated[Optional[DatasetName], typer.Option(help="Dataset. Default: fashion-mnist.")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    n_extract: Annotated[
        Optional[int],
        typer.Option(
            help="Extraction examples drawn from the training set. Default: 5000 (fashion-mnist, mnist, cifar10), "
            "1000 (digits)."
        ),
    ] = None,
    n_val: Annotated[
        Optional[int],
        typer.Option(
            help="Validation examples, disjoint from extraction. Default: 5000 (fashion-mnist, mnist, cifar10), "
            "400 (digits)."
        ),
    ] = None,
    epochs: Annotated[
        Optional[int],
        typer.Option(
            help="Training epochs: of the scores, or of the weights for imp (split over its rounds), set, rigl, "
            "movement. Default: 100."
        ),
    ] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the scores. Default: 0.01.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    betas: Annotated[Optional[str], typer.Option(help="Adam betas as 'b1,b2'. Default: 0.9,0.999.")] = None,
    eps: Annotated[Optional[float], typer.Option(help="Adam epsilon. Default: 1e-8.")] = None,
    weight_decay: Annotated[Optional[float], typer.Option(help="Adam weight decay. Default: 0.")] = None,
    weight_lr: Annotated[
        Optional[float],
        typer.Option(
            help="Adam learning rate for weights in imp, set, rigl, movement (--lr is movement's score rate). "
            "Default: 0.001."
        ),
    ] = None,
    saliency_batches: Annotated[
        Optional[int],
        typer.Option(
            help="snip: minibatches whose gradients are summed; grasp: minibatches in each of its two collections. "
            "Default: 5."
        ),
    ] = None,
    grasp_temperature: Annotated[
        Optional[float],
        typer.Option(
            help="grasp: logits are divided by this. grasp keeps the k LARGEST -θ⊙Hg (Appendix B's top-k on the "
            "signed score; the original GraSP keeps the smallest). Default: 200."
        ),
    ] = None,
    synflow_rounds: Annotated[
        Optional[int], typer.Option(help="synflow: pruning rounds; round r keeps density d^(r/R). Default: 100.")
    ] = None,
    imp_rounds: Annotated[
        Optional[int],
        typer.Option(help="imp: prune-and-rewind rounds, each training --epochs / rounds epochs. Default: 5."),
    ] = None,
    regrow_every: Annotated[
        Optional[int],
        typer.Option(help="set, rigl: optimisation steps between prune-and-regrow updates. Default: 100."),
    ] = None,
    regrow_fraction: Annotated[
        Optional[float],
        typer.Option(
            help="set, rigl: fraction of active weights pruned by magnitude and regrown per update. Default: 0.3."
        ),
    ] = None,
    movement_warmup: Annotated[
        Optional[float],
        typer.Option(help="movement: fraction of steps kept dense before the cubic schedule. Default: 0.1."),
    ] = None,
    movement_cooldown: Annotated[
        Optional[float], typer.Option(help="movement: final fraction of steps at the target density. Default: 0.1.")
    ] = None,
    movement_noise: Annotated[
        Optional[float], typer.Option(help="movement: std of the Gaussian noise on the zero score init. Default: 1e-6.")
    ] = None,
    match_sparsity: Annotated[
        Optional[Path],
        typer.Option(
            help="Run at the achieved sparsity of this ticket (overrides --sparsity), e.g. a double-scoring ticket "
            "(paper, Appendix G)."
        ),
    ] = None,
    match_sparsity_per_layer: Annotated[
        bool,
        typer.Option(
            "--match-sparsity-per-layer",
            help="With --match-sparsity: match each layer's density "
            "(as --layer-densities) instead of the global sparsity.",
        ),
    ] = False,
    max_params: MaxParams = None,
    device: Device = None,
    precision: Precision = None,
    config: Annotated[
        Optional[Path],
        typer.Option(
            help="TOML file (at most 1 MiB) with any of these options (underscored names), each checked against the "
            "same range as its flag (README: Config files and value ranges); flags override it."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where to write the ticket.")] = Path("ticket.safetensors"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    checkpoint_every: Annotated[
        Optional[int],
        typer.Option(
            help="Save resumable state to OUT.ckpt every N epochs (atomically; removed once the ticket is written). "
            "Default: no checkpoints."
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help=(
                "Continue from OUT.ckpt (same options required); the masks come out bit-identical to an uninterrupted "
                "run. Without a checkpoint the run starts from the beginning."
            ),
        ),
    ] = False,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Extract a strong ticket (a mask over frozen random weights) and save it as a ticket file."""
    flags = dict(
        method=method and method.value,
        sparsity=sparsity,
        layer_densities=layer_densities,
        aug_density=aug_density,
        aux_width=aux_width,
        frozen_aux=frozen_aux or None,
        signed_scores=signed_scores or None,
        project_final=project_final or None,
        global_topk=global_topk or None,
        iter_tolerance=iter_tolerance,
        max_rounds=max_rounds,
        seed=seed,
        model=model,
        bias=bias,
        init=init and init.value,
        init_k=init_k,
        weights=None if weights is None else str(weights),
        dataset=dataset and dataset.value,
        data_dir=None if data_dir is None else str(data_dir),
        download=download or None,
        n_extract=n_extract,
        n_val=n_val,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        betas=betas,
        eps=eps,
        weight_decay=weight_decay,
        weight_lr=weight_lr,
        saliency_batches=saliency_batches,
        grasp_temperature=grasp_temperature,
        synflow_rounds=synflow_rounds,
        imp_rounds=imp_rounds,
        regrow_every=regrow_every,
        regrow_fraction=regrow_fraction,
        movement_warmup=movement_warmup,
        movement_cooldown=movement_cooldown,
        movement_noise=movement_noise,
        match_sparsity=None if match_sparsity is None else str(match_sparsity),
        match_sparsity_per_layer=match_sparsity_per_layer or None,
        device=device,
        precision=precision,
        max_params=max_params,
    )
    ckpt = checkpoint_path(out)
    with errors_to_exit_codes(), stop_on_signals(outputs=(out,), note=lambda: describe_checkpoint(ckpt)) as position:
        spec = build_extract_spec(merge_settings(flags, config))
        if checkpoint_every is not None and checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be >= 1 epoch, got {checkpoint_every}")
        if resume and not ckpt.exists():
            report.warn(f"--resume: no checkpoint at {ckpt}; starting from the beginning")
        with (
            distributed.joined(lambda: runs.resolve_device(spec.device)) as world,
            report.epoch_progress(
                spec.method.epochs,
                quiet=quiet
                or not world.main
                or spec.method.name == "random"
                or not getattr(METHODS.get(spec.method.name), "uses_epochs", True),
                label=spec.method.name,
            ) as progress,
        ):
            warn_precision(spec.method.precision, spec.device)
            summary = runs.extract_ticket(
                spec,
                out=out,
                overwrite=force,
                progress=position.track(progress),
                checkpoint_every=checkpoint_every,
                resume=resume,
            )
    if world.main:
        report.print_json(summary) if json_out else report.extract_table(summary)


def warn_precision(precision: str, device: str) -> None:
    if precision == "bf16" and runs.resolve_device(device).type == "cpu":
        report.warn("--precision bf16 on the CPU: autocast is usually slower than fp32 there; it is meant for GPUs")


@app.command()
def evaluate(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    min_accuracy: Annotated[
        Optional[float],
        typer.Option(help="Exit with code 1 if the test accuracy is below this (a fraction, e.g. 0.8)."),
    ] = None,
    weights: CheckpointWeights = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    json_out: Json = False,
) -> None:
    """Rebuild a ticket's network from its spec and seed, apply the masks and measure accuracy."""
    with errors_to_exit_codes(), stop_on_signals(outputs=None, unit=None):
        if min_accuracy is not None and not 0 <= min_accuracy <= 1:
            raise UsageError(f"--min-accuracy must lie in [0, 1] (a fraction), got {min_accuracy}")
        policy = build_model_policy(trust_model_code=trust_model_code, model=model, max_params=max_params)
        data = DataSpec(**data_location(None if data_dir is None else str(data_dir), download))
        result = runs.evaluate_ticket(
            ticket, data=data, device=device or "auto", weights=None if weights is None else str(weights), policy=policy
        )
        warn_unverified(result)
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
    with errors_to_exit_codes(), stop_on_signals(outputs=None, unit=None):
        result = runs.inspect_ticket(ticket)
        report.print_json(result) if json_out else report.inspect_table(result)


@app.command("sweep-k")
def sweep_k(
    sparsity: Annotated[
        Optional[float],
        typer.Option(
            help="Requested sparsity of fixed edge-popup, random and the double-scoring methods. Default: 0.9."
        ),
    ] = None,
    seeds: Annotated[
        str,
        typer.Option(
            show_default=False, help="Comma-separated seeds; each seed's runs share one initialisation. Default: 0,1,2."
        ),
    ] = "0,1,2",
    densities: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated scalar keep densities for the edge-popup sweep, also the pool of the layerwise "
            "draws. Default: the paper's 0.01,0.02,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.65,0.8."
        ),
    ] = None,
    layerwise: Annotated[
        int,
        typer.Option(
            show_default=False,
            help="Random layerwise keep-density tuples per seed, drawn from the density pool. Default: 8.",
        ),
    ] = 8,
    band: Annotated[
        str,
        typer.Option(
            show_default=False,
            help="Achieved-sparsity band LO-HI of the constrained validation oracle. Default: 0.85-0.95.",
        ),
    ] = "0.85-0.95",
    workers: Annotated[
        int,
        typer.Option(
            show_default=False,
            help="Local worker processes (spawned); workers x threads must not exceed the CPU cores. Default: 1.",
        ),
    ] = 1,
    threads: Annotated[
        int,
        typer.Option(
            show_default=False,
            help="Torch threads per run, fixed so that results do not depend on --workers or the executor. Default: 1.",
        ),
    ] = 1,
    executor: Annotated[
        SweepExecutor,
        typer.Option(
            show_default=False,
            help="local (a process pool of --workers) or ray (needs pip install 'ticketcli[ray]'). Default: local.",
        ),
    ] = SweepExecutor.local,
    ray_address: Annotated[
        Optional[str],
        typer.Option(
            help="Ray cluster address for --executor ray (e.g. auto or ray://host:10001). "
            "Default: a new local Ray instance."
        ),
    ] = None,
    out_dir: Annotated[
        Optional[Path],
        typer.Option(help="Keep every run's ticket and record here; re-running skips runs already finished there."),
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a PNG: accuracy per configuration (left), accuracy vs achieved sparsity (right). "
            "Default: no plot."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --plot if it exists.")] = False,
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Model spec, e.g. mlp:784-256-256-256-10, conv6, resnet20, wrn:16-4, vit:p4-d64-l4-h4 (as for "
            "extract). Default: the paper's MLP, sized to the dataset."
        ),
    ] = None,
    bias: Annotated[
        Optional[bool], typer.Option("--bias/--no-bias", help="Give every layer a (masked) bias. Default: no bias.")
    ] = None,
    init: Annotated[
        Optional[InitName], typer.Option(help="Weight initialisation scheme. Default: scaled-kaiming-uniform.")
    ] = None,
    init_k: Annotated[Optional[float], typer.Option(help="fan_in scale k of the init. Default: 0.5.")] = None,
    dataset: Annotated[Optional[DatasetName], typer.Option(help="Dataset. Default: fashion-mnist.")] = None,
    data_dir: DataDir = None,
    download: Download = False,
    n_extract: Annotated[
        Optional[int], typer.Option(help="Extraction examples. Default: 5000 (fashion-mnist), 1000 (digits).")
    ] = None,
    n_val: Annotated[
        Optional[int], typer.Option(help="Validation examples. Default: 5000 (fashion-mnist), 400 (digits).")
    ] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Score-training epochs per run. Default: 100.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the scores. Default: 0.01.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    device: Device = None,
    config: Annotated[
        Optional[Path],
        typer.Option(help="TOML file with model, data and training options (as for extract); flags override it."),
    ] = None,
    max_params: MaxParams = None,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Edge-popup over scalar and layerwise keep densities vs double-scoring: the hyperparameter-stability table."""
    flags = dict(
        method="edge-popup",
        sparsity=sparsity,
        model=model,
        bias=bias,
        init=init and init.value,
        init_k=init_k,
        dataset=dataset and dataset.value,
        data_dir=None if data_dir is None else str(data_dir),
        download=download or None,
        n_extract=n_extract,
        n_val=n_val,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        device=device,
        max_params=max_params,
    )
    resumable = None if out_dir is None else f"finished runs stay in {out_dir}; the same command resumes"
    with (
        errors_to_exit_codes(),
        stop_on_signals(
            outputs=(plot,) if plot is not None else (), note=lambda: resumable, unit="configuration"
        ) as position,
    ):
        seed_list, band_range, pool = sweep_options(seeds, band, densities, layerwise, workers, threads, executor)
        fixed_by_sweep = sorted(
            {"method", "seed", "layer_densities", "aug_density", "weights"} & set(load_config(config))
        )
        if fixed_by_sweep:
            raise UsageError(
                f"{config} sets {', '.join(fixed_by_sweep)}, which sweep-k chooses itself",
                hint="remove these keys for sweep-k",
            )
        base = build_extract_spec(merge_settings({**flags, "seed": seed_list[0]}, config))
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        tasks = sweep.build_plan(
            base, seeds=seed_list, densities=pool, layerwise=layerwise, double_scoring=sweep.double_scoring_methods()
        )
        with report.sweep_progress(len(tasks), quiet=quiet) as progress:
            done = position.track(None)

            def on_result(record: dict, resumed: bool) -> None:
                done(
                    {"epoch": (position.last or {}).get("epoch", 0) + 1, "epochs": len(tasks), "unit": "configuration"}
                )
                if progress is not None:
                    progress(record, resumed)

            result = sweep.sweep_k(
                tasks,
                band=band_range,
                workers=workers,
                threads=threads,
                executor=executor.value,
                ray_address=ray_address,
                out_dir=out_dir,
                on_result=on_result,
            )
        result["settings"] = {
            "sparsity": base.method.sparsity,
            "seeds": seed_list,
            "densities": list(pool),
            "layerwise": layerwise,
            "band": list(band_range),
            "model": base.model.to_string(),
            "dataset": base.data.name,
            "epochs": base.method.epochs,
            "double_scoring": sweep.double_scoring_methods(),
            "workers": workers,
            "threads": threads,
            "executor": executor.value,
            "out_dir": None if out_dir is None else str(out_dir),
        }
        if plot is not None:
            write_atomic(plot, report.sweep_plot(result), overwrite=force)
            result["plot"] = str(plot)
    report.print_json(result) if json_out else report.sweep_table(result)


def sweep_options(
    seeds: str, band: str, densities: str | None, layerwise: int, workers: int, threads: int, executor: enum.Enum
) -> tuple[list[int], tuple[float, float], tuple[float, ...]]:
    """Validate sweep-k's own options: seeds, band, density pool, worker and thread counts."""
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise UsageError(f"--seeds must be distinct non-negative integers, got {seeds!r}")
    seed_list = [check_setting("seed", s, "--seeds entries") for s in seed_list]
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
    layerwise, workers, threads = (
        check_setting(k, v) for k, v in (("layerwise", layerwise), ("workers", workers), ("threads", threads))
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if executor.value == "local" and workers * threads > cores:
        raise UsageError(
            f"--workers {workers} x --threads {threads} exceeds the {cores} CPU cores here",
            hint="lower --workers or --threads",
        )
    return seed_list, (lo, hi), tuple(pool)


@app.command("train-weak")
def train_weak(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    epochs: Annotated[Optional[int], typer.Option(help="Weight-training epochs (Appendix B). Default: 40.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Adam learning rate for the weights. Default: 0.001.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    dense_baseline: Annotated[
        bool,
        typer.Option(
            "--dense-baseline",
            help="Also train the unmasked network from the same init with the same optimiser "
            "and batch order, and report it beside.",
        ),
    ] = False,
    out: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the trained weights here as a plain safetensors state dict (masked entries zero), "
            "with metadata linking it to the ticket. Default: not written."
        ),
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write a PNG of validation accuracy and training loss per epoch (masked vs dense). Default: no plot."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out and --plot if they exist.")] = False,
    weights: CheckpointWeights = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    precision: Precision = None,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
) -> None:
    """Rewind a ticket to its init and train only its surviving weights with the mask fixed (a weak ticket)."""
    outputs = tuple(p for p in (out, plot) if p is not None)
    with errors_to_exit_codes(), stop_on_signals(outputs=outputs) as position:
        spec = weak.build_weak_spec(epochs=epochs, batch_size=batch_size, lr=lr, precision=precision)
        policy = build_model_policy(trust_model_code=trust_model_code, model=model, max_params=max_params)
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        data = DataSpec(**data_location(None if data_dir is None else str(data_dir), download))
        with (
            distributed.joined(lambda: runs.resolve_device(device or "auto")) as world,
            report.runs_progress(spec.epochs, quiet=quiet or not world.main) as progress,
        ):
            warn_precision(spec.precision, device or "auto")
            result = weak.train_weak(
                ticket,
                data=data,
                spec=spec,
                device=device or "auto",
                weights=None if weights is None else str(weights),
                dense_baseline=dense_baseline,
                out=out,
                overwrite=force,
                progress=position.track(progress),
                policy=policy,
            )
        if not world.main:
            return
        warn_unverified(result)
        if plot is not None:
            write_atomic(plot, report.weak_plot(result), overwrite=force)
            result["plot"] = str(plot)
        report.print_json(result) if json_out else report.weak_table(result)


from ticketcli import drift as drift_core  # noqa: E402  (kept with its command so branches merge cleanly)

ActivationName = choices("ActivationName", drift_core.ACTIVATIONS.names())
LossName = choices("LossName", drift_core.LOSSES.names())
InputsName = choices("InputsName", list(drift_core.INPUTS))
OptimizerName = choices("OptimizerName", ["adam", "sgd"])


@app.command()
def drift(
    model: Annotated[
        Optional[str],
        typer.Option(
            help="Model spec: an MLP, e.g. mlp:784-256-256-10 (+res for skips between equal-width hidden layers, "
            "+norm=batch|layer|rms before each hidden activation, +bias for biases), lenet300, resnet20, resnet18, "
            "vit:p4-d64-l4-h4, or the character-level gpt-nano:l2-d64-h4-c64 (trains on --text). Default: the "
            "paper's MLP (three hidden layers of 256) sized to the dataset; with --text, gpt-nano:l2-d64-h4-c64. "
            "With --ticket only the ticket's own model factory, confirming that it may be imported."
        ),
    ] = None,
    activation: Annotated[
        Optional[ActivationName],
        typer.Option(
            help="Activation at every activation site (an MLP's hidden layers, a ResNet's ReLUs, the MLP blocks of "
            "a ViT or GPT-nano); relu2-clip is min(relu(x)^2, --clip). Default: relu."
        ),
    ] = None,
    clip: Annotated[Optional[float], typer.Option(help="c of relu2-clip. Default: 50.")] = None,
    inputs: Annotated[
        Optional[InputsName],
        typer.Option(
            help="data: the dataset's images; gaussian: N(0,1) features; uniform: U[0,1] features (random inputs get "
            "random labels, fresh every step). Default: data."
        ),
    ] = None,
    loss: Annotated[
        Optional[LossName], typer.Option(help="cross-entropy, or mse against one-hot targets. Default: cross-entropy.")
    ] = None,
    optimizer: Annotated[Optional[OptimizerName], typer.Option(help="Weight optimiser. Default: adam.")] = None,
    lr: Annotated[Optional[float], typer.Option(help="Learning rate. Default: 0.001.")] = None,
    momentum: Annotated[Optional[float], typer.Option(help="SGD momentum. Default: 0.")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Minibatch size. Default: 512.")] = None,
    steps: Annotated[Optional[int], typer.Option(help="Optimiser steps. Default: 500.")] = None,
    log_every: Annotated[
        Optional[int],
        typer.Option(help="Measure every this many steps (and at step 0 and the last step). Default: 10."),
    ] = None,
    seeds: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated seeds of the weights, split and batches; several give mean +- std. Default: 0."
        ),
    ] = None,
    probe_size: Annotated[
        Optional[int],
        typer.Option(
            help="Size of the fixed batch every statistic is measured on (validation split, or random inputs). "
            "Default: 1024."
        ),
    ] = None,
    zero_threshold: Annotated[
        Optional[float],
        typer.Option(
            help="Smooth activations (gelu, silu, gelu2): |a| below this counts as zero in sparsity and dead units; "
            "relu-type activations count exact zeros. Default: 0.01."
        ),
    ] = None,
    ticket: Annotated[
        Optional[Path],
        typer.Option(help="Rebuild this ticket's network (fingerprint-checked) and train only its surviving weights."),
    ] = None,
    weights: Annotated[
        Optional[Path], typer.Option(help="The checkpoint a --ticket was extracted from, if it was.")
    ] = None,
    trust_model_code: TrustModelCode = False,
    max_params: MaxParams = None,
    dataset: Annotated[
        Optional[DatasetName],
        typer.Option(help="Dataset (sizes the default model; the inputs with --inputs data). Default: fashion-mnist."),
    ] = None,
    data_dir: DataDir = None,
    download: Download = False,
    device: Device = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(help="Write a PNG: weight mean per layer, negative pre-activation share and sparsity vs step."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --plot if it exists.")] = False,
    json_out: Json = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bar.")] = False,
    # --- issue 20 (drift-models): options for character-level models, kept together ---
    text: Annotated[
        Optional[Path],
        typer.Option(
            help="Plain UTF-8 text a gpt-nano model learns next-character prediction on, split into training and "
            "validation blocks by the seed. Default for gpt-nano: the fortunes files literature, science, "
            "computers, wisdom (<--data-dir>/fortunes, then /usr/share/games/fortunes)."
        ),
    ] = None,
) -> None:
    """Train weights from the init and measure weight drift, negative pre-activations and activation sparsity."""
    with errors_to_exit_codes(), stop_on_signals(outputs=(plot,) if plot is not None else (), unit="step") as position:
        if ticket is not None:
            clash = [f for f, v in (("--seeds", seeds), ("--dataset", dataset)) if v is not None]
            if clash:
                raise UsageError(f"{', '.join(clash)} cannot be combined with --ticket (the ticket fixes them)")
        elif weights is not None or trust_model_code:
            raise UsageError(f"{'--weights' if weights is not None else '--trust-model-code'} only goes with --ticket")
        # with --ticket, --model may only confirm the ticket's own factory (ModelPolicy); the ticket fixes the model
        policy = build_model_policy(
            trust_model_code=trust_model_code, max_params=max_params, model=model if ticket is not None else None
        )
        if ticket is not None:
            model = None
        if plot is not None:
            check_destination(plot, overwrite=force)  # before the work, not after
        settings = dict(
            model=model,
            activation=activation and activation.value,
            clip=clip,
            inputs=inputs and inputs.value,
            loss=loss and loss.value,
            optimizer=optimizer and optimizer.value,
            lr=lr,
            momentum=momentum,
            batch_size=batch_size,
            steps=steps,
            log_every=log_every,
            seeds=seeds,
            probe_size=probe_size,
            zero_threshold=zero_threshold,
            dataset=dataset and dataset.value,
            device=device,
            text=text,
        )
        spec = drift_core.build_drift_spec(
            settings, data_location(None if data_dir is None else str(data_dir), download)
        )
        total = spec.steps * (1 if ticket is not None else len(spec.seeds))
        with report.epoch_progress(total, quiet=quiet, label="drift") as progress:
            result = drift_core.run_drift(
                spec,
                ticket=ticket,
                weights=None if weights is None else str(weights),
                progress=position.track(progress),
                policy=policy,
            )
        warn_unverified(result)
        if plot is not None:
            write_atomic(plot, report.drift_plot(result), overwrite=force)
            result["plot"] = str(plot)
    report.print_json(result) if json_out else report.drift_tables(result)


ExportFormat = choices("ExportFormat", ["masked", "prune", "csr", "masks"])


@app.command()
def export(
    ticket: Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")],
    format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="masked: W*M state dict for plain load_state_dict; prune: torch.nn.utils.prune layout "
            "(<name>_orig + <name>_mask); csr: per-layer crow/col/values + a size report; masks: "
            "unpacked bool masks keyed by parameter name.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Where to write: .safetensors for safetensors, anything else (e.g. .pt) for a torch.save state dict."
        ),
    ],
    weights: Annotated[
        Optional[Path], typer.Option(help="The checkpoint the ticket was extracted from (checked against its sha256).")
    ] = None,
    trust_model_code: TrustModelCode = False,
    model: TicketModel = None,
    max_params: MaxParams = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    data_dir: DataDir = None,
    download: Download = False,
    json_out: Json = False,
) -> None:
    """Write a ticket's network for plain PyTorch: masked weights, prune layout, CSR or bool masks. BatchNorm
    statistics are recalibrated on the ticket's extraction split first (so BatchNorm models need their data)."""
    from ticketcli.export import export_ticket

    with errors_to_exit_codes(), stop_on_signals(outputs=(out,), unit=None):  # write_atomic: all of --out or none
        policy = build_model_policy(trust_model_code=trust_model_code, model=model, max_params=max_params)
        data = DataSpec(**data_location(None if data_dir is None else str(data_dir), download))
        result = export_ticket(
            ticket,
            fmt=format.value,
            out=out,
            weights=None if weights is None else str(weights),
            overwrite=force,
            policy=policy,
            data=data,
        )
        warn_unverified(result)
        report.print_json(result) if json_out else report.export_table(result)


def main() -> None:
    app()
