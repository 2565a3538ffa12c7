"""A model spec to a frozen nn.Module: the built-in models through MODELS, a user's factory through user.py, and
the budget every built-in model passes before it is built (`planned_shapes`, on the meta device)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models import budget
from ticketcli.models.masked import masked_names
from ticketcli.models.registry import MODELS
from ticketcli.models.user import build_user_model
from ticketcli.specs.run import ModelSpec


def build_model(spec: ModelSpec) -> nn.Module:
    """An nn.Module for the spec, in eval mode, parameters frozen (values come from init.py or a checkpoint).

    Built-in builders compute no tensor values from data, so `with torch.device("meta"): build_model(spec)` counts
    parameters and checks shapes without allocating."""
    if spec.arch == "user" and spec.factory is not None:
        net = build_user_model(spec.factory, spec.classes)
        if not masked_names(net):
            raise UsageError(f"model {spec.factory} has no nn.Linear or nn.Conv2d parameters to mask")
    else:
        net = MODELS.get(spec.arch).builder()(spec)
    return _frozen(net)


def frozen_copy(module: nn.Module) -> nn.Module:
    """A caller's own module (the Python API) as build_model would return it: a copy, frozen, in eval mode."""
    if not masked_names(module):
        raise UsageError(f"model {type(module).__name__} has no nn.Linear or nn.Conv2d parameters to mask")
    return _frozen(copy.deepcopy(module).cpu())


def _frozen(net: nn.Module) -> nn.Module:
    for p in net.parameters():
        p.requires_grad_(False)
    return net.eval()  # BatchNorm's mode is set per forward pass by MaskedNet (batchnorm.py); no dropout anywhere


def planned_shapes(spec: ModelSpec, limits: budget.Budget) -> dict[str, list[int]]:
    """A built-in model's masked parameter shapes, worked out on the meta device (nothing is allocated, whatever
    the spec says), once its cost worked out from the spec alone fits the budget (budget.check): every built-in
    model is built through here first, so nothing over the budget is ever built, not even on the meta device."""
    budget.check(spec, limits)
    with torch.device("meta"):
        module = MODELS.get(spec.arch).builder()(spec)
    budget.check_param_count(spec, sum(p.numel() for p in module.parameters()), limits.max_params)
    shapes = dict(module.named_parameters())
    return {n: list(shapes[n].shape) for n in masked_names(module)}
