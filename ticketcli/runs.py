"""End-to-end runs: build the network and data from specs, run a method, evaluate, write or re-check a ticket.

The entry points the commands call live here; the input checks they rely on are in runs_checks.py and what a run
records (ticket fields, summaries) in runs_record.py."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ticketcli import distributed, runs_checks, runs_record
from ticketcli import ticket as ticket_io
from ticketcli.atomic import check_destination
from ticketcli.checkpoint import Checkpointer, checkpoint_path
from ticketcli.data import DATASETS, Splits, load_splits
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.init import INIT_SCHEMES, init_weights
from ticketcli.methods import Progress
from ticketcli.models import MaskedNet, build_model, check_param_count, parse_model, planned_shapes
from ticketcli.seeding import file_sha256, fingerprint, generator
from ticketcli.specs import MAX_PARAMS, DataSpec, InitSpec, ModelPolicy, ModelSpec, RunSpec
from ticketcli.train import evaluate

DEVICES = "auto, cpu, cuda, cuda:N or mps"


def resolve_device(name: str) -> torch.device:
    """auto (CUDA if available, else the CPU), cpu, cuda, cuda:N or mps; under torchrun cuda means
    cuda:LOCAL_RANK, one GPU per process."""
    w = distributed.world()
    if name == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        name = "cuda"
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise UsageError(f"unknown device {name!r}; use {DEVICES}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"device {name!r} requested but CUDA is not available here", hint="use --device cpu")
        if w.active:
            if dev.index is not None:
                raise UsageError(
                    f"--device {name}: under torchrun each process uses cuda:LOCAL_RANK",
                    hint="pass --device cuda (or auto)",
                )
            dev = torch.device("cuda", w.local_rank)
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            what = f"process with LOCAL_RANK {w.local_rank}" if w.active else f"device {name!r}"
            raise UsageError(
                f"{what}: this machine has {count} CUDA device{'s' * (count != 1)} (cuda:0 to cuda:{count - 1})"
            )
    elif dev.type == "mps":
        if dev.index not in (None, 0):
            raise UsageError(f"unknown device {name!r}; use {DEVICES}")
        if not torch.backends.mps.is_available():
            raise UsageError(
                f"device {name!r} requested but MPS (Apple GPU) is not available here", hint="use --device cpu"
            )
    elif dev.type != "cpu":
        raise UsageError(f"device type {dev.type!r} is not supported; use {DEVICES}")
    return dev


def build_net(
    model: ModelSpec, init: InitSpec, weights_path: str | None, max_params: int = MAX_PARAMS
) -> tuple[MaskedNet, dict, dict | None]:
    """The frozen network (on CPU), its weights, and the checkpoint record when weights came from a file.

    A built-in model bigger than max_params is refused before anything is allocated (worked out on the meta
    device); a user's factory (run because the user named it) is counted once built."""
    if model.arch != "user":
        planned_shapes(model, max_params)
    module = build_model(model)
    if model.arch == "user":
        check_param_count(model, sum(p.numel() for p in module.parameters()), max_params)
    if weights_path is None:
        weights, checkpoint = init_weights(module, init), None
    else:
        weights = runs_checks.load_checkpoint(weights_path, module)
        checkpoint = {"path": str(weights_path), "sha256": file_sha256(weights_path)}
    net = MaskedNet(module, model)
    net.load_weights(weights)
    return net, weights, checkpoint


def check_input_shape(model: ModelSpec, data: Splits, net: MaskedNet | None = None) -> None:
    """A model/dataset mismatch as a one-line error naming both shapes (with `net`, by a forward on one example)."""
    shape, name = tuple(data.x_test.shape[1:]), data.info["dataset"]
    features = data.x_test[0].numel()
    if model.arch == "mlp" and model.widths[0] != features:
        raise UsageError(
            f"model {model.to_string()} expects {model.widths[0]} inputs but {name} has {shape} = {features} features"
        )
    if model.input is not None and tuple(model.input) != shape:
        raise UsageError(
            f"model {model.to_string()} expects inputs of shape {tuple(model.input)} but {name} has {shape}"
        )
    if net is None:
        return
    try:
        with torch.no_grad():
            logits = net(data.x_test[:1].to(net.device))
    except Exception as e:  # whatever the user's forward raises on the wrong shape
        raise UsageError(
            f"model {model.to_string()} does not accept {name} inputs of shape {shape}: "
            f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        ) from None
    classes = DATASETS.get(name).classes if name in DATASETS else None
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or (classes and logits.shape[1] != classes):
        got = tuple(logits.shape[1:]) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise UsageError(f"model {model.to_string()} outputs {got} per example but {name} has {classes} classes")


