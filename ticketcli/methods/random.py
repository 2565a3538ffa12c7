"""`random`: a seeded random mask, exactly floor(density * n) entries kept per parameter."""

from __future__ import annotations

import torch

from ticketcli.checkpoint import Checkpointer
from ticketcli.data import Splits
from ticketcli.masking import keep_count, topk_mask
from ticketcli.methods.base import ExtractResult, Method, Progress, param_densities
from ticketcli.methods.registry import METHODS
from ticketcli.models import MaskedNet
from ticketcli.specs import MethodSpec


@METHODS.register("random")
class RandomMask(Method):
    name = "random"
    options = frozenset({"layer_densities"})
    trains = frozenset()
    resumable = True  # one draw, no epochs: nothing to checkpoint, so resuming is just running again
    data_parallel = True  # the same draw on every rank
    uses_epochs = False
    seeded = True
    global_topk = False  # per layer
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
        densities = param_densities(net, spec)
        masks = {}
        for name in net.names:
            w = net.weights[name]
            r = torch.rand(w.shape, generator=generator)  # CPU draw: same bits on any device
            masks[name] = topk_mask(r, keep_count(densities[name], w.numel())).to(device)
        return ExtractResult(masks)
