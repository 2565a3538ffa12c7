"""`ticket drift`'s one builder: the command's flags (None: not given) validated and frozen into a DriftRequest
(drift_request: which flags go with --ticket, the model policy, threads) whose DriftSpecs follow once the data's
location is resolved and, for the control flags (activation-sparsity control, ReLUfication, the trade-off sweep),
Features: each flag's own range, names checked against the torch-free registries, and the combinations that make no
sense refused with one line, here and not in the command, so that any caller runs the same rules. Every value is
checked, and every default read, by its setting in settings.py (the defaults are the fields of spec.py's specs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ticketcli.data.registry import DATASETS
from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.drift.settings import DRIFT, FEATURES
from ticketcli.drift.spec import (
    DEFAULT_TEXT_MODEL,
    RELUFY_TARGETS,
    ControlSpec,
    DriftSpec,
    Features,
    RelufySpec,
    require_drift_model,
)
from ticketcli.errors import UsageError
from ticketcli.models.registry import parse_model, text_model
from ticketcli.registry import Registry
from ticketcli.settings.checks import build_spec
from ticketcli.settings.registry import check_threads
from ticketcli.settings.resolve import build_model_policy, data_location
from ticketcli.settings.setting import Setting
from ticketcli.specs.run import PAPER_HIDDEN, DataSpec, ModelPolicy, ModelSpec
from ticketcli.specs.text import TextSpec

MAX_TARGETS = 100  # --tradeoff


@dataclass(frozen=True)
class DriftRequest:
    """One `ticket drift` run, its flags checked together: the run's settings (DRIFT's, None: not given; no model
    with --ticket, which fixes it), the validated features (None: plain drift), the ticket it trains on, and how
    that ticket is rebuilt. Its DriftSpecs are built where the data's flags say it is found (spec())."""

    run: Mapping[str, Any]
    features: Features | None
    ticket: Path | None
    weights: str | None  # the checkpoint the --ticket was extracted from
    policy: ModelPolicy
    threads: int | None  # torch's threads (--tradeoff: per worker, default 1)
    log_to: Any  # --log-to as given (None: no tracking); the tracker layer checks it
    data_dir: str | None
    download: bool

    def spec(self) -> DriftSpec:
        """The run's DriftSpec, its data found where --data-dir, $TICKET_DATA, the cache or a system copy hold it;
        with --relufy it trains with --from first."""
        relufy = None if self.features is None else self.features.relufy
        run = self.run if relufy is None else {**self.run, "activation": relufy.source}
        return build_drift_spec(run, data_location(self.data_dir, self.download))

    def tradeoff_specs(self) -> list[DriftSpec]:
        """--tradeoff: one DriftSpec per --model of the comma list."""
        assert self.features is not None
        location = data_location(self.data_dir, self.download)
        return [build_drift_spec({**self.run, "model": m}, location) for m in self.features.models]


def drift_request(
    run: Mapping[str, Any],
    features: Mapping[str, Any],
    reader: Mapping[str, Any],
    *,
    ticket: Path | None = None,
    weights: Path | None = None,
    log_to: Any = None,
) -> DriftRequest:
    """drift's flags (drift/settings.py's DRIFT and FEATURES, the reader options of DRIFT_READER; None: not given)
    checked together: what --ticket fixes, what only goes with it, --threads, the model policy, the features."""
    if ticket is not None:
        clash = [f for f, k in (("--seeds", "seeds"), ("--dataset", "dataset")) if run[k] is not None]
        if clash:
            raise UsageError(f"{', '.join(clash)} cannot be combined with --ticket (the ticket fixes them)")
    elif weights is not None or reader["trust_model_code"]:
        raise UsageError(f"{'--weights' if weights is not None else '--trust-model-code'} only goes with --ticket")
    threads = check_threads(reader["threads"])
    # with --ticket, --model may only confirm the ticket's own factory (ModelPolicy); the ticket fixes the model
    policy = build_model_policy(
        trust_model_code=bool(reader["trust_model_code"]),
        max_params=reader["max_params"],
        max_memory=reader["max_memory"],
        model=run["model"] if ticket is not None else None,
    )
    if ticket is not None:
        run = {**run, "model": None}
    chosen = build_features(features, run, ticket=ticket is not None)
    return DriftRequest(
        run=dict(run),
        features=chosen,
        ticket=ticket,
        weights=None if weights is None else str(weights),
        policy=policy,
        threads=threads,
        log_to=log_to,
        data_dir=reader["data_dir"],
        download=bool(reader["download"]),
    )