def extract_ticket(
    spec: RunSpec,
    *,
    out: str | Path,
    overwrite: bool = False,
    progress: Progress | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
) -> dict:
    """Run spec.method, rewind, evaluate, write the ticket; returns the summary that reports print.

    checkpoint_every: save resumable state to `<out>.ckpt` every N epochs; resume: continue from it (when it
    exists). The checkpoint is removed once the ticket is written."""
    check_destination(out, overwrite=overwrite)  # fail before the work, not after
    if checkpoint_every is not None:
        check_destination(checkpoint_path(out), overwrite=True)  # replaced every N epochs
    device = resolve_device(spec.device)
    world = distributed.world()
    checkpointing = checkpoint_every is not None or resume
    method_class = runs_checks.method_for_run(spec.method.name, checkpointing=checkpointing)
    net, weights, checkpoint = build_net(spec.model, spec.init, spec.weights, spec.max_params)
    splits = load_splits(spec.data)
    check_input_shape(spec.model, splits, net)
    net.to(device)
    splits = splits.to(device)
    net.calibration = splits.x_extract  # BatchNorm's evaluation statistics come from the extraction split
    saver = None
    if checkpointing:
        # every rank resumes from the checkpoint; only rank 0 writes it
        saver = Checkpointer(
            checkpoint_path(out),
            every=checkpoint_every if world.main else None,
            identity=runs_record.run_identity(spec, weights, device),
            resume=resume,
        )

    t0 = time.perf_counter()
    result = method_class().extract(
        net,
        splits,
        spec.method,
        device=device,
        generator=generator(spec.init.seed, "method"),
        progress=progress,
        checkpoint=saver,
    )
    wall = time.perf_counter() - t0

    masks = {n: result.masks[n].to(device) for n in net.names}
    distributed.check_identical(masks, "the final masks")  # under torchrun only
    trained = runs_record.trained_metrics(net, result.trained_weights, masks, splits)
    net.load_weights(weights)  # rewind: the ticket is always evaluated on the original initialisation
    metrics = runs_record.run_metrics(net, masks, splits, spec, device=device, wall=wall, trained=trained)
    tk = runs_record.make_ticket(spec, net, masks, weights, splits, result, metrics=metrics, checkpoint=checkpoint)
    size = None
    if world.main:  # under torchrun only rank 0 writes; every rank holds the same masks (checked above)
        size = ticket_io.save(tk, out, overwrite=overwrite)
        if saver is not None:
            saver.remove()
    return runs_record.extract_summary(spec, tk, out, size, splits.info["source"], result.details)


def ticket_model(tk: ticket_io.Ticket, path: Path, policy: ModelPolicy) -> ModelSpec:
    """The ticket's model spec, parsed, once the policy allows building it: a factory the ticket names is never
    imported unless the user opted in (--trust-model-code, or --model naming that same factory)."""
    try:
        model = parse_model(tk.model["spec"])
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    if policy.model is not None:
        given = parse_model(policy.model)
        if model.arch != "user" or given.factory != model.factory:
            raise UsageError(
                f"--model {policy.model[:80]} is not this ticket's model ({model.to_string()[:80]})",
                hint="with a ticket, --model only confirms the model factory the ticket names",
            )
    elif model.arch == "user" and not policy.trust_model_code:
        module = str(model.factory).partition(":")[0]
        raise UsageError(
            f"{path} names the model factory {model.factory}: rebuilding it would import and run "
            f"module {module!r}, which a ticket alone never does",
            hint=f"if you trust this ticket, pass --trust-model-code or --model {model.factory}",
        )
    return model


