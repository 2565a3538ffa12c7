"""The budget a run must fit (--max-params, --max-memory): a built-in model's cost (its family's, from its spec alone)
weighed against the limits and refused with one line before anything is built or loaded; the machine's physical
memory, whose share is --max-memory's default."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ticketcli.errors import UsageError
from ticketcli.files.atomic import size_text
from ticketcli.models.cost import EVAL_BATCH, Estimate
from ticketcli.models.registry import estimate
from ticketcli.specs.run import MAX_PARAMS, ModelSpec
from ticketcli.specs.syntax import MAX_BLOCKS

MEMORY_SHARE = 0.5  # default --max-memory: this share of the machine's physical memory


@dataclass(frozen=True)
class Budget:
    """What a run may cost: parameters and bytes, at the batch sizes it will use."""

    max_params: int = MAX_PARAMS  # --max-params
    max_memory: int | None = None  # --max-memory in bytes; None: MEMORY_SHARE of the machine's physical memory
    train_batch: int = 0  # examples per training step; 0: the run only evaluates
    eval_batch: int = EVAL_BATCH  # examples per evaluation forward pass


def physical_memory() -> int | None:
    """The machine's physical memory in bytes (None when the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_max_memory() -> int | None:
    """--max-memory's default: MEMORY_SHARE of the physical memory (None, no limit, where it is unknown)."""
    total = physical_memory()
    return None if total is None else int(total * MEMORY_SHARE)


def check(spec: ModelSpec, budget: Budget = Budget()) -> Estimate | None:
    """Refuse a built-in model over the budget, from its spec alone (one line naming the figure and the option
    that raises it); returns the estimate (None for a user's factory, which is counted once built)."""
    est = estimate(spec)
    if est is None:
        return None
    name = _short(spec.to_string())
    if est.depth > MAX_BLOCKS:
        raise UsageError(f"model {name} has {est.depth:,} layers or blocks, more than the {MAX_BLOCKS:,} allowed")
    check_param_count(spec, est.params, budget.max_params)
    limit = default_max_memory() if budget.max_memory is None else budget.max_memory
    need = est.memory_bytes(budget.train_batch, budget.eval_batch)
    if limit is not None and need > limit:
        training = est.training_bytes(budget.train_batch) >= est.evaluation_bytes(budget.eval_batch)
        batch = (
            f"a training batch of {budget.train_batch}" if training else f"evaluation batches of {budget.eval_batch}"
        )
        raise UsageError(
            f"model {name} needs about {size_text(need)} of memory at {batch}, more than the limit of "
            f"{size_text(limit)}",
            hint="raise the limit with --max-memory SIZE (e.g. 64G) if the machine has it"
            + (", or use a smaller --batch-size" if training else ""),
        )
    return est


def check_param_count(spec: ModelSpec, count: int, max_params: int) -> None:
    """Refuse a model with more than max_params parameters (one line, naming the limit's flag)."""
    if count > max_params:
        raise UsageError(
            f"model {_short(spec.to_string())} has {count:,} parameters, more than the limit of {max_params:,}",
            hint="raise the limit with --max-params N if you mean it",
        )


def _short(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
