"""Frozen run specifications, spec-string parsing and TOML configs: the only place that knows about flags."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ticketcli.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PAPER_HIDDEN = (256, 256, 256)  # three width-256 hidden layers (paper, Appendix B)


@dataclass(frozen=True)
class ModelSpec:
    arch: str = "mlp"  # models registry name
    widths: tuple[int, ...] = (784, *PAPER_HIDDEN, 10)  # input, hidden..., classes
    bias: bool = False  # the paper's networks are bias-free

    def to_string(self) -> str:
        return f"{self.arch}:{'-'.join(map(str, self.widths))}" + ("+bias" if self.bias else "")

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.to_string(), "arch": self.arch, "widths": list(self.widths), "bias": self.bias}

    @classmethod
    def parse(cls, text: str, *, bias: bool | None = None) -> ModelSpec:
        """Parse "mlp:784-256-256-256-10" (optionally "+bias")."""
        m = re.fullmatch(r"\s*([a-z0-9_]+):([0-9]+(?:-[0-9]+)+)(\+bias)?\s*", text)
        if not m:
            raise UsageError(f"invalid model spec {text!r}", hint="expected e.g. mlp:784-256-256-256-10 or mlp:64-128-10+bias")
        widths = tuple(int(w) for w in m.group(2).split("-"))
        if any(w <= 0 for w in widths):
            raise UsageError(f"invalid model spec {text!r}: widths must be positive")
        has_bias = bool(m.group(3)) if bias is None else (bias or bool(m.group(3)))
        return cls(arch=m.group(1), widths=widths, bias=has_bias)


@dataclass(frozen=True)
class InitSpec:
    scheme: str = "scaled-kaiming-uniform"  # init registry name; the paper's default
    k: float = 0.5  # fan_in is scaled by k (paper: k = 1/2)
    seed: int = 0  # the weights' seed; the whole network is rebuilt from it

    def to_dict(self) -> dict[str, Any]:
        return {"scheme": self.scheme, "k": self.k, "gain": "relu", "seed": self.seed}


@dataclass(frozen=True)
class DataSpec:
    name: str = "fashion-mnist"  # datasets registry name
    n_extract: int | None = None  # None: the dataset's default (5000 for fashion-mnist)
    n_val: int | None = None  # None: the dataset's default (5000 for fashion-mnist)
    split_seed: int = 0  # seeds the shuffle that draws the extraction/validation split
    search_dirs: tuple[str, ...] = ()  # where to look for files, in order (not stored in tickets)
    download: bool = False  # allow a torchvision download (not stored in tickets)
    download_dir: str | None = None  # where a download goes (the user cache)


@dataclass(frozen=True)
class MethodSpec:
    name: str = "augmented"  # methods registry name
    sparsity: float = 0.9  # requested sparsity = 1 - keep density
    layer_densities: tuple[float, ...] | None = None  # per-layer keep densities (edge-popup, random)
    aug_density: float | None = None  # augmented-space keep density; None: 1 - sparsity
    aux_width: int = 1  # auxiliary score width as a multiple of the original (augmented, iterated)
    frozen_aux: bool = False  # auxiliary scores keep their random init (never updated)
    signed_scores: bool = False  # rank raw scores S instead of |S| (the "NoAbs" ablation)
    project_final: bool = False  # augmented: final mask = top-k of the original scores at exactly 1 - sparsity
    global_topk: bool = False  # one top-k across all layers instead of one per layer
    iter_tolerance: float = 0.02  # iterated: stop when achieved sparsity is this close to the requested one
    max_rounds: int = 8  # iterated: at most this many rounds
    epochs: int = 100  # score-training epochs (Appendix B)
    lr: float = 1e-2  # Adam learning rate for scores (Appendix B)
    batch_size: int = 512
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    score_init: str = "kaiming-uniform"  # U[-1/sqrt(fan_in), 1/sqrt(fan_in)], as allenai/hidden-networks

    @property
    def density(self) -> float:
        return 1.0 - self.sparsity

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        if self.layer_densities is not None:
            d["layer_densities"] = list(self.layer_densities)
        return d


@dataclass(frozen=True)
class RunSpec:
    model: ModelSpec
    init: InitSpec
    data: DataSpec
    method: MethodSpec
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    weights: str | None = None  # frozen weights from this checkpoint instead of the seed


# Every key a config file may set, with the built-in default (flags override the file, the file overrides these).
EXTRACT_DEFAULTS: dict[str, Any] = {
    "method": "augmented",
    "sparsity": 0.9,
    "layer_densities": None,
    "aug_density": None,
    "aux_width": 1,
    "frozen_aux": False,
    "signed_scores": False,
    "project_final": False,
    "global_topk": False,
    "iter_tolerance": 0.02,
    "max_rounds": 8,
    "seed": 0,
    "model": None,
    "bias": False,
    "init": "scaled-kaiming-uniform",
    "init_k": 0.5,
    "weights": None,
    "dataset": "fashion-mnist",
    "data_dir": None,
    "download": False,
    "n_extract": None,
    "n_val": None,
    "epochs": 100,
    "lr": 1e-2,
    "batch_size": 512,
    "betas": "0.9,0.999",
    "eps": 1e-8,
    "weight_decay": 0.0,
    "device": "auto",
}


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ticketcli"


def data_search_dirs(data_dir: str | None) -> tuple[str, ...]:
    """DESIGN.md's resolution order: --data-dir, $TICKET_DATA, the user cache, then system copies."""
    from ticketcli.data import SYSTEM_DIRS

    dirs = [data_dir, os.environ.get("TICKET_DATA"), str(user_cache_dir()), *SYSTEM_DIRS]
    return tuple(str(d) for d in dirs if d)