def rebuild(
    tk: ticket_io.Ticket, path: Path, weights_path: str | None, policy: ModelPolicy = ModelPolicy()
) -> tuple[MaskedNet, dict]:
    """The ticket's network from its spec and seed (or checkpoint), checked against shapes and fingerprint.

    Refused before anything runs or is allocated: masks that no longer match their recorded digest, a factory
    the policy does not allow importing, a model over policy.max_params or whose shapes differ from the ticket's."""
    ticket_io.require_intact(tk, path)
    model = ticket_model(tk, path, policy)
    try:
        INIT_SCHEMES.get(tk.init["scheme"])
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    runs_checks.check_planned(tk, model, path, policy.max_params)
    init = InitSpec(scheme=tk.init["scheme"], k=float(tk.init.get("k", InitSpec.k)), seed=tk.init["seed"])
    if tk.checkpoint is not None:
        weights_path = weights_path or runs_checks.recorded_checkpoint(tk, path, policy.max_params)
        if not Path(weights_path).is_file():
            raise UsageError(f"{path} was extracted from checkpoint weights; pass them with --weights FILE")
        if file_sha256(weights_path) != tk.checkpoint["sha256"]:
            raise TicketFileError(
                f"{weights_path} is not the checkpoint this ticket was extracted from (sha256 differs)"
            )
    elif weights_path is not None:
        raise UsageError(f"{path} was built from seed {init.seed}; it takes no --weights")
    try:
        net, weights, _ = build_net(model, init, weights_path, policy.max_params)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    runs_checks.check_user_model(model, tk.model, net, path)
    runs_checks.batchnorm_convention(tk.model, net, path)
    if net.shapes() != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} "
            f"({runs_checks.shape_difference(tk.shapes, net.shapes())})"
        )
    fp = fingerprint(weights)
    if fp != tk.weights_sha256:
        raise TicketFileError(
            f"{path}: weights fingerprint mismatch (rebuilt {fp[:12]}, ticket {tk.weights_sha256[:12]}); "
            f"the network cannot be reproduced here (ticket made with torch {tk.created_by.get('torch')}, "
            f"this is torch {torch.__version__})"
        )
    return net, weights


@dataclass
class OpenTicket:
    """A loaded ticket with its rebuilt network (initial weights), masks and data splits, all on `device`."""

    ticket: ticket_io.Ticket
    net: MaskedNet
    weights: dict[str, torch.Tensor]  # the initial weights (CPU), fingerprint-checked
    masks: dict[str, torch.Tensor]  # param -> bool mask on device
    splits: Splits
    device: torch.device


def open_ticket(
    path: str | Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
) -> OpenTicket:
    """Load and validate a ticket, rebuild its network and its own data splits (evaluate, train-weak)."""
    path = Path(path)
    tk = ticket_io.load(path)
    if tk.data["dataset"] not in DATASETS:  # before anything is built
        raise TicketFileError(f"{path}: unknown dataset {tk.data['dataset'][:80]!r}")
    dev = resolve_device(device)
    net, init_weights_ = rebuild(tk, path, weights, policy)
    spec = replace(
        data,
        name=tk.data["dataset"],
        n_extract=tk.data["n_extract"],
        n_val=tk.data["n_val"],
        split_seed=tk.data["split_seed"],
    )
    splits = load_splits(spec)
    check_input_shape(parse_model(tk.model["spec"]), splits, net)
    net.to(dev)
    masks = {n: m.to(dev) for n, m in tk.masks.items()}
    splits = splits.to(dev)
    net.calibration = splits.x_extract  # as at extraction: BatchNorm statistics recomputed from this split
    return OpenTicket(tk, net, init_weights_, masks, splits, dev)


def evaluate_ticket(
    path: str | Path,
    *,
    data: DataSpec,
    device: str = "auto",
    weights: str | None = None,
    policy: ModelPolicy = ModelPolicy(),
) -> dict:
    """Rebuild a ticket's network, apply its masks and re-measure test and validation accuracy."""
    path = Path(path)
    o = open_ticket(path, data=data, device=device, weights=weights, policy=policy)
    tk, net, masks, splits, dev = o.ticket, o.net, o.masks, o.splits, o.device
    test = evaluate(net, masks, splits.x_test, splits.y_test)
    val = evaluate(net, masks, splits.x_val, splits.y_val)
    return runs_record.evaluation_summary(path, tk, dev, test, val)


def inspect_ticket(path: str | Path) -> dict:
    """A ticket's metadata, per-parameter density and mask integrity, without data or weights: nothing is
    imported or built, and the masks are counted from their packed bytes (memory independent of their size)."""
    path = Path(path)
    scanned = ticket_io.scan(path)
    tk = scanned.ticket
    masks = {
        n: {"shape": tk.shapes[n], "kept": kept, "total": total, "density": kept / total}
        for n, (kept, total) in scanned.counts.items()
    }
    kept = sum(k for k, _ in scanned.counts.values())
    total = sum(t for _, t in scanned.counts.values())
    return {
        "ticket": str(path),
        "file_bytes": path.stat().st_size,
        "format_version": ticket_io.FORMAT_VERSION,
        "model": tk.model,
        "init": tk.init,
        "weights_sha256": tk.weights_sha256,
        "method": tk.method,
        "data": tk.data,
        "sparsity": tk.sparsity,
        "metrics": tk.metrics,
        "checkpoint": tk.checkpoint,
        "created_by": tk.created_by,
        "masks": masks,
        "density": kept / total,
        "packed_mask_bytes": sum((t + 7) // 8 for _, t in scanned.counts.values()),
        "masks_sha256": tk.masks_sha256,
        "integrity": tk.integrity,
    }
