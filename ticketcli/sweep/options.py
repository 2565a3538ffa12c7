"""sweep-k's own options checked (the seeds, the band, the density pool, the layerwise draws, the workers, each
run's threads, the executor), a config file's keys that sweep-k chooses itself refused, and the settings a sweep
reports: what `ticket sweep-k` and the Python API's `sweep_k` share between their arguments and the run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ticketcli.errors import UsageError
from ticketcli.runtime import threads as torch_threads
from ticketcli.settings.registry import check_threads
from ticketcli.settings.run import RUN
from ticketcli.settings.sweep import OWN, PAPER_DENSITIES
from ticketcli.specs.run import RunSpec
from ticketcli.sweep.result import SweepSettings

Executor = Literal["local", "ray"]
FIXED = frozenset({"method", "seed", "layer_densities", "aug_density", "weights"})  # what sweep-k chooses itself


@dataclass(frozen=True)
class SweepOptions:
    """sweep-k's own options, checked: the seeds, the band, the density pool, the layerwise draws, the workers,
    each run's torch threads (POOL_THREADS unless given) and the executor."""

    seeds: tuple[int, ...]
    band: tuple[float, float]
    densities: tuple[float, ...]
    layerwise: int
    workers: int
    threads: int
    executor: Executor


def sweep_options(own: Mapping[str, Any], threads: int | None) -> SweepOptions:
    """Validate sweep-k's own options (`own`, by name; `threads`: the flag's, else the config file's)."""
    seeds, band, densities = own["seeds"], own["band"], own["densities"]
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {seeds!r}") from None
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise UsageError(f"--seeds must be distinct non-negative integers, got {seeds!r}")
    seed_list = [RUN["seed"].check(s, "--seeds entries") for s in seed_list]
    parts = band.split("-")
    try:
        lo, hi = (float(parts[0]), float(parts[1])) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        lo = hi = math.nan
    if not 0 <= lo <= hi <= 1:  # NaN fails every comparison
        raise UsageError(f"--band must be LO-HI with 0 <= LO <= HI <= 1, got {band!r}")
    try:
        pool = PAPER_DENSITIES if densities is None else tuple(float(t) for t in densities.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--densities must be comma-separated numbers, got {densities!r}") from None
    if not pool:
        raise UsageError("--densities is empty")
    if not all(0 < d <= 1 for d in pool):
        raise UsageError(f"--densities must lie in (0, 1], got {densities!r}")
    layerwise, workers = (OWN[k].check(own[k]) for k in ("layerwise", "workers"))
    given = check_threads(threads)
    if own["executor"] == "local":
        each = torch_threads.per_worker(workers, given)
    else:  # Ray places each run on a node with that many free CPUs (num_cpus)
        each = torch_threads.POOL_THREADS if given is None else given
    return SweepOptions(tuple(seed_list), (lo, hi), tuple(pool), layerwise, workers, each, own["executor"])


def check_config_keys(config: object, from_config: dict[str, Any]) -> None:
    """A config file that sets what sweep-k chooses itself (the method, the seed, the densities) is refused."""
    fixed_by_sweep = sorted(FIXED & set(from_config))
    if fixed_by_sweep:
        raise UsageError(
            f"{config} sets {', '.join(fixed_by_sweep)}, which sweep-k chooses itself",
            hint="remove these keys for sweep-k",
        )


def sweep_settings(base: RunSpec, o: SweepOptions, out_dir: Path | None) -> SweepSettings:
    """What a sweep of `base` (its first seed's run spec) over the options `o` reports as its settings."""
    from ticketcli.sweep.plan import double_scoring_methods  # torch: the settings are built once the work starts

    return SweepSettings(
        sparsity=base.method.sparsity,
        seeds=o.seeds,
        densities=o.densities,
        layerwise=o.layerwise,
        band=o.band,
        model=base.model.to_string(),
        dataset=base.data.name,
        epochs=base.method.epochs,
        double_scoring=tuple(double_scoring_methods()),
        workers=o.workers,
        threads=o.threads,
        executor=o.executor,
        out_dir=None if out_dir is None else str(out_dir),
    )
