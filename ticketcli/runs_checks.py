"""Boundary checks of a run's inputs: a weights file against the model it must fit, a ticket against the network
rebuilt for it (names, shapes, BatchNorm convention, recorded checkpoint), and the method against what the run
asks of it (torchrun, checkpoints). Each refusal is one line."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch

from ticketcli import batchnorm, budget, distributed
from ticketcli.budget import Budget
from ticketcli.checkpoint import read_torch_file, recorded_locations
from ticketcli.data import DATASETS, Splits
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.methods import METHODS, Method
from ticketcli.models.build import check_param_count, planned_shapes
from ticketcli.models.masked import MaskedNet
from ticketcli.seeding import file_sha256
from ticketcli.specs import ModelSpec
from ticketcli.ticketfile import ticket as ticket_io


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


def check_planned(tk: ticket_io.Ticket, model: ModelSpec, path: Path, limits: Budget) -> None:
    """Before anything real is built: the model's size against the budget and its masked parameters' names and
    shapes against the ticket's (a built-in model from its spec, then on the meta device; a factory by what the
    ticket recorded). A built-in model's masks hold exactly its parameters: a count that differs is refused as
    different shapes before the budget is weighed."""
    if model.arch == "user":
        recorded = tk.model.get("parameters") or tk.shapes
        check_param_count(model, sum(math.prod(s) for s in recorded.values()), limits.max_params)
        return
    try:
        est = budget.estimate(model)
        assert est is not None  # a built-in model
        check_param_count(model, est.params, limits.max_params)
        bits = sum(math.prod(s) for s in tk.shapes.values())
        if bits != est.params:
            raise TicketFileError(
                f"{path}: mask shapes do not match model {model.to_string()[:80]} (the masks hold {bits:,} "
                f"weights, the model has {est.params:,} parameters)"
            )
        planned = planned_shapes(model, limits)
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
CHECKPOINT_SLACK = 1 << 20  # headers, names and a user model's buffers (norm statistics) beside the parameters


def checkpoint_bound(tk: ticket_io.Ticket, max_params: int) -> int:
    """The largest file that can hold the weights of the model the ticket describes (its recorded parameters, or
    its masks' shapes, which check_planned matched to the model), never more than max_params allow."""
    recorded = tk.model.get("parameters") if isinstance(tk.model.get("parameters"), dict) else None
    n = sum(math.prod(s) for s in (recorded or tk.shapes).values())
    return CHECKPOINT_BYTES_PER_PARAM * min(n, max_params) + CHECKPOINT_SLACK


def recorded_checkpoint(tk: ticket_io.Ticket, path: Path, max_params: int) -> str:
    """The checkpoint the ticket recorded, looked for next to the ticket first, then where the path points from
    here (checkpoint.recorded_locations). It is followed only to a plain file of a checkpoint's size: a ticket
    must not make a reader hash /proc/self/pagemap (size 0, endless) or any file of hundreds of GB."""
    stored = (
        tk.checkpoint.get("path") if tk.checkpoint else None
    )  # a string when present (ticketfile/meta.py checks it)
    if not isinstance(stored, str) or not stored:
        raise UsageError(f"{path} was extracted from checkpoint weights; pass them with --weights FILE")
    places = recorded_locations(stored, path)
    found, size = None, None
    for place in places:
        try:
            if place.is_file():
                found, size = place, place.stat().st_size
                break
        except OSError:  # a name too long, a loop of links: not there
            continue
    if found is None or size is None:
        shown = [str(p)[:120] for p in places]
        where = f"not at {shown[0]}" if len(shown) == 1 else f"neither next to it ({shown[0]}) nor at {shown[1]}"
        raise UsageError(
            f"{path} was extracted from the checkpoint {stored[:120]}, which is {where}",
            hint="keep the checkpoint where the ticket records it, or pass it with --weights FILE",
        )
    if not 0 < size <= checkpoint_bound(tk, max_params):
        raise UsageError(
            f"{path} records the checkpoint {stored[:80]}, a file of {size} bytes, which cannot be it",
            hint="pass the checkpoint with --weights FILE",
        )
    return str(found)


def checkpoint_file(tk: ticket_io.Ticket, path: Path, given: str | None, max_params: int) -> str:
    """The weights file of a checkpoint ticket: --weights when given, else the one the ticket recorded; either
    way its sha256 (streamed in 1 MiB chunks) must be the recorded one."""
    assert tk.checkpoint is not None
    weights = given or recorded_checkpoint(tk, path, max_params)
    if not Path(weights).is_file():
        raise UsageError(f"--weights {weights[:120]}: no such file", hint="pass the ticket's checkpoint")
    size, bound = Path(weights).stat().st_size, checkpoint_bound(tk, max_params)
    if size > bound:  # hashing it would read all of it: far more than this model's weights can take
        raise UsageError(
            f"--weights {weights[:120]} is a file of {size} bytes, more than the {bound} bytes the weights of "
            f"{tk.model.get('spec', 'the model')[:80]} can take",
            hint="pass the ticket's checkpoint",
        )
    recorded = tk.checkpoint.get("sha256")  # absent only in hand-made tickets: the weights fingerprint still checks
    digest = None if recorded is None else file_sha256(weights)
    if digest != recorded:
        raise TicketFileError(
            f"{weights[:120]} is not the checkpoint this ticket was extracted from (sha256 differs: file "
            f"{str(digest)[:12]}..., ticket {str(recorded)[:12]}...)"
        )
    return weights


def method_for_run(name: str, *, checkpointing: bool) -> type[Method]:
    """The method class, refused under torchrun unless data-parallel and with checkpoint options unless resumable."""
    method = METHODS.get(name)
    if distributed.world().active and not method.data_parallel:
        raise UsageError(
            f"method {name!r} does not run data-parallel under torchrun",
            hint=f"run it as a single process; under torchrun use: {methods_where(lambda m: m.data_parallel)}",
        )
    if checkpointing and not method.resumable:
        raise UsageError(
            f"--checkpoint-every and --resume do not apply to method {name!r}",
            hint=f"they apply to: {methods_where(lambda m: m.resumable)}",
        )
    return method


def methods_where(test: Callable[[type[Method]], bool]) -> str:
    """The registered methods whose class passes `test`, for a refusal's hint."""
    return ", ".join(n for n in METHODS.names() if test(METHODS.get(n)))


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