def data_location(data_dir: str | None, download: bool) -> dict[str, Any]:
    """DataSpec's where-to-find-it fields, resolved from flags and the environment here at the edge."""
    return {"search_dirs": data_search_dirs(data_dir), "download": bool(download),
            "download_dir": str(user_cache_dir())}


def load_config(path: str | Path | None) -> dict[str, Any]:
    """Read a flat TOML run config; keys are option names (dashes or underscores)."""
    if path is None:
        return {}
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"config file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read config file {p}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {p} is not valid TOML: {e}") from None
    out = {}
    for key, value in raw.items():
        k = key.replace("-", "_")
        if k not in EXTRACT_DEFAULTS:
            raise UsageError(f"unknown key {key!r} in {p}", hint=f"valid keys: {', '.join(sorted(EXTRACT_DEFAULTS))}")
        out[k] = value
    return out


def merge_settings(flags: dict[str, Any], config_path: str | Path | None) -> dict[str, Any]:
    """Defaults <- config file <- explicitly given flags (None means 'not given')."""
    merged = dict(EXTRACT_DEFAULTS)
    merged.update(load_config(config_path))
    merged.update({k: v for k, v in flags.items() if v is not None})
    return merged


def parse_floats(text: str | list | tuple | None, what: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    items = text if isinstance(text, (list, tuple)) else [t for t in str(text).split(",") if t.strip()]
    try:
        values = tuple(float(t) for t in items)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not values:
        raise UsageError(f"{what} is empty")
    return values


def _check_fraction(value: Any, what: str, *, lo_open: bool = True, hi_open: bool = True) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a number, got {value!r}") from None
    lo_ok = v > 0 if lo_open else v >= 0
    hi_ok = v < 1 if hi_open else v <= 1
    if not (math.isfinite(v) and lo_ok and hi_ok):
        interval = ("(" if lo_open else "[") + "0, 1" + (")" if hi_open else "]")
        raise UsageError(f"{what} must lie in {interval}, got {value!r}")
    return v


def _check_int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{what} must be an integer, got {value!r}")
    try:
        v = int(value)
    except ValueError:
        raise UsageError(f"{what} must be an integer, got {value!r}") from None
    if v < minimum:
        raise UsageError(f"{what} must be >= {minimum}, got {v}")
    return v


def _check_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{what} must be true or false, got {value!r}")
    return value


def _check_positive(value: Any, what: str, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise UsageError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


def build_extract_spec(settings: dict[str, Any]) -> RunSpec:
    """Validate merged settings and freeze them into a RunSpec."""
    from ticketcli.data import DATASETS  # the dataset decides the default model's input and output widths
    from ticketcli.init import INIT_SCHEMES
    from ticketcli.methods import METHODS
    from ticketcli.models import MODELS

    s = settings
    METHODS.get(s["method"])
    INIT_SCHEMES.get(s["init"])
    info = DATASETS.get(s["dataset"])
    seed = _check_int(s["seed"], "--seed", 0)

    if s["model"] is None:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes), bias=bool(s["bias"]))
    else:
        model = ModelSpec.parse(str(s["model"]), bias=bool(s["bias"]))
    MODELS.get(model.arch)

    layer_densities = parse_floats(s["layer_densities"], "--layer-densities")
    if layer_densities is not None:
        layer_densities = tuple(_check_fraction(d, "--layer-densities entries", hi_open=False) for d in layer_densities)
    aug_density = None if s["aug_density"] is None else _check_fraction(s["aug_density"], "--aug-density", hi_open=False)
    betas = parse_floats(s["betas"], "--betas")
    if betas is None or len(betas) != 2 or not all(0 <= b < 1 for b in betas):
        raise UsageError(f"--betas must be two numbers in [0, 1), got {s['betas']!r}")

    method = MethodSpec(
        name=s["method"],
        sparsity=_check_fraction(s["sparsity"], "--sparsity"),
        layer_densities=layer_densities,
        aug_density=aug_density,
        aux_width=_check_int(s["aux_width"], "--aux-width", 1),
        frozen_aux=_check_bool(s["frozen_aux"], "--frozen-aux"),
        signed_scores=_check_bool(s["signed_scores"], "--signed-scores"),
        project_final=_check_bool(s["project_final"], "--project-final"),
        global_topk=_check_bool(s["global_topk"], "--global"),
        iter_tolerance=_check_fraction(s["iter_tolerance"], "--iter-tolerance"),
        max_rounds=_check_int(s["max_rounds"], "--max-rounds", 1),
        epochs=_check_int(s["epochs"], "--epochs", 1),
        lr=_check_positive(s["lr"], "--lr"),
        batch_size=_check_int(s["batch_size"], "--batch-size", 1),
        betas=(betas[0], betas[1]),
        eps=_check_positive(s["eps"], "--eps"),
        weight_decay=_check_positive(s["weight_decay"], "--weight-decay", allow_zero=True),
    )
    data = DataSpec(
        name=s["dataset"],
        n_extract=None if s["n_extract"] is None else _check_int(s["n_extract"], "--n-extract", 1),
        n_val=None if s["n_val"] is None else _check_int(s["n_val"], "--n-val", 1),
        split_seed=seed,
        **data_location(None if s["data_dir"] is None else str(s["data_dir"]), s["download"]),
    )
    init = InitSpec(scheme=s["init"], k=_check_positive(s["init_k"], "--init-k"), seed=seed)
    check_method_options(method)
    return RunSpec(model=model, init=init, data=data, method=method, device=str(s["device"]),
                   weights=None if s["weights"] is None else str(s["weights"]))