def build_drift_spec(s: Mapping[str, Any], location: Mapping[str, Any]) -> DriftSpec:
    """Validate the command's settings (None or absent = default) and freeze them; location is data_location()'s
    dict. Each value is checked by its setting (build_spec); a choice is one of its names, an empty one the default."""
    info = DATASETS.get(s.get("dataset") or DRIFT["dataset"].value)
    if s.get("model") is not None:
        model = parse_model(str(s["model"])).with_data(info.shape, info.classes)
    elif s.get("text") is not None:
        model = parse_model(DEFAULT_TEXT_MODEL)
    else:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes))
    require_drift_model(model.arch)
    inputs = choice(DRIFT["inputs"], s.get("inputs"))
    text = _text_spec(s, model, inputs, location)
    names = {k: choice(DRIFT[k], s.get(k)) for k in ("loss", "activation", "optimizer")}
    # the seeds' list is parsed below; the device is the run's to resolve, an empty one the default
    values = {**s, **names, "inputs": inputs, "seeds": None, "device": None}
    device = str(s.get("device") or DRIFT["device"].value)
    spec = build_spec(DriftSpec, DRIFT, values, model=model, data=DataSpec(name=info.name, **location), text=text)
    seeds = spec.seeds if s.get("seeds") is None else parse_seeds(s["seeds"])
    return replace(spec, log_every=min(spec.log_every, spec.steps), seeds=seeds, device=device)


def choice(setting: Setting, name: str | None) -> str:
    """One of the setting's choices (None: its default); an activation or a loss as its registry (activations.py)
    names it."""
    name = name or setting.value
    registries: dict[str, Registry[Any]] = {"activation": ACTIVATIONS, "relufy_from": ACTIVATIONS, "loss": LOSSES}
    registry = registries.get(setting.name)
    if registry is not None:
        registry.get(name)
    elif name not in setting.kind:
        raise UsageError(f"unknown {setting.flag} {name!r}; choose one of: {', '.join(setting.kind)}")
    return str(name)


