"""Boundary checks of a run's inputs: a weights file against the model it must fit, the method against what the
run asks of it (torchrun, checkpoints), the device, and the data's input shape against the model. Each refusal is
one line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ticketcli.data.datasets import Splits
from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.files.checkpoint import read_torch_file
from ticketcli.methods.base import Method
from ticketcli.methods.registry import METHODS
from ticketcli.models.masked import MaskedNet
from ticketcli.runtime import distributed
from ticketcli.specs.run import ModelSpec


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


def method_for_run(name: str, *, checkpointing: bool) -> type[Method]:
    """The method class, refused under torchrun unless data-parallel and with checkpoint options unless resumable."""
    method = METHODS.get(name).load()
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
    return ", ".join(n for n in METHODS.names() if test(METHODS.get(n).load()))


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
    except (RuntimeError, TypeError):  # TypeError: not a name at all (the Python API takes any object)
        raise UsageError(f"unknown device {str(name)[:80]!r}; use {DEVICES}") from None
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
    if data.y_test.dim() == 2:  # next-character targets (data/lm.py): the model must be a character-level one
        check_text_model(model, data, net)
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


def check_text_model(model: ModelSpec, data: Splits, net: MaskedNet) -> None:
    """A character-level model on text blocks: its context holds a block, its vocabulary the text's characters; its
    logits are then read in (B, V, T) layout (MaskedNet.sequence)."""
    vocab, context = getattr(net.module, "vocab", None), getattr(net.module, "context", None)
    if not isinstance(vocab, int) or not isinstance(context, int):
        raise UsageError(f"model {model.to_string()[:80]} is not a character-level model; --dataset text needs one")
    block, seen = int(data.x_test.shape[1]), int(data.x_test.max())
    if block > context or seen >= vocab:
        raise UsageError(
            f"model {model.to_string()[:80]} (context {context}, vocabulary {vocab}) does not fit the text's blocks "
            f"({block} characters, ids up to {seen})"
        )
    net.sequence = True
