"""Frozen run specifications, spec-string parsing and TOML configs: the only place that knows about flags."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
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
    """A model spec string, parsed. Forms (the built-in ones take "+bias"):
    "mlp:784-256-256-256-10" (widths), "lenet300" (784-300-100-10), "conv2" / "conv4" / "conv6",
    "vgg:64-64-M-128-128-M-256-256-M" (3x3 conv widths, M = 2x2 max-pool), each optionally "@CxHxW-K"
    (input shape and classes; filled in from the dataset when absent), and "pkg.module:factory" (a user's
    function returning an nn.Module)."""

    arch: str = "mlp"  # models registry name, or "user" for a factory
    widths: tuple[int, ...] = (784, *PAPER_HIDDEN, 10)  # mlp: input, hidden..., classes
    bias: bool = False  # the paper's networks are bias-free
    layers: tuple[str, ...] = ()  # vgg: conv widths and "M"
    input: tuple[int, int, int] | None = None  # (C, H, W) for everything but mlp
    classes: int | None = None
    factory: str | None = None  # "pkg.module:function" for arch "user"

    @property
    def resolved(self) -> bool:
        """Whether the spec fixes every shape (an mlp's widths do; the others need @CxHxW-K)."""
        return self.arch in ("mlp", "user") or (self.input is not None and self.classes is not None)

    def with_data(self, shape: tuple[int, int, int], classes: int) -> ModelSpec:
        """Fill in the input shape and class count from the dataset where the spec leaves them open."""
        if self.arch in ("mlp", "user") or self.resolved:
            return self
        return replace(self, input=tuple(shape), classes=int(classes))

    def to_string(self) -> str:
        if self.arch == "user":
            return str(self.factory)
        if self.arch == "mlp":
            body = ":" + "-".join(map(str, self.widths))
        else:
            body = (":" + "-".join(self.layers)) if self.layers else ""
            if self.input is not None:
                body += "@" + "x".join(map(str, self.input)) + f"-{self.classes}"
        return self.arch + body + ("+bias" if self.bias else "")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"spec": self.to_string(), "arch": self.arch}
        if self.arch == "mlp":
            d["widths"] = list(self.widths)
        if self.layers:
            d["layers"] = list(self.layers)
        if self.input is not None:
            d["input"], d["classes"] = list(self.input), self.classes
        if self.factory is not None:
            d["factory"] = self.factory
        d["bias"] = self.bias
        return d

    @classmethod
    def parse(cls, text: str, *, bias: bool | None = None) -> ModelSpec:
        """Parse a spec string (see the class docstring); --bias adds biases to built-in models."""
        t = str(text).strip()
        factory = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)", t)
        if factory:
            if bias:
                raise UsageError("--bias applies to built-in models; a factory's modules decide their own biases")
            return cls(arch="user", widths=(), factory=t)
        hint = ("expected e.g. mlp:784-256-256-256-10, mlp:64-128-10+bias, lenet300, conv6, "
                "vgg:64-64-M-128-128-M-256-256-M, conv6@3x32x32-10 or my_pkg.my_module:build_net")
        m = re.fullmatch(r"([a-z][a-z0-9_]*)(?::([0-9A-Za-z]+(?:-[0-9A-Za-z]+)*))?"
                         r"(?:@([0-9]+)x([0-9]+)x([0-9]+)-([0-9]+))?(\+bias)?", t)
        if not m:
            raise UsageError(f"invalid model spec {text!r}", hint=hint)
        arch, body, geometry = m.group(1), m.group(2), m.group(3, 4, 5, 6)
        has_bias = bool(m.group(7)) if bias is None else (bias or bool(m.group(7)))
        if geometry[0] is not None and arch == "mlp":
            raise UsageError(f"invalid model spec {text!r}: an mlp's widths already fix its input and classes")
        shape = None if geometry[0] is None else tuple(int(g) for g in geometry[:3])
        classes = None if geometry[3] is None else int(geometry[3])
        if shape is not None and (min(shape) <= 0 or classes <= 0):
            raise UsageError(f"invalid model spec {text!r}: input shape and classes must be positive")
        if arch == "mlp":
            if body is None or not re.fullmatch(r"[0-9]+(?:-[0-9]+)+", body):
                raise UsageError(f"invalid model spec {text!r}", hint=hint)
            widths = tuple(int(w) for w in body.split("-"))
            if any(w <= 0 for w in widths):
                raise UsageError(f"invalid model spec {text!r}: widths must be positive")
            return cls(arch="mlp", widths=widths, bias=has_bias)
        layers: tuple[str, ...] = ()
        if arch == "vgg":
            if body is None or not all(p == "M" or (p.isdigit() and int(p) > 0) for p in body.split("-")):
                raise UsageError(f"invalid model spec {text!r}: vgg takes positive conv widths and M (max-pool)",
                                 hint="e.g. vgg:64-64-M-128-128-M-256-256-M")
            layers = tuple(body.split("-"))
            if "M" == layers[0] or all(p == "M" for p in layers):
                raise UsageError(f"invalid model spec {text!r}: vgg must start with a conv width")
        elif body is not None:
            raise UsageError(f"invalid model spec {text!r}: {arch} takes no ':' arguments", hint=hint)
        return cls(arch=arch, widths=(), bias=has_bias, layers=layers, input=shape, classes=classes)


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
        model = ModelSpec.parse(str(s["model"]), bias=bool(s["bias"])).with_data(info.shape, info.classes)
    if model.arch != "user" and model.arch not in MODELS:
        raise UsageError(f"invalid model spec {s['model']!r}: unknown model {model.arch!r}",
                         hint=f"models: {', '.join(MODELS.names())}, or a factory my_pkg.my_module:build_net")

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
    return RunSpec(model=model, init=init, data=data, method=method, device=str(s["device"]),
                   weights=None if s["weights"] is None else str(s["weights"]))


__all__ = ["ModelSpec", "InitSpec", "DataSpec", "MethodSpec", "RunSpec", "build_extract_spec",
           "merge_settings", "load_config", "parse_floats", "data_location"]
