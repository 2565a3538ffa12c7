"""`random`: a seeded random mask, exactly floor(density * n) entries kept per parameter."""

from __future__ import annotations

import torch

from ticketcli.checkpoint import Checkpointer
from ticketcli.data import Splits
from ticketcli.methods.base import ExtractResult, Method, Progress
from ticketcli.methods.registry import METHODS
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import scope_groups, select
from ticketcli.specs import MethodSpec


@METHODS.register("random")
class RandomMask(Method):
    name = "random"
    trains = frozenset()
    resumable = True  # one draw, no epochs: nothing to checkpoint, so resuming is just running again
    data_parallel = True  # the same draw on every rank
    uses_epochs = False
    seeded = True
    default_scope = "layer"
    score_init = None

    def extract(
        self,
        net: MaskedNet,
        data: Splits,
        spec: MethodSpec,
        *,
        device: torch.device,
        generator: torch.Generator,
        progress: Progress | None,
        checkpoint: Checkpointer | None = None,
    ) -> ExtractResult:
        groups = scope_groups(net, spec, self.default_scope)
        draws = {n: torch.rand(net.weights[n].shape, generator=generator) for n in net.names}  # CPU: same bits anywhere
        return ExtractResult({n: m.to(device) for n, m in select(draws, groups).items()})