def _text_spec(s: Mapping[str, Any], model: ModelSpec, inputs: str, location: Mapping[str, Any]) -> TextSpec | None:
    """A character-level model trains on text (--text, or the fortunes files), and only it does."""
    if not text_model(model.arch):
        if s.get("text") is not None:
            raise UsageError(
                f"--text trains a character-level model, not {model.arch}", hint=f"use --model {DEFAULT_TEXT_MODEL}"
            )
        return None
    clash = [f for f, k in (("--dataset", "dataset"), ("--inputs", "inputs")) if s.get(k) not in (None, "data")]
    if clash:
        raise UsageError(f"{', '.join(clash)} cannot be combined with {model.arch}, which trains on --text")
    return TextSpec(path=None if s.get("text") is None else str(s["text"]), search_dirs=tuple(location["search_dirs"]))


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): distinct non-negative integers."""
    try:
        seeds = tuple(DRIFT["seeds"].check(int(t), "--seeds entries") for t in str(text).split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must be distinct comma-separated integers, got {text!r}")
    return seeds


def split_models(model: str | None) -> tuple[str | None, ...]:
    """--model as a comma list (model specs never contain commas): distinct entries, in the given order."""
    if model is None:
        return (None,)
    items = tuple(m.strip() for m in model.split(","))
    if any(not m for m in items) or len(set(items)) != len(items):
        raise UsageError(f"--model must list distinct model specs separated by commas, got {model!r}")
    return items


def build_features(f: Mapping[str, Any], run: Mapping[str, Any], *, ticket: bool) -> Features | None:
    """Validate the feature flags `f` (FEATURES'; None/False: not given) beside the run's --model, --activation and
    --inputs; None when none of them is given (plain drift)."""
    relufy, tradeoff, model = bool(f["relufy"]), f["tradeoff"], run["model"]
    if tradeoff is None and f["workers"] is not None:
        raise UsageError("--workers only goes with --tradeoff")
    if tradeoff is None and model is not None and "," in model:
        raise UsageError("several --model specs (a comma list) only go with --tradeoff")
    if not relufy and all(v is None for k, v in f.items() if k != "relufy"):
        return None
    if relufy and (f["act_sparsity"] is not None or tradeoff is not None):
        raise UsageError(f"--relufy does not go with {'--tradeoff' if tradeoff is not None else '--act-sparsity'}")
    if relufy and run["activation"] is not None:
        raise UsageError("--relufy trains with --from, then swaps in --to; drop --activation")
    rel = build_relufy_spec(relufy, f["relufy_from"], f["relufy_to"], f["relufy_epochs"], inputs=run["inputs"])
    if tradeoff is None:
        control = build_control_spec(f["act_sparsity"], f["act_target"], f["freeze_stats_after"])
        return Features(control=control, relufy=rel, targets=None)
    if f["act_target"] is not None:
        raise UsageError("--act-target is one run's target; --tradeoff lists the targets")
    if ticket:
        raise UsageError("--tradeoff trains from the seeded init of each --model; it does not go with --ticket")
    targets = parse_targets(tradeoff)
    control = build_control_spec(f["act_sparsity"] or "topk", targets[0], f["freeze_stats_after"])
    return build_spec(Features, FEATURES, f, control=control, relufy=None, targets=targets, models=split_models(model))


def build_control_spec(mode: str | None, target: float | None, freeze_after: int | None) -> ControlSpec | None:
    """Validate --act-sparsity, --act-target and --freeze-stats-after (None: not given); None without a mode."""
    if mode is None:
        given = [f for f, v in (("--act-target", target), ("--freeze-stats-after", freeze_after)) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} only goes with --act-sparsity topk|percentile")
        return None
    choice(FEATURES["act_sparsity"], mode)
    spec = build_spec(ControlSpec, FEATURES, {"act_target": target}, mode=mode)
    if freeze_after is not None and mode != "percentile":
        raise UsageError("--freeze-stats-after freezes percentile statistics; top-k keeps none")
    return build_spec(ControlSpec, FEATURES, {"freeze_stats_after": freeze_after}, mode=mode, target=spec.target)


def build_relufy_spec(
    on: bool, source: str | None, target: str | None, epochs: int | None, *, inputs: str | None
) -> RelufySpec | None:
    """Validate --relufy, --from, --to and --relufy-epochs (None: not given); None without --relufy."""
    if not on:
        given = [f for f, v in (("--from", source), ("--to", target), ("--relufy-epochs", epochs)) if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} only goes with --relufy")
        return None
    if source is None or target is None:
        raise UsageError("--relufy needs --from (the smooth activation) and --to (relu, relu2 or relu2-clip)")
    choice(FEATURES["relufy_from"], source)
    if target not in RELUFY_TARGETS:
        raise UsageError(f"--to must be a ReLU variant ({', '.join(RELUFY_TARGETS)}), got {target!r}")
    if source == target:
        raise UsageError(f"--from and --to are both {source}; ReLUfication swaps one activation for another")
    if inputs not in (None, "data"):
        raise UsageError("--relufy fine-tunes for epochs of the dataset; it does not go with --inputs " + inputs)
    return build_spec(RelufySpec, FEATURES, {"relufy_epochs": epochs}, source=source, target=target)


def parse_targets(text: str) -> tuple[float, ...]:
    """'0.5,0.6,0.7' -> (0.5, 0.6, 0.7): at least two distinct targets in (0, 1), in increasing order."""
    try:
        values = [float(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        raise UsageError(f"--tradeoff must be comma-separated numbers in (0, 1), got {text!r}") from None
    targets = tuple(sorted(float(FEATURES["act_target"].check(v, "--tradeoff targets")) for v in values))
    if len(targets) < 2 or len(set(targets)) != len(targets) or len(targets) > MAX_TARGETS:
        raise UsageError(f"--tradeoff needs 2 to {MAX_TARGETS} distinct targets, got {text!r}")
    return targets
