"""Masks on any nn.Module through torch.nn.utils.parametrize: `layer.weight` reads W * M, so an ordinary forward
pass, state_dict(), torch.save, hooks, torch.compile and fine-tuning all see the masked network, while the
original W stays a parameter (gradients reach it; masked entries get exactly zero)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize, prune

from ticketcli.errors import UsageError
from ticketcli.models import masked_names


class Mask(nn.Module):
    """The parametrization W -> W * M; M is a bool buffer (in state_dict: `<layer>.parametrizations.<name>.0.mask`)."""

    mask: torch.Tensor

    def __init__(self, mask: torch.Tensor):
        super().__init__()
        self.register_buffer("mask", mask.detach().to(torch.bool).clone())

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        """W * M: the same product MaskedNet uses, so the logits agree bit for bit."""
        return weight * self.mask.to(weight.dtype)


def _few(names: list[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def check_masks(module: nn.Module, masks: Mapping[str, torch.Tensor], *, strict: bool = True) -> None:
    """Every mask names a parameter of `module` of its shape and, with strict, every Linear/Conv2d parameter has
    a mask (the ones a ticket masks): otherwise one UsageError line naming the first offenders."""
    if any(getattr(m, "parametrizations", None) for m in module.modules()):
        raise UsageError("the module already carries masks or other parametrizations; remove_masks(module) first")
    params = dict(module.named_parameters())
    missing = [n for n in masks if n not in params]
    if missing:
        raise UsageError(f"the module has no parameter {_few(missing)} (masks name {len(masks)} parameters)")
    wrong = [
        f"{n} {list(masks[n].shape)} vs {list(params[n].shape)}" for n in masks if masks[n].shape != params[n].shape
    ]
    if wrong:
        raise UsageError(f"mask shapes differ from the module's parameters: {_few(wrong)}")
    uncovered = [n for n in masked_names(module) if n not in masks]
    if strict and uncovered:
        raise UsageError(
            f"no mask for the module's Linear/Conv2d parameter {_few(uncovered)}",
            hint="pass strict=False to leave them unmasked",
        )


def apply_masks(module: nn.Module, masks: Mapping[str, torch.Tensor], *, strict: bool = True) -> nn.Module:
    """Register each mask on the parameter it names (W -> W * M, torch.nn.utils.parametrize); returns `module`.

    Names are parameter names as in `module.named_parameters()` ("layers.0.weight"); masks are bool (or 0/1)
    tensors of the parameters' shapes. strict: every Linear/Conv2d parameter must get one."""
    check_masks(module, masks, strict=strict)
    owners = dict(module.named_modules())
    for name, mask in masks.items():
        owner, _, attr = name.rpartition(".")
        param = getattr(owners[owner], attr)
        parametrize.register_parametrization(owners[owner], attr, Mask(mask.to(param.device)))
    return module


def remove_masks(module: nn.Module, *, bake: bool = True) -> nn.Module:
    """Take the masks off again; bake=True leaves W * M as the plain parameter, bake=False restores W."""
    for owner in list(module.modules()):
        for attr in list(getattr(owner, "parametrizations", {})):
            parametrize.remove_parametrizations(owner, attr, leave_parametrized=bake)
    return module


def load_pruned(module: nn.Module, state: Mapping[str, torch.Tensor] | str | Path) -> nn.Module:
    """Load a `ticket export --format prune` state dict (or file) into a plain module of the same architecture.

    That layout is torch.nn.utils.prune's (`<name>_orig` and the `<name>_mask` buffer), which a plain module lacks:
    each of them is prepared with prune.identity first, then the state is loaded strictly; returns `module`."""
    if isinstance(state, (str, Path)):
        state = _read_state(Path(state))
    owners = dict(module.named_modules())
    pruned = [k[: -len("_orig")] for k in state if k.endswith("_orig") and f"{k[: -len('_orig')]}_mask" in state]
    for name in pruned:
        owner, _, attr = name.rpartition(".")
        if owner not in owners or not isinstance(getattr(owners[owner], attr, None), nn.Parameter):
            raise UsageError(f"the module has no parameter {name} for the export's {name}_orig")
        prune.identity(owners[owner], attr)
    try:
        module.load_state_dict(dict(state))
    except RuntimeError as e:  # missing or unexpected keys, wrong shapes: torch's message says which
        raise UsageError(f"the prune export does not fit this module: {' '.join(str(e).split())[:300]}") from None
    return module


def _read_state(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(loaded, dict):
        raise UsageError(f"{path} does not hold a state dict")
    return loaded
