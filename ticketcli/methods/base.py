"""The Method interface: a method only produces masks; weights are rewound before every evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from ticketcli.data import Splits
from ticketcli.errors import UsageError
from ticketcli.models import MaskedNet
from ticketcli.specs import MethodSpec

# Called after each epoch with {"epoch", "epochs", "loss", "accuracy", "sparsity"}.
Progress = Callable[[dict], None]


class Method(Protocol):
    name: str
    score_init: dict | None  # how scores are initialised (recorded in the ticket); None for score-free methods

    def extract(
        self,
        net: MaskedNet,
        data: Splits,
        spec: MethodSpec,
        *,
        device: torch.device,
        generator: torch.Generator,
        progress: Progress | None,
    ) -> dict[str, torch.Tensor]:
        """Return param name -> bool mask (same shape as the parameter)."""
        ...


def param_densities(net: MaskedNet, spec: MethodSpec) -> dict[str, float]:
    """Keep density per masked parameter: --layer-densities (one per layer) or 1 - sparsity everywhere."""
    if spec.layer_densities is None:
        return {n: spec.density for n in net.names}
    layers = net.layers()
    if len(spec.layer_densities) != len(layers):
        raise UsageError(
            f"--layer-densities has {len(spec.layer_densities)} values but the model has "
            f"{len(layers)} layers ({', '.join(layers)})"
        )
    return {n: d for d, names in zip(spec.layer_densities, layers.values()) for n in names}
