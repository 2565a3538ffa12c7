"""Masks on any nn.Module in torch.nn.utils.prune's layout: the frozen W becomes `<name>_orig`, the mask a
`<name>_mask` buffer, and a forward pre-hook sets `<name>` = W * M before every forward pass. So an ordinary
forward pass, state_dict() (the layout `ticket export --format prune` writes), torch.save of the whole module,
hooks and fine-tuning all see the masked network, and gradients reach W with masked entries exactly zero.

Masks multiply the weights a module holds. A ticket's masks (`TicketMasks`, what `Ticket.masks` returns) carry the
fingerprint of the weights they were selected on, and apply_masks refuses a module whose weights are not those,
unless told to mask them anyway (check_weights=False); `Ticket.apply` puts the ticket's weights and masks on a
module."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import cast

import torch
from torch import nn
from torch.nn.utils import prune

from ticketcli.api.keywords import speaks_keywords
from ticketcli.errors import UsageError
from ticketcli.files.bounded import read_regular_file
from ticketcli.files.checkpoint import first_sentence, read_torch_file
from ticketcli.models.masked import masked_names
from ticketcli.seeding import fingerprint

STATE_BYTES_PER_PARAM = 16  # a prune export holds W (float32, or float64) and its mask: a bigger file is not one
STATE_SLACK = 1 << 20  # names, headers and the module's buffers

# torch.nn.utils.prune is untyped: the three functions used here, behind typed casts
_custom_from_mask = cast(Callable[[nn.Module, str, torch.Tensor], nn.Module], prune.custom_from_mask)
_remove = cast(Callable[[nn.Module, str], nn.Module], prune.remove)
_identity = cast(Callable[[nn.Module, str], nn.Module], prune.identity)


class TicketMasks(dict[str, torch.Tensor]):
    """A ticket's masks (parameter name -> bool mask, an ordinary dict) that also know the weights they belong to:
    `weights_sha256`, the ticket's weights fingerprint (seeding.fingerprint: float32 bytes of `weight_names`'
    parameters in that order), which apply_masks checks a module against. A plain dict made from them (dict(...),
    a comprehension) is only masks, and apply_masks cannot check it."""

    def __init__(self, masks: Mapping[str, torch.Tensor], weights_sha256: str, weight_names: tuple[str, ...]):
        super().__init__(masks)
        self.weights_sha256 = weights_sha256
        self.weight_names = weight_names


WEIGHTS_HINT = (
    "ticket.apply(module) puts the ticket's weights and masks on it; "
    "apply_masks(module, masks, check_weights=False) masks the module's own weights"
)


def check_weights_of(module: nn.Module, masks: TicketMasks) -> None:
    """Refuse (one UsageError line) a module whose weights are not those the ticket's masks were selected on: its
    parameters' fingerprint, over the ticket's parameter names in the ticket's order, differs from the ticket's."""
    params = dict(module.named_parameters())
    missing = [n for n in masks.weight_names if n not in params]
    if missing:
        raise UsageError(
            f"the module lacks the ticket's parameter {_few(missing)}, so its weights are not the ticket's",
            hint=WEIGHTS_HINT,
        )
    fp = fingerprint({n: params[n] for n in masks.weight_names})
    if fp != masks.weights_sha256:
        raise UsageError(
            f"the module's weights are not the ticket's (fingerprint {fp[:12]}, ticket {masks.weights_sha256[:12]}): "
            "its masks would select from other weights than those they were chosen on",
            hint=WEIGHTS_HINT,
        )


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def check_module(module: object) -> nn.Module:
    """The caller's module, or one UsageError line when it is something else."""
    if not isinstance(module, nn.Module):
        raise UsageError(f"expected a torch.nn.Module, got {type(module).__name__}")
    return module


