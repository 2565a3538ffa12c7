"""The Method contract: a method only produces masks; weights are rewound to the init before every evaluation."""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypedDict

import torch

from ticketcli.data.datasets import Splits
from ticketcli.files.checkpoint import Checkpointer
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import Group, Scope, scope_groups
from ticketcli.selection.structure import Pattern, pattern_of
from ticketcli.specs.run import MethodSpec

# Called after each epoch with {"epoch", "epochs", "loss", "accuracy", "sparsity"} (and "round", "rounds").
Progress = Callable[[dict[str, Any]], None]
Masks = dict[str, torch.Tensor]  # param name -> bool mask of the parameter's shape
Trained = Literal["scores", "weights"]


def dense_masks(net: MaskedNet) -> Masks:
    """Every entry kept: where iterative pruning (IMP, SynFlow) starts."""
    return {n: torch.ones_like(net.weights[n], dtype=torch.bool) for n in net.names}


class Details(TypedDict, total=False):
    """What a run found beyond its masks; runs/record.py records these in the ticket and its summary."""

    aux: dict[str, dict[str, int]]  # double-scoring: per parameter, kept augmented entries and how many are auxiliary
    aug_density: float  # augmented: the keep density in the augmented space
    rounds: list[dict[str, Any]]  # iterated: per round, its augmented density and the achieved sparsity
    score_params: dict[str, int]  # score methods: trainable and total score tensors per weight


@dataclass(frozen=True)
class ExtractResult:
    """Everything one extraction returns."""

    masks: Masks
    details: Details = field(default_factory=lambda: Details())
    trained_weights: dict[str, torch.Tensor] | None = None  # the trained sparse network (weight trainers only)
    # the method's intermediate states, for tests and analysis, never written to a ticket: "round_masks" (iterated,
    # imp), "updates" (set, rigl), "densities" and "final_scores" (movement)
    trace: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What an extraction runs with beside the network, data and spec: its device, the generator of every random
    draw, the progress callback, and a resumable method's checkpoint (only with --checkpoint-every or --resume)."""

    device: torch.device
    generator: torch.Generator
    progress: Progress | None
    checkpoint: Checkpointer | None = None


class Method(ABC):
    """One extraction method: declared capabilities plus `masks_for`, which `extract` runs.

    Adding a method is one file of at most ~150 lines plus one registry line: write a subclass in
    ticketcli/methods/<family>.py that sets every class attribute below and implements `masks_for`, and register it
    in ticketcli/methods/registry.py (its name, one-line description and "ticketcli.methods.<family>:<Class>",
    imported only when the method is used). Nothing else changes: --method's choices and `ticket list` come from
    the registry, and the refusal of options it does not read, --resume and --checkpoint-every, torchrun and the
    progress bar follow these attributes (tests/test_method_contract.py checks that every method declares them).
    The options it reads besides name and sparsity are declared in its registry entry: the shared settings it reads
    (`reads`, e.g. WEIGHTS) and its own hyper-parameters (`options`, each an `Option`, read in `masks_for` as
    methods.registry.option(spec, name)); the others are refused when a user sets them and left out of its tickets.
    """

    name: ClassVar[str]  # the registry name, recorded in the ticket
    trains: ClassVar[frozenset[Trained]]  # what it trains: scores, weights (then trained_weights is set), or nothing
    resumable: ClassVar[bool]  # honours extract(checkpoint=...): saves and resumes bit-identically
    data_parallel: ClassVar[bool]  # runs under torchrun (each rank gives the same masks)
    uses_epochs: ClassVar[bool]  # reports progress per epoch (else no progress bar is shown)
    seeded: ClassVar[bool]  # the generator changes its masks (False: deterministic given the weights)
    # how it thresholds unless --global-topk or --layer-densities say otherwise: one top-k over all parameters or one
    # per parameter (selection.groups.scope_groups reads it)
    default_scope: ClassVar[Scope]
    score_init: ClassVar[dict[str, str] | None]  # how trained scores start (recorded in the ticket); else None

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
        """The masks for `net` (weights frozen) from `data`; random draws only from `generator`.

        `checkpoint` is given only to a resumable method, and only with --checkpoint-every or --resume."""
        return self.masks_for(net, data, spec, Context(device, generator, progress, checkpoint))

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        """extract's work, with its other arguments in one record: what a method implements (or extract itself)."""
        raise NotImplementedError

    def groups(self, net: MaskedNet, spec: MethodSpec, density: float | None = None) -> list[Group]:
        """The groups its top-k runs over: per layer or global by its default_scope (selection.groups.scope_groups);
        `density`: its own keep density instead of the requested one and --layer-densities."""
        return scope_groups(net, spec, self.default_scope, density)

    @staticmethod
    def pattern(spec: MethodSpec) -> Pattern | None:
        """The structure every selection step keeps (--structure, --block), or None: unstructured."""
        return pattern_of(spec.options)
