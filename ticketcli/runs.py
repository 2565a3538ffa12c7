"""End-to-end runs: build the network and data from specs, run a method, evaluate, write or re-check a ticket."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import ticketcli
from ticketcli import batchnorm, distributed
from ticketcli import ticket as ticket_io
from ticketcli.checkpoint import Checkpointer, checkpoint_path, read_torch_file
from ticketcli.data import DATASETS, Splits, load_splits
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.init import INIT_SCHEMES, init_weights
from ticketcli.masking import mask_stats
from ticketcli.methods import METHODS, Progress
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


def load_checkpoint(path: str, module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Weights from a safetensors or PyTorch state-dict file (weights_only: never arbitrary unpickling)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"weights file not found: {path}" if not p.exists() else f"{path} is not a regular file")
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            state = load_file(str(p))
        except Exception as e:  # corrupt files raise many types
            raise UsageError(f"cannot read weights from {path}: {str(e).splitlines()[0][:200]}") from None
    else:
        state = read_torch_file(p, "weights from")
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UsageError(f"{path} is not a state dict of tensors")
    expected = {n: tuple(q.shape) for n, q in module.named_parameters()}
    buffers = dict(module.named_buffers())  # a user model's buffers (norm statistics) may come along
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected) - set(buffers))
    wrong = sorted(
        n
        for n in state
        if n in expected and tuple(state[n].shape) != expected[n] or n in buffers and state[n].shape != buffers[n].shape
    )
    if missing or unexpected or wrong:
        detail = "; ".join(
            f"{k}: {', '.join(v)}"
            for k, v in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if v
        )
        raise UsageError(f"{path} does not fit the model ({detail})")
    check_finite(path, {n: state[n] for n in state if n in expected or n in buffers})
    with torch.no_grad():
        for n, b in buffers.items():
            if n in state:
                b.copy_(state[n])
    return {n: state[n].detach().to(torch.float32).contiguous() for n in expected}


def check_finite(path: str, tensors: dict[str, torch.Tensor]) -> None:
    """Frozen weights with NaN or Inf are refused before any method runs: every method would otherwise fail its own
    way (a non-finite loss blamed on --lr, or a silently meaningless mask)."""
    for name, t in tensors.items():
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise UsageError(
                f"{path}: {name} has {bad} non-finite value{'s' * (bad != 1)} (NaN or Inf) of "
                f"{t.numel()}; frozen weights must be finite",
                hint="fix or re-export the checkpoint",
            )


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
        weights = load_checkpoint(weights_path, module)
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


def model_record(model: ModelSpec, net: MaskedNet) -> dict:
    """The ticket's `model` field: the spec, for a user's factory every parameter's name and shape, and for a
    network with BatchNorm how evaluation gets its statistics (batchnorm.RECORD)."""
    record = model.to_dict()
    if model.arch == "user":
        record["parameters"] = net.param_shapes()
        record["masked"] = list(net.names)
    if net.batchnorms:
        record["batchnorm"] = {**batchnorm.RECORD, "batch_size": net.calibration_batch}
    return record


def batchnorm_convention(record: dict, net: MaskedNet, path: Path) -> None:
    """Set up net's BatchNorm as the ticket was evaluated: recalibrated as recorded, or, for tickets written
    before the record existed, the module's own statistics ("frozen")."""
    stored = record.get("batchnorm")
    if stored is None:
        if net.batchnorms:
            net.bn_statistics = "frozen"
        return
    if not net.batchnorms:
        raise TicketFileError(
            f"{path}: the ticket records BatchNorm statistics but model {record.get('spec')} has no BatchNorm layer"
        )
    try:
        net.calibration_batch = batchnorm.read_record(stored)
    except ValueError as e:
        raise TicketFileError(f"{path}: {e}") from None


def check_user_model(model: ModelSpec, record: dict, net: MaskedNet, path: Path) -> None:
    """Refuse a factory whose parameter names or shapes differ from those the ticket recorded."""
    if model.arch != "user":
        return
    stored = record.get("parameters")
    if not isinstance(stored, dict):
        raise TicketFileError(f"{path}: model {model.to_string()} lacks its recorded 'parameters'")
    now = net.param_shapes()
    missing, extra = sorted(set(stored) - set(now)), sorted(set(now) - set(stored))
    wrong = [f"{n} {stored[n]} -> {now[n]}" for n in stored if n in now and list(stored[n]) != now[n]]
    if missing or extra or wrong or record.get("masked", net.names) != net.names:
        detail = "; ".join(
            f"{k}: {', '.join(v)}"
            for k, v in (("missing", missing), ("unexpected", extra), ("shape changed", wrong))
            if v
        )
        raise TicketFileError(
            f"{path}: model {model.to_string()} no longer matches the ticket ({detail or 'masked parameters differ'})"
        )


