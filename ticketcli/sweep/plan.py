"""sweep-k's plan: every run of a sweep (one task per seed and configuration) in a fixed order.

Per seed: edge-popup at each keep density of the pool, at `layerwise` random per-layer tuples drawn from the seed's
own stream, the fixed target-density baseline, the random mask, and each double-scoring method the registry has.
Every task runs on the seed's shared initialisation and split.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.methods import METHODS
from ticketcli.models.budget import Budget
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.masked import MaskedNet, layer_of
from ticketcli.runs import build as runs_build
from ticketcli.seeding import generator
from ticketcli.settings.sweep import PAPER_DENSITIES as PAPER_DENSITIES  # the paper's grid, declared with its help
from ticketcli.settings.sweep import PAPER_LAYERWISE as PAPER_LAYERWISE
from ticketcli.specs.run import ModelSpec, RunSpec

DOUBLE_SCORING = ("augmented", "iterated")  # run whichever of these the METHODS registry has


@dataclass(frozen=True)
class SweepTask:
    id: str  # file stem in --out-dir, unique in the sweep
    seed: int
    group: str  # "edge-popup" (the sweep), "fixed", "random" or a double-scoring method name
    config: str  # human label: "k=0.1", "layerwise 3", "fixed", ...
    spec: RunSpec
    fixed: bool = False  # this edge-popup run is also the fixed target-density baseline

    def identity(self) -> JsonObject:
        """What a run's record takes from its task, and must still match when it resumes."""
        return {"id": self.id, "seed": self.seed, "group": self.group, "config": self.config, "fixed": self.fixed}


def double_scoring_methods() -> list[str]:
    return [m for m in DOUBLE_SCORING if m in METHODS.names()]


def model_layers(model: ModelSpec, limits: Budget = Budget()) -> int:
    """Layers of the model, worked out on the meta device for a built-in one (after its budget check)."""
    if model.arch != "user":
        return len({layer_of(n) for n in planned_shapes(model, limits)})
    return len(MaskedNet(build_model(model), model).layers())


def layerwise_tuples(seed: int, pool: tuple[float, ...], n_layers: int, count: int) -> list[tuple[float, ...]]:
    """`count` keep-density tuples, one pool value per layer, drawn uniformly from the seed's own stream."""
    if count == 0:
        return []
    idx = torch.randint(len(pool), (count, n_layers), generator=generator(seed, "sweep-layerwise"))
    return [tuple(pool[i] for i in row.tolist()) for row in idx]


def _task(
    base: RunSpec,
    seed: int,
    stem: str,
    group: str,
    config: str,
    name: str,
    sparsity: float,
    layer_densities: tuple[float, ...] | None = None,
    fixed: bool = False,
) -> SweepTask:
    """One run of the plan: `base` on the seed's init and split, with the run's method (never an aug_density)."""
    options = {**base.method.options, "aug_density": None}
    method = replace(base.method, name=name, layer_densities=layer_densities, sparsity=sparsity, options=options)
    spec = replace(base, init=replace(base.init, seed=seed), data=replace(base.data, split_seed=seed), method=method)
    return SweepTask(f"seed{seed}-{stem}", seed, group, config, spec, fixed=fixed)


def build_plan(
    base: RunSpec, *, seeds: Iterable[int], densities: tuple[float, ...], layerwise: int, double_scoring: Iterable[str]
) -> list[SweepTask]:
    """Every run of the sweep, in a fixed order; base.method carries the requested sparsity and training settings."""
    s = base.method.sparsity
    target = 1.0 - s
    n_layers = model_layers(base.model, runs_build.run_budget(base))
    double_scoring = list(double_scoring)
    tasks = []
    for seed in seeds:
        fixed = [math.isclose(d, target, rel_tol=0, abs_tol=1e-12) for d in densities]
        for d, is_target in zip(densities, fixed):
            sp = round(1.0 - d, 12)
            tasks.append(
                _task(base, seed, f"edge-popup-k{d:g}", "edge-popup", f"k={d:g}", "edge-popup", sp, fixed=is_target)
            )
        for i, tup in enumerate(layerwise_tuples(seed, densities, n_layers, layerwise)):
            tasks.append(_task(base, seed, f"edge-popup-lw{i}", "edge-popup", f"layerwise {i}", "edge-popup", s, tup))
        if not any(fixed):
            tasks.append(_task(base, seed, "fixed", "fixed", f"fixed k={target:g}", "edge-popup", s, fixed=True))
        for name in ("random", *double_scoring):  # a method's own run: named, grouped and labelled by the method
            tasks.append(_task(base, seed, name, name, name, name, s))
    return tasks
