"""drift's control flags (activation-sparsity control, ReLUfication, the trade-off sweep) checked together and frozen
into Features: each flag's own range, and the combinations that make no sense refused with one line."""

from __future__ import annotations

from dataclasses import dataclass

from ticketcli.drift.control import ControlSpec, build_control_spec
from ticketcli.drift.relufy import RelufySpec, build_relufy_spec
from ticketcli.drift.tradeoff import check_workers, parse_targets
from ticketcli.errors import UsageError


@dataclass(frozen=True)
class Features:
    control: ControlSpec | None  # one controlled run; with tradeoff the mode and freezing, target per run
    relufy: RelufySpec | None
    targets: tuple[float, ...] | None  # the trade-off sweep's targets, increasing
    models: tuple[str | None, ...] = (None,)  # trade-off: the models overlaid (None: drift's default model)
    workers: int = 1


def split_models(model: str | None) -> tuple[str | None, ...]:
    """--model as a comma list (model specs never contain commas): distinct entries, in the given order."""
    if model is None:
        return (None,)
    items = tuple(m.strip() for m in model.split(","))
    if any(not m for m in items) or len(set(items)) != len(items):
        raise UsageError(f"--model must list distinct model specs separated by commas, got {model!r}")
    return items


def build_features(
    *,
    act_sparsity: str | None,
    act_target: float | None,
    freeze_stats_after: int | None,
    relufy: bool,
    relufy_from: str | None,
    relufy_to: str | None,
    relufy_epochs: int | None,
    tradeoff: str | None,
    workers: int | None,
    model: str | None,
    ticket: bool,
    activation: str | None,
    inputs: str | None,
) -> Features | None:
    """Validate the flags (None/False: not given); None when none of them is given (plain drift)."""
    given = (act_sparsity, act_target, freeze_stats_after, relufy_from, relufy_to, relufy_epochs, tradeoff, workers)
    if not relufy and all(v is None for v in given):
        if model is not None and "," in model:
            raise UsageError("several --model specs (a comma list) only go with --tradeoff")
        return None
    if tradeoff is None:
        if workers is not None:
            raise UsageError("--workers only goes with --tradeoff")
        if model is not None and "," in model:
            raise UsageError("several --model specs (a comma list) only go with --tradeoff")
    if relufy and (act_sparsity is not None or tradeoff is not None):
        raise UsageError(f"--relufy does not go with {'--tradeoff' if tradeoff is not None else '--act-sparsity'}")
    if relufy and activation is not None:
        raise UsageError("--relufy trains with --from, then swaps in --to; drop --activation")
    rel = build_relufy_spec(relufy, relufy_from, relufy_to, relufy_epochs, inputs=inputs)
    if tradeoff is None:
        return Features(
            control=build_control_spec(act_sparsity, act_target, freeze_stats_after), relufy=rel, targets=None
        )
    if act_target is not None:
        raise UsageError("--act-target is one run's target; --tradeoff lists the targets")
    if ticket:
        raise UsageError("--tradeoff trains from the seeded init of each --model; it does not go with --ticket")
    targets = parse_targets(tradeoff)
    control = build_control_spec(act_sparsity or "topk", targets[0], freeze_stats_after)
    return Features(
        control=control, relufy=None, targets=targets, models=split_models(model), workers=check_workers(workers)
    )