def sparsity_report(masks: dict[str, torch.Tensor], spec: RunSpec, details: dict | None = None) -> dict:
    """Requested vs achieved sparsity, globally and per parameter; for double-scoring the share of kept
    augmented entries that sit on auxiliary coordinates (so a user sees whether the auxiliary scores ever win)."""
    details = details or {}
    stats = mask_stats(masks)
    per = {
        n: {"kept": s["kept"], "total": s["total"], "achieved": 1.0 - s["density"]}
        for n, s in stats["per_param"].items()
    }
    report = {
        "requested": spec.method.sparsity,
        "achieved": 1.0 - stats["density"],
        "kept": stats["kept"],
        "total": stats["total"],
        "per_layer": per,
    }
    if spec.method.layer_densities is not None:
        report["requested_layer_densities"] = list(spec.method.layer_densities)
    if "aug_density" in details:
        report["aug_density"] = details["aug_density"]
    aux = details.get("aux")
    if aux:
        for n, a in aux.items():
            per[n]["aux_share"] = a["aux_kept"] / a["aug_kept"] if a["aug_kept"] else 0.0
        aug_kept = sum(a["aug_kept"] for a in aux.values())
        report["aux_share"] = sum(a["aux_kept"] for a in aux.values()) / aug_kept if aug_kept else 0.0
    if spec.method.project_final:
        report["projected"] = True  # aux shares describe the trained augmented selection before projection
    if "rounds" in details:
        report["rounds"] = details["rounds"]
    return report


def run_identity(spec: RunSpec, weights: dict[str, torch.Tensor], device: torch.device) -> dict:
    """Everything that decides an extraction's masks, for refusing to resume a checkpoint of another run."""
    data = {k: getattr(spec.data, k) for k in ("name", "n_extract", "n_val", "split_seed")}
    identity = {
        "model": spec.model.to_dict(),
        "init": spec.init.to_dict(),
        "data": data,
        "method": spec.method.to_dict(),
        "weights_sha256": fingerprint(weights),
        "device": str(device),
        "torch": torch.__version__,
    }
    world = distributed.world()
    if world.active:  # the reduction order depends on the process count; each rank has its own cuda:N
        identity.update(device=device.type, processes=world.size)
    return identity


def trained_metrics(net: MaskedNet, method, masks: dict, splits: Splits) -> dict | None:
    """For sparse-training methods: accuracy of their trained sparse network (for information, not the ticket)."""
    trained = getattr(method, "trained_weights", None)
    if trained is None:
        return None
    net.load_weights(trained)
    return {
        "test": evaluate(net, masks, splits.x_test, splits.y_test),
        "val": evaluate(net, masks, splits.x_val, splits.y_val),
        "note": "trained weights under the final mask, for information; the ticket is the rewound mask",
    }


def methods_with(capability: str) -> str:
    """The methods whose class sets this flag (data_parallel, resumable), for a refusal's hint."""
    return ", ".join(n for n in METHODS.names() if getattr(METHODS.get(n), capability, False))


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
    ticket_io.check_destination(out, overwrite=overwrite)  # fail before the work, not after
    if checkpoint_every is not None:
        ticket_io.check_destination(checkpoint_path(out), overwrite=True)  # replaced every N epochs
    device = resolve_device(spec.device)
    world = distributed.world()
    method = METHODS.get(spec.method.name)()
    if world.active and not getattr(method, "data_parallel", False):
        raise UsageError(
            f"method {spec.method.name!r} does not run data-parallel under torchrun",
            hint=f"run it as a single process; under torchrun use: {methods_with('data_parallel')}",
        )
    if (checkpoint_every is not None or resume) and not getattr(method, "resumable", False):
        raise UsageError(
            f"--checkpoint-every and --resume do not apply to method {spec.method.name!r}",
            hint=f"they apply to: {methods_with('resumable')}",
        )
    net, weights, checkpoint = build_net(spec.model, spec.init, spec.weights, spec.max_params)
    splits = load_splits(spec.data)
    check_input_shape(spec.model, splits, net)
    net.to(device)
    splits = splits.to(device)
    net.calibration = splits.x_extract  # BatchNorm's evaluation statistics come from the extraction split
    saver = None
    if checkpoint_every is not None or resume:
        # every rank resumes from the checkpoint; only rank 0 writes it
        saver = Checkpointer(
            checkpoint_path(out),
            every=checkpoint_every if world.main else None,
            identity=run_identity(spec, weights, device),
            resume=resume,
        )

    t0 = time.perf_counter()
    masks = method.extract(
        net,
        splits,
        spec.method,
        device=device,
        generator=generator(spec.init.seed, "method"),
        progress=progress,
        **({"checkpoint": saver} if saver is not None else {}),
    )
    wall = time.perf_counter() - t0

    details = getattr(method, "details", None) or {}  # what the method found beyond the masks
    masks = {n: masks[n].to(device) for n in net.names}
    distributed.check_identical(masks, "the final masks")  # under torchrun only
    trained = trained_metrics(net, method, masks, splits)
    net.load_weights(weights)  # rewind: the ticket is always evaluated on the original initialisation
    metrics = {
        "test": evaluate(net, masks, splits.x_test, splits.y_test),
        "val": evaluate(net, masks, splits.x_val, splits.y_val),
        "device": str(device),
        "wall_time_s": wall,
    }
    if world.active:
        metrics["processes"] = world.size
    if spec.method.precision != "fp32":
        metrics["precision"] = spec.method.precision  # of training; the accuracies above are always fp32
    if trained is not None:
        metrics["trained"] = trained
    data_meta = {k: v for k, v in splits.info.items() if k != "source"}
    tk = ticket_io.Ticket(
        masks={n: m.cpu() for n, m in masks.items()},
        model=model_record(spec.model, net),
        init=spec.init.to_dict(),
        weights_sha256=fingerprint(weights),
        method={
            **spec.method.to_dict(),
            "score_init": method.score_init,
            **({"score_params": details["score_params"]} if "score_params" in details else {}),
        },
        data=data_meta,
        sparsity=sparsity_report(masks, spec, details),
        metrics=metrics,
        created_by={"ticketcli": ticketcli.__version__, "torch": torch.__version__},
        checkpoint=checkpoint,
    )
    size = None
    if world.main:  # under torchrun only rank 0 writes; every rank holds the same masks (checked above)
        size = ticket_io.save(tk, out, overwrite=overwrite)
        if saver is not None:
            saver.remove()
    return {
        "ticket": str(out),
        "file_bytes": size,
        "method": spec.method.name,
        "seed": spec.init.seed,
        "model": spec.model.to_string(),
        "data": {**data_meta, "source": splits.info["source"]},
        "sparsity": tk.sparsity,
        "metrics": metrics,
        **({"score_params": details["score_params"]} if "score_params" in details else {}),
    }


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


