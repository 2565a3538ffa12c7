"""`random`: a seeded random mask, exactly floor(density * n) entries kept per parameter."""

from __future__ import annotations

import torch

from ticketcli.data.datasets import Splits
from ticketcli.methods.base import Context, ExtractResult, Masks, Method
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import Group, select
from ticketcli.selection.structure import Pattern
from ticketcli.specs.run import MethodSpec


def random_masks(
    net: MaskedNet,
    groups: list[Group],
    generator: torch.Generator,
    device: torch.device,
    pattern: Pattern | None = None,
) -> Masks:
    """floor(density * n) entries of each group kept at random (also where SET and RigL start): the top-k of
    uniform draws made on the CPU, so the same bits on any device; under a `pattern`, its masks of those draws."""
    draws = {n: torch.rand(net.weights[n].shape, generator=generator) for n in net.names}
    return {n: m.to(device) for n, m in select(draws, groups, pattern=pattern).items()}


class RandomMask(Method):
    name = "random"
    trains = frozenset()
    resumable = True  # one draw, no epochs: nothing to checkpoint, so resuming is just running again
    data_parallel = True  # the same draw on every rank
    uses_epochs = False
    seeded = True
    default_scope = "layer"
    score_init = None

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        return ExtractResult(random_masks(net, self.groups(net, spec), ctx.generator, ctx.device, self.pattern(spec)))