# Score-method variants (issue 4) and the default that means "not used"; a method lists the ones it honours in
# its class attribute `variants`, and build_extract_spec refuses the others with a clear message.
VARIANT_DEFAULTS: dict[str, tuple[Any, str]] = {
    "aug_density": (None, "--aug-density"),
    "aux_width": (1, "--aux-width"),
    "frozen_aux": (False, "--frozen-aux"),
    "signed_scores": (False, "--signed-scores"),
    "project_final": (False, "--project-final"),
    "global_topk": (False, "--global"),
    "layer_densities": (None, "--layer-densities"),
    "iter_tolerance": (0.02, "--iter-tolerance"),
    "max_rounds": (8, "--max-rounds"),
}


def check_method_options(method: MethodSpec) -> None:
    """Refuse a variant option that the chosen method does not use, naming the methods that do."""
    from ticketcli.methods import METHODS

    for field, (default, flag) in VARIANT_DEFAULTS.items():
        if getattr(method, field) == default:
            continue
        if field not in getattr(METHODS.get(method.name), "variants", frozenset()):
            users = [n for n in METHODS.names() if field in getattr(METHODS.get(n), "variants", frozenset())]
            raise UsageError(f"{flag} does not apply to method {method.name!r}",
                             hint=f"it applies to: {', '.join(users) or 'no method'}")


__all__ = ["ModelSpec", "InitSpec", "DataSpec", "MethodSpec", "RunSpec", "build_extract_spec",
           "merge_settings", "load_config", "parse_floats", "data_location"]