def check_planned(tk: ticket_io.Ticket, model: ModelSpec, path: Path, max_params: int) -> None:
    """Before anything real is built: the model's size against max_params and its masked parameters' names and
    shapes against the ticket's (a built-in model on the meta device; a factory by what the ticket recorded)."""
    if model.arch == "user":
        recorded = tk.model.get("parameters") or tk.shapes
        check_param_count(model, sum(math.prod(s) for s in recorded.values()), max_params)
        return
    try:
        planned = planned_shapes(model, max_params)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}", hint=e.hint) from None
    if planned != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} ({shape_difference(tk.shapes, planned)})"
        )


def shape_difference(ticket: dict[str, list[int]], model: dict[str, list[int]]) -> str:
    """The first difference between a ticket's shapes and a model's, for a one-line error."""
    missing, extra = [n for n in model if n not in ticket], [n for n in ticket if n not in model]
    if missing or extra:
        return (
            f"the model has {len(model)} masked parameters, the ticket {len(ticket)}; first missing: "
            f"{(missing or ['-'])[0][:80]}, first unexpected: {(extra or ['-'])[0][:80]}"
        )
    name = next(n for n in model if model[n] != ticket[n])
    return f"{name[:80]}: ticket {ticket[name]}, model {model[name]}"


CHECKPOINT_BYTES_PER_PARAM = 16  # float64 values and the container's overhead: a bigger file is no checkpoint here


def recorded_checkpoint(tk: ticket_io.Ticket, path: Path, max_params: int) -> str:
    """The checkpoint path the ticket recorded, followed only to a plain file of a checkpoint's size: a ticket must
    not make a reader hash /proc/self/pagemap (size 0, endless) or any file of hundreds of GB."""
    stored = tk.checkpoint.get("path") if tk.checkpoint else None
    try:
        size = Path(stored).stat().st_size if stored and Path(stored).is_file() else None
    except OSError:
        size = None
    if size is None:
        raise UsageError(f"{path} was extracted from checkpoint weights; pass them with --weights FILE")
    if not 0 < size <= CHECKPOINT_BYTES_PER_PARAM * max_params:
        raise UsageError(
            f"{path} records the checkpoint {stored[:80]}, a file of {size} bytes, which cannot be it",
            hint="pass the checkpoint with --weights FILE",
        )
    return stored


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
    check_planned(tk, model, path, policy.max_params)
    init = InitSpec(scheme=tk.init["scheme"], k=float(tk.init["k"]), seed=tk.init["seed"])
    if tk.checkpoint is not None:
        weights_path = weights_path or recorded_checkpoint(tk, path, policy.max_params)
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
    check_user_model(model, tk.model, net, path)
    batchnorm_convention(tk.model, net, path)
    if net.shapes() != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} "
            f"({shape_difference(tk.shapes, net.shapes())})"
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
    stored = tk.metrics
    reproduced = (
        stored.get("test", {}).get("correct") == test["correct"]
        and stored.get("val", {}).get("correct") == val["correct"]
    )
    return {
        "ticket": str(path),
        "method": tk.method.get("name"),
        "model": tk.model["spec"],
        "seed": tk.init["seed"],
        "device": str(dev),
        "test": test,
        "val": val,
        "stored": {
            "test_accuracy": stored.get("test", {}).get("accuracy"),
            "val_accuracy": stored.get("val", {}).get("accuracy"),
            "device": stored.get("device"),
        },
        "reproduced": reproduced,
        "sparsity": {"requested": tk.sparsity.get("requested"), "achieved": tk.sparsity.get("achieved")},
        "integrity": tk.integrity,
    }


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