def check_tensors(value: object, what: str) -> Mapping[str, torch.Tensor]:
    """A mapping of names to tensors (masks, a state dict), or one UsageError line saying what is wrong."""
    if not isinstance(value, Mapping):
        raise UsageError(f"{what} must be a dict of parameter names to tensors, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(k, str):
            raise UsageError(f"{what}: the key {str(k)[:80]!r} is not a parameter name (a string)")
        if not isinstance(v, torch.Tensor):
            raise UsageError(f"{what}: {k[:80]} is a {type(v).__name__}, not a tensor")
    return value


def check_masks(module: nn.Module, masks: Mapping[str, torch.Tensor], *, strict: bool = True) -> None:
    """Every mask names a parameter of `module` of its shape and, with strict, every Linear/Conv2d parameter has
    a mask (the ones a ticket masks): otherwise one UsageError line naming the first offenders."""
    check_module(module)
    check_tensors(masks, "masks")
    if masked(module):
        raise UsageError("the module already carries masks; remove_masks(module) first")
    params = dict(module.named_parameters())
    missing = [n for n in masks if n not in params]
    if missing:
        raise UsageError(f"the module has no parameter {_few(missing)} (masks name {len(masks)} parameters)")
    wrong = [
        f"{n} {list(masks[n].shape)} vs {list(params[n].shape)}" for n in masks if masks[n].shape != params[n].shape
    ]
    if wrong:
        raise UsageError(f"mask shapes differ from the module's parameters: {_few(wrong)}")
    not_binary = [n for n, m in masks.items() if m.dtype != torch.bool and not bool(((m == 0) | (m == 1)).all())]
    if not_binary:
        raise UsageError(f"masks must be bool (or 0/1) tensors: {_few(not_binary)} holds other values")
    uncovered = [n for n in masked_names(module) if n not in masks]
    if strict and uncovered:
        raise UsageError(
            f"no mask for the module's Linear/Conv2d parameter {_few(uncovered)}",
            hint="pass strict=False to leave them unmasked",
        )


def masked(module: nn.Module) -> list[tuple[nn.Module, str]]:
    """(owner, parameter name) of every parameter masked in torch.nn.utils.prune's layout."""
    return [(owner, attr) for owner in module.modules() for attr in _own(owner)]


def _own(owner: nn.Module) -> list[str]:
    """The names of `owner`'s own parameters (not its children's) that carry a mask."""
    hooks = owner._forward_pre_hooks.values()
    return [h._tensor_name for h in hooks if isinstance(h, prune.BasePruningMethod)]


@speaks_keywords("apply_masks")
def apply_masks(
    module: nn.Module, masks: Mapping[str, torch.Tensor], *, strict: bool = True, check_weights: bool = True
) -> nn.Module:
    """Put each mask on the parameter it names (torch.nn.utils.prune.custom_from_mask); returns `module`.

    It multiplies the weights the module holds now and changes no weight: the result is a ticket's network only if
    the module already holds the ticket's weights (`Ticket.apply(module)` copies them in and applies the masks).
    With check_weights (the default) and a ticket's masks (`Ticket.masks`, a TicketMasks), a module whose weights
    are not the ticket's (its weights fingerprint differs) is refused; check_weights=False masks its own weights
    anyway. Plain dicts of masks carry no fingerprint and are applied as they are.

    Names are parameter names as in `module.named_parameters()` ("layers.0.weight"); masks are bool (or 0/1)
    tensors of the parameters' shapes. strict: every Linear/Conv2d parameter must get one."""
    check_masks(module, masks, strict=strict)
    if check_weights and isinstance(masks, TicketMasks):
        check_weights_of(module, masks)
    owners = dict(module.named_modules())
    for name, mask in masks.items():
        owner, _, attr = name.rpartition(".")
        param = getattr(owners[owner], attr)
        # the mask in W's dtype: W * M is then the very product the ticket's own evaluation computes
        _custom_from_mask(owners[owner], attr, mask.to(param.device, torch.bool))
    return module


@speaks_keywords("remove_masks")
def remove_masks(module: nn.Module, *, bake: bool = True) -> nn.Module:
    """Take the masks off again; bake=True leaves W * M as the plain parameter, bake=False restores W."""
    check_module(module)
    for owner, attr in masked(module):
        original = getattr(owner, f"{attr}_orig").detach().clone()
        _remove(owner, attr)
        if not bake:
            with torch.no_grad():
                getattr(owner, attr).copy_(original)
    return module


@speaks_keywords("load_pruned")
def load_pruned(module: nn.Module, state: Mapping[str, torch.Tensor] | str | Path) -> nn.Module:
    """Load a `ticket export --format prune` state dict (or file) into a plain module of the same architecture.

    That layout is torch.nn.utils.prune's (`<name>_orig` and the `<name>_mask` buffer), which a plain module lacks:
    each of them is prepared with prune.identity first (apply_masks leaves a module in that layout already), then
    the state is loaded strictly; returns `module`."""
    check_module(module)
    if isinstance(state, (str, Path)):
        state = _read_state(Path(state), module)
    state = check_tensors(state, "the prune export")
    owners = dict(module.named_modules())
    pruned = [k[: -len("_orig")] for k in state if k.endswith("_orig") and f"{k[: -len('_orig')]}_mask" in state]
    done = {f"{prefix}.{attr}" if prefix else attr for prefix, m in module.named_modules() for attr in _own(m)}
    for name in (n for n in pruned if n not in done):
        owner, _, attr = name.rpartition(".")
        if owner not in owners or not isinstance(getattr(owners[owner], attr, None), nn.Parameter):
            raise UsageError(f"the module has no parameter {name} for the export's {name}_orig")
        _identity(owners[owner], attr)
    try:
        module.load_state_dict(dict(state))
    except RuntimeError as e:  # missing or unexpected keys, wrong shapes: torch's message says which
        raise UsageError(f"the prune export does not fit this module: {' '.join(str(e).split())[:300]}") from None
    return module


def _read_state(path: Path, module: nn.Module) -> Mapping[str, torch.Tensor]:
    """A prune export read like a ticket: a regular file (a FIFO cannot hang it) no bigger than this module's
    weights and masks can take, loaded without running code (weights_only); every failure is one UsageError."""
    n = sum(p.numel() for p in module.parameters()) + sum(b.numel() for b in module.buffers())
    data = read_regular_file(path, STATE_BYTES_PER_PARAM * n + STATE_SLACK, "prune export")
    if path.suffix == ".safetensors":
        from safetensors.torch import load as load_safetensors

        try:
            return load_safetensors(data)
        except Exception as e:  # SafetensorError, and whatever a corrupt file makes the library raise
            raise UsageError(f"cannot read the prune export {path}: {first_sentence(e)}") from None
    loaded = read_torch_file(path, "the prune export", data=data)
    if not isinstance(loaded, dict):
        raise UsageError(f"{path} does not hold a state dict")
    return loaded
