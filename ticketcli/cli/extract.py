"""`ticket extract`: extract a strong ticket and save it as a ticket file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from ticketcli import report
from ticketcli.cli.common import errors_to_exit_codes, model_size, warn_low_space, warn_precision
from ticketcli.cli.options import (
    BatchSize,
    Bias,
    DataDir,
    Dataset,
    Device,
    Download,
    GraspData,
    GraspDirection,
    Init,
    Json,
    Lr,
    MaxMemory,
    MaxParams,
    MethodName,
    Panel,
    Precision,
    Quiet,
    RendezvousTimeout,
    Threads,
    setting,
    split_sizes,
    with_default,
)
from ticketcli.errors import UsageError
from ticketcli.interrupts import stop_on_signals
from ticketcli.world import check_rendezvous_timeout


def extract(
    method: Annotated[Optional[MethodName], setting("method", "Mask extraction method.", Panel.METHOD)] = None,
    sparsity: Annotated[
        Optional[float],
        setting(
            "sparsity",
            "Requested sparsity in (0, 1) = 1 - keep density. For augmented it sets the augmented-space keep "
            "density 1 - s; the achieved sparsity is measured and reported.",
            Panel.METHOD,
        ),
    ] = None,
    layer_densities: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated keep density per layer (edge-popup, random), e.g. 0.1,0.2,0.2,0.5.",
            rich_help_panel=Panel.METHOD,
        ),
    ] = None,
    aug_density: Annotated[
        Optional[float],
        typer.Option(
            help="Augmented-space keep density for augmented; 0.5 is the canonical fixed-density double-scoring. "
            "Overrides --sparsity's augmented density.",
            rich_help_panel=Panel.METHOD,
        ),
    ] = None,
    aux_width: Annotated[
        Optional[int],
        setting(
            "aux_width",
            "augmented, iterated: auxiliary score width as a multiple m of the original, i.e. scores of width "
            "n + m*n per layer (the paper's Aug-x1/x2/x4).",
            Panel.METHOD,
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
            rich_help_panel=Panel.VARIANTS,
        ),
    ] = False,
    signed_scores: Annotated[
        bool,
        typer.Option(
            "--signed-scores",
            help=("edge-popup, augmented, iterated: rank raw scores S instead of |S| (the paper's NoAbs ablation)."),
            rich_help_panel=Panel.VARIANTS,
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
            rich_help_panel=Panel.VARIANTS,
        ),
    ] = False,
    global_topk: Annotated[
        bool,
        typer.Option(
            "--global-topk",
            help=(
                "edge-popup, augmented, iterated: one top-k across all layers instead of one per layer "
                "(config key global_topk)."
            ),
            rich_help_panel=Panel.VARIANTS,
        ),
    ] = False,
    global_old: Annotated[
        bool,
        typer.Option(
            "--global", help="Deprecated spelling of --global-topk.", rich_help_panel=Panel.VARIANTS, hidden=True
        ),
    ] = False,
    iter_tolerance: Annotated[
        Optional[float],
        setting(
            "iter_tolerance",
            "iterated: stop once the achieved sparsity is within this of the requested one.",
            Panel.VARIANTS,
        ),
    ] = None,
    max_rounds: Annotated[
        Optional[int],
        setting(
            "max_rounds", "iterated: at most this many rounds, each a full score training of --epochs.", Panel.VARIANTS
        ),
    ] = None,
    seed: Annotated[
        Optional[int],
        setting("seed", "Seed of the weights, the data split, score init and batch order.", Panel.MODEL),
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
            "Default: the paper's MLP (three hidden layers of 256), sized to the dataset.",
            rich_help_panel=Panel.MODEL,
        ),
    ] = None,
    bias: Bias = None,
    init: Init = None,
    init_k: Annotated[
        Optional[float],
        setting("init_k", "fan_in scale k of the init: bound or std gain/sqrt(k*fan_in).", Panel.MODEL),
    ] = None,
    weights: Annotated[
        Optional[Path],
        typer.Option(
            help="Frozen weights from this safetensors or PyTorch state-dict file instead of the seed.",
            rich_help_panel=Panel.MODEL,
        ),
    ] = None,
    dataset: Dataset = None,
    data_dir: DataDir = None,
    download: Download = False,
    n_extract: Annotated[
        Optional[int],
        typer.Option(
            help=with_default("Extraction examples drawn from the training set.", split_sizes("n_extract")),
            rich_help_panel=Panel.DATA,
        ),
    ] = None,
    n_val: Annotated[
        Optional[int],
        typer.Option(
            help=with_default("Validation examples, disjoint from extraction.", split_sizes("n_val")),
            rich_help_panel=Panel.DATA,
        ),
    ] = None,
    epochs: Annotated[
        Optional[int],
        setting(
            "epochs",
            "Training epochs: of the scores, or of the weights for imp (split over its rounds), set, rigl, movement.",
            Panel.TRAINING,
        ),
    ] = None,
    lr: Lr = None,
    batch_size: BatchSize = None,
    betas: Annotated[Optional[str], setting("betas", "Adam betas as 'b1,b2'.", Panel.TRAINING)] = None,
    eps: Annotated[Optional[float], setting("eps", "Adam epsilon.", Panel.TRAINING)] = None,
    weight_decay: Annotated[Optional[float], setting("weight_decay", "Adam weight decay.", Panel.TRAINING)] = None,
    weight_lr: Annotated[
        Optional[float],
        setting(
            "weight_lr",
            "Adam learning rate for weights in imp, set, rigl, movement (--lr is movement's score rate).",
            Panel.TRAINING,
        ),
    ] = None,
    saliency_batches: Annotated[
        Optional[int],
        setting(
            "saliency_batches",
            "snip: minibatches whose gradients are summed; grasp: minibatches in each of its collections (two with "
            "--grasp-data separate, one with shared).",
            Panel.VARIANTS,
        ),
    ] = None,
    grasp_temperature: Annotated[
        Optional[float],
        setting(
            "grasp_temperature",
            "grasp: logits are divided by this.",
            Panel.VARIANTS,
        ),
    ] = None,
    grasp_direction: Annotated[
        Optional[GraspDirection],
        setting(
            "grasp_direction",
            "grasp: which end of the ranking it keeps. paper: the k largest -θ⊙Hg (the double-scoring paper's "
            "Appendix B, signed score then top-k); original: the k largest θ⊙Hg, i.e. it removes the largest "
            "-θ⊙Hg (Wang et al. 2020, and the Synaptic-Flow code).",
            Panel.VARIANTS,
        ),
    ] = None,
    grasp_data: Annotated[
        Optional[GraspData],
        setting(
            "grasp_data",
            "grasp: separate: g and Hg from two independent collections of --saliency-batches minibatches; "
            "shared: both from one collection (the original GraSP code).",
            Panel.VARIANTS,
        ),
    ] = None,
    synflow_rounds: Annotated[
        Optional[int],
        setting("synflow_rounds", "synflow: pruning rounds; round r keeps density d^(r/R).", Panel.VARIANTS),
    ] = None,
    imp_rounds: Annotated[
        Optional[int],
        setting("imp_rounds", "imp: prune-and-rewind rounds, each training --epochs / rounds epochs.", Panel.VARIANTS),
    ] = None,
    regrow_every: Annotated[
        Optional[int],
        setting("regrow_every", "set, rigl: optimisation steps between prune-and-regrow updates.", Panel.VARIANTS),
    ] = None,
    regrow_fraction: Annotated[
        Optional[float],
        setting(
            "regrow_fraction",
            "set, rigl: fraction of active weights pruned by magnitude and regrown per update.",
            Panel.VARIANTS,
        ),
    ] = None,
    movement_warmup: Annotated[
        Optional[float],
        setting("movement_warmup", "movement: fraction of steps kept dense before the cubic schedule.", Panel.VARIANTS),
    ] = None,
    movement_cooldown: Annotated[
        Optional[float],
        setting("movement_cooldown", "movement: final fraction of steps at the target density.", Panel.VARIANTS),
    ] = None,
    movement_noise: Annotated[
        Optional[float],
        setting("movement_noise", "movement: std of the Gaussian noise on the zero score init.", Panel.VARIANTS),
    ] = None,
    match_sparsity: Annotated[
        Optional[Path],
        typer.Option(
            help="Run at the achieved sparsity of this ticket (overrides --sparsity), e.g. a double-scoring ticket "
            "(paper, Appendix G).",
            rich_help_panel=Panel.METHOD,
        ),
    ] = None,
    match_sparsity_per_layer: Annotated[
        bool,
        typer.Option(
            "--match-sparsity-per-layer",
            help="With --match-sparsity: match each layer's density "
            "(as --layer-densities) instead of the global sparsity.",
            rich_help_panel=Panel.METHOD,
        ),
    ] = False,
    max_params: MaxParams = None,
    max_memory: MaxMemory = None,
    device: Device = None,
    rendezvous_timeout: RendezvousTimeout = None,
    precision: Precision = None,
    threads: Threads = None,
    config: Annotated[
        Optional[Path],
        typer.Option(
            help="TOML file (at most 1 MiB) with any of these options (underscored names), each checked against the "
            "same range as its flag (README: Config files and value ranges); flags override it.",
            rich_help_panel=Panel.METHOD,
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Where to write the ticket.", rich_help_panel=Panel.OUTPUT)] = Path(
        "ticket.safetensors"
    ),
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Overwrite --out (and OUT.ckpt, with --checkpoint-every) if it exists.",
            rich_help_panel=Panel.OUTPUT,
        ),
    ] = False,
    checkpoint_every: Annotated[
        Optional[int],
        typer.Option(
            help="Save resumable state to OUT.ckpt every N epochs (atomically; removed once the ticket is written; "
            "an existing OUT.ckpt is only read with --resume, replaced only with --force). "
            "Default: no checkpoints.",
            rich_help_panel=Panel.SCALE_OUT,
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
            rich_help_panel=Panel.SCALE_OUT,
        ),
    ] = False,
    json_out: Json = False,
    quiet: Quiet = False,
) -> None:
    """Extract a strong ticket (a mask over frozen random weights) and save it as a ticket file."""
    # torch comes in with these: imported here, when the command runs, so that --help and errors stay fast
    from ticketcli import distributed
    from ticketcli import threads as torch_threads
    from ticketcli.checkpoint import checkpoint_path
    from ticketcli.checkpoint import describe as describe_checkpoint
    from ticketcli.methods import METHODS
    from ticketcli.resolve import build_extract_spec, merge_settings
    from ticketcli.runs import extract as runs_extract
    from ticketcli.runs import inputs as runs_inputs

    flags = dict(
        method=method,
        sparsity=sparsity,
        layer_densities=layer_densities,
        aug_density=aug_density,
        aux_width=aux_width,
        frozen_aux=frozen_aux or None,
        signed_scores=signed_scores or None,
        project_final=project_final or None,
        global_topk=global_topk or global_old or None,
        iter_tolerance=iter_tolerance,
        max_rounds=max_rounds,
        seed=seed,
        model=model,
        bias=bias,
        init=init,
        init_k=init_k,
        weights=None if weights is None else str(weights),
        dataset=dataset,
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
        grasp_direction=grasp_direction,
        grasp_data=grasp_data,
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
        max_memory=max_memory,
        threads=threads,
    )
    ckpt = checkpoint_path(out)
    if global_old:
        report.warn("--global is deprecated: use --global-topk (as the config key and the Python API call it)")
    with errors_to_exit_codes(), stop_on_signals(outputs=(out,), note=lambda: describe_checkpoint(ckpt)) as position:
        settings = merge_settings(flags, config)
        spec = build_extract_spec(settings)
        rendezvous_s = check_rendezvous_timeout(rendezvous_timeout)
        if checkpoint_every is not None and checkpoint_every < 1:
            raise UsageError(f"--checkpoint-every must be >= 1 epoch, got {checkpoint_every}")
        if resume and not ckpt.exists():
            report.warn(f"--resume: no checkpoint at {ckpt}; starting from the beginning")
        n = model_size(spec.model)
        # a ticket holds a bit per weight; a checkpoint scores and Adam's two moments in float32 (and auxiliaries)
        warn_low_space({out: n // 8 + (64 << 10), **({ckpt: 16 * n + (64 << 10)} if checkpoint_every else {})})
        with (
            distributed.joined(lambda: runs_inputs.resolve_device(spec.device), rendezvous_s=rendezvous_s) as world,
            report.epoch_progress(
                spec.method.epochs,
                quiet=quiet or not world.main or not METHODS.get(spec.method.name).uses_epochs,
                label=spec.method.name,
            ) as progress,
            # methods without epochs (snip, grasp, synflow, random): a heartbeat only
            report.working(
                spec.method.name, quiet=quiet or not world.main or METHODS.get(spec.method.name).uses_epochs
            ) as chunks,
            torch_threads.using(torch_threads.check_threads(settings["threads"])) as used,
        ):
            warn_precision(spec.method.precision, spec.device)
            summary = runs_extract.extract_ticket(
                spec,
                out=out,
                overwrite=force,
                progress=position.track(progress),
                checkpoint_every=checkpoint_every,
                resume=resume,
                chunks=report.phases_of(progress) or chunks,  # the final recalibration and evaluation
            )
            summary = replace(summary, threads=used)
    if world.main:
        report.print_json(summary.to_document()) if json_out else report.extract_table(summary)
