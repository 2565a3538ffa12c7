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
    "mlp:784-256-256-256-10" (widths; also "+res" and "+norm=batch|layer|rms"), "lenet300" (784-300-100-10),
    "conv2" / "conv4" / "conv6", "vgg:64-64-M-128-128-M-256-256-M" (3x3 conv widths, M = 2x2 max-pool),
    "resnet20", "resnet18", "wrn:16-4" (depth-width), "vit:p4-d64-l4-h4" (patch, width, blocks, heads; "-m2" sets
    the MLP ratio), each optionally "@CxHxW-K" (input shape and classes; filled in from the dataset when absent),
    and "pkg.module:factory" (a user's function returning an nn.Module; "@CxHxW-K" passes num_classes=K).
    Suffixes print in one canonical order: +res, +norm=..., +bias."""

    arch: str = "mlp"  # models registry name, or "user" for a factory
    widths: tuple[int, ...] = (784, *PAPER_HIDDEN, 10)  # mlp: input, hidden..., classes
    bias: bool = False  # the paper's networks are bias-free
    layers: tuple[str, ...] = ()  # vgg: conv widths and "M"
    input: tuple[int, int, int] | None = None  # (C, H, W) for everything but mlp
    classes: int | None = None
    factory: str | None = None  # "pkg.module:function" for arch "user"
    residual: bool = False  # mlp "+res": identity skips around hidden layers whose input and output widths agree
    norm: str | None = None  # mlp "+norm=batch|layer|rms": non-affine normalisation before each hidden activation

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
        geometry = "" if self.input is None else "@" + "x".join(map(str, self.input)) + f"-{self.classes}"
        if self.arch == "user":
            return str(self.factory) + geometry
        if self.arch == "mlp":
            body = ":" + "-".join(map(str, self.widths))
        else:
            body = ((":" + "-".join(self.layers)) if self.layers else "") + geometry
        suffixes = ("+res" if self.residual else "") + (f"+norm={self.norm}" if self.norm else "")
        return self.arch + body + suffixes + ("+bias" if self.bias else "")

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
        if self.residual:  # only when set, so that the records of plain MLPs stay as they were
            d["residual"] = True
        if self.norm is not None:
            d["norm"] = self.norm
        d["bias"] = self.bias
        return d

    @classmethod
    def parse(cls, text: str, *, bias: bool | None = None) -> ModelSpec:
        """Parse a spec string (see the class docstring); --bias adds biases to built-in models."""
        from ticketcli.models import MODELS  # here: models imports specs

        t = str(text).strip()
        geometry_re = r"(?:@([0-9]+)x([0-9]+)x([0-9]+)-([0-9]+))?"
        factory = re.fullmatch(r"((?:[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*)"
                               + geometry_re, t)
        if factory and factory.group(1).partition(":")[0] not in MODELS:  # "vit:p4" is a built-in, not a module
            if bias:
                raise UsageError("--bias applies to built-in models; a factory's modules decide their own biases")
            shape, classes = _geometry(text, factory.group(2, 3, 4, 5))
            return cls(arch="user", widths=(), factory=factory.group(1), input=shape, classes=classes)
        hint = ("expected e.g. mlp:784-256-256-256-10, mlp:64-128-10+bias, mlp:784-256-256-10+res+norm=layer, "
                "lenet300, conv6, vgg:64-64-M-128-128-M-256-256-M, resnet20, wrn:16-4, vit:p4-d64-l4-h4, "
                "conv6@3x32x32-10 or my_pkg.my_module:build_net")
        m = re.fullmatch(r"([a-z][a-z0-9_]*)(?::([0-9A-Za-z]+(?:-[0-9A-Za-z]+)*))?" + geometry_re
                         + r"((?:\+[a-z]+(?:=[a-z]+)?)*)", t)
        if not m:
            raise UsageError(f"invalid model spec {text!r}", hint=hint)
        arch, body = m.group(1), m.group(2)
        MODELS.get(arch)  # an unknown name: "unknown model ...; choose one of ..." before any syntax complaint
        suffix = _suffixes(text, m.group(7))
        has_bias = suffix["bias"] if bias is None else (bias or suffix["bias"])
        if arch != "mlp" and (suffix["res"] or suffix["norm"]):
            raise UsageError(f"invalid model spec {text!r}: +res and +norm apply to mlp specs only")
        if m.group(3) is not None and arch == "mlp":
            raise UsageError(f"invalid model spec {text!r}: an mlp's widths already fix its input and classes")
        shape, classes = _geometry(text, m.group(3, 4, 5, 6))
        if arch == "mlp":
            if body is None or not re.fullmatch(r"[0-9]+(?:-[0-9]+)+", body):
                raise UsageError(f"invalid model spec {text!r}", hint=hint)
            widths = tuple(int(w) for w in body.split("-"))
            if any(w <= 0 for w in widths):
                raise UsageError(f"invalid model spec {text!r}: widths must be positive")
            if suffix["res"] and not any(a == b for a, b in zip(widths[1:-2], widths[2:-1])):
                raise UsageError(f"invalid model spec {text!r}: +res adds identity skips only around hidden layers "
                                 "whose input and output widths agree, and this mlp has none",
                                 hint="e.g. mlp:784-256-256-256-10+res")
            return cls(arch="mlp", widths=widths, bias=has_bias, residual=suffix["res"], norm=suffix["norm"])
        layers = _body(text, arch, body, hint)
        return cls(arch=arch, widths=(), bias=has_bias, layers=layers, input=shape, classes=classes)


SPEC_NORMS = ("batch", "layer", "rms")  # mlp "+norm=..." (models.py maps them to modules)


def _suffixes(text: str, raw: str) -> dict[str, Any]:
    """"+res+norm=layer+bias" in any order, each at most once -> {"res", "norm", "bias"}."""
    out: dict[str, Any] = {"res": False, "norm": None, "bias": False}
    seen: set[str] = set()
    for item in raw.split("+")[1:]:
        key, _, value = item.partition("=")
        if key in seen:
            raise UsageError(f"invalid model spec {text!r}: +{key} given twice")
        seen.add(key)
        if key == "norm" and value in SPEC_NORMS:
            out["norm"] = value
        elif key in ("res", "bias") and not value:
            out[key] = True
        else:
            raise UsageError(f"invalid model spec {text!r}: unknown suffix +{item}",
                             hint=f"suffixes: +res, +norm={'|'.join(SPEC_NORMS)}, +bias")
    return out


def _geometry(text: str, groups: tuple) -> tuple[tuple[int, int, int] | None, int | None]:
    """The "@CxHxW-K" groups as (shape, classes), both None when absent."""
    if groups[0] is None:
        return None, None
    shape, classes = tuple(int(g) for g in groups[:3]), int(groups[3])
    if min(shape) <= 0 or classes <= 0:
        raise UsageError(f"invalid model spec {text!r}: input shape and classes must be positive")
    return shape, classes  # type: ignore[return-value]


VIT_BODY = r"p([0-9]+)-d([0-9]+)-l([0-9]+)-h([0-9]+)(?:-m([0-9]+))?"


def _body(text: str, arch: str, body: str | None, hint: str) -> tuple[str, ...]:
    """The ':' arguments of a built-in other than mlp, validated, as the tuple ModelSpec.layers stores."""
    if arch == "vgg":
        if body is None or not all(p == "M" or (p.isdigit() and int(p) > 0) for p in body.split("-")):
            raise UsageError(f"invalid model spec {text!r}: vgg takes positive conv widths and M (max-pool)",
                             hint="e.g. vgg:64-64-M-128-128-M-256-256-M")
        layers = tuple(body.split("-"))
        if "M" == layers[0] or all(p == "M" for p in layers):
            raise UsageError(f"invalid model spec {text!r}: vgg must start with a conv width")
        return layers
    if arch == "wrn":
        m = re.fullmatch(r"([0-9]+)-([0-9]+)", body or "")
        if not m:
            raise UsageError(f"invalid model spec {text!r}: wrn takes depth-width, e.g. wrn:16-4 or wrn:28-10")
        depth, width = int(m.group(1)), int(m.group(2))
        if depth < 10 or (depth - 4) % 6 or width < 1:
            raise UsageError(f"invalid model spec {text!r}: a wide ResNet's depth is 6n+4 (10, 16, 22, 28, 40, ...) "
                             "and its width factor at least 1")
        return (str(depth), str(width))
    if arch == "vit":
        m = re.fullmatch(VIT_BODY, body or "")
        if not m:
            raise UsageError(f"invalid model spec {text!r}: vit takes p<patch>-d<width>-l<blocks>-h<heads>"
                             "[-m<mlp ratio>]", hint="e.g. vit:p4-d64-l4-h4 or vit:p4-d64-l4-h4-m2")
        values = [int(v) for v in m.groups() if v is not None]
        if min(values) <= 0:
            raise UsageError(f"invalid model spec {text!r}: vit's numbers must be positive")
        patch, width, _, heads = values[:4]
        if width % heads or width % 4:
            raise UsageError(f"invalid model spec {text!r}: vit's width d{width} must be a multiple of its "
                             f"{heads} heads and of 4 (the 2-D sin-cos position embedding)")
        return tuple(body.split("-"))  # type: ignore[union-attr]
    if body is not None:
        raise UsageError(f"invalid model spec {text!r}: {arch} takes no ':' arguments", hint=hint)
    return ()


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
    # Baselines (Appendix B). Weight-training baselines (imp, set, rigl, movement) train weights with Adam at
    # weight_lr (scores, where a method has them, at lr); saliency baselines use saliency_batches minibatches.
    weight_lr: float = 1e-3
    saliency_batches: int = 5  # snip: batches summed; grasp: batches in each of its two collections
    grasp_temperature: float = 200.0  # grasp divides the logits by this
    synflow_rounds: int = 100  # synflow: pruning rounds on the exponential density schedule
    imp_rounds: int = 5  # imp: rounds, each trains epochs / imp_rounds epochs (100 / 5 = 20)
    regrow_every: int = 100  # set, rigl: optimisation steps between prune-and-regrow updates
    regrow_fraction: float = 0.3  # set, rigl: fraction of active weights pruned (and regrown) per update
    movement_warmup: float = 0.1  # movement: fraction of steps kept dense before the cubic schedule starts
    movement_cooldown: float = 0.1  # movement: fraction of final steps at the target density
    movement_noise: float = 1e-6  # movement: std of the Gaussian noise on the zero score init (tie-breaking)
    matched_to: str | None = None  # --match-sparsity: the ticket whose achieved sparsity this run matches
    precision: str = "fp32"  # fp32, or bf16 autocast of the training forward pass (score methods)

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
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
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
    "weight_lr": 1e-3,
    "saliency_batches": 5,
    "grasp_temperature": 200.0,
    "synflow_rounds": 100,
    "imp_rounds": 5,
    "regrow_every": 100,
    "regrow_fraction": 0.3,
    "movement_warmup": 0.1,
    "movement_cooldown": 0.1,
    "movement_noise": 1e-6,
    "match_sparsity": None,
    "match_sparsity_per_layer": False,
    "device": "auto",
    "precision": "fp32",
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
    from ticketcli.models import MODELS, import_factory, takes_num_classes

    s = settings
    METHODS.get(s["method"])
    INIT_SCHEMES.get(s["init"])
    info = DATASETS.get(s["dataset"])
    seed = _check_int(s["seed"], "--seed", 0)

    if s["model"] is None:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes), bias=bool(s["bias"]))
    else:
        model = ModelSpec.parse(str(s["model"]), bias=bool(s["bias"])).with_data(info.shape, info.classes)
        if model.arch == "user" and model.classes is None and takes_num_classes(import_factory(str(model.factory))):
            # e.g. torchvision.models:resnet18 -> torchvision.models:resnet18@3x32x32-10, built with num_classes=10
            model = replace(model, input=tuple(info.shape), classes=info.classes)
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
        weight_lr=_check_positive(s["weight_lr"], "--weight-lr"),
        saliency_batches=_check_int(s["saliency_batches"], "--saliency-batches", 1),
        grasp_temperature=_check_positive(s["grasp_temperature"], "--grasp-temperature"),
        synflow_rounds=_check_int(s["synflow_rounds"], "--synflow-rounds", 1),
        imp_rounds=_check_int(s["imp_rounds"], "--imp-rounds", 1),
        regrow_every=_check_int(s["regrow_every"], "--regrow-every", 1),
        regrow_fraction=_check_fraction(s["regrow_fraction"], "--regrow-fraction", lo_open=False),
        movement_warmup=_check_fraction(s["movement_warmup"], "--movement-warmup", lo_open=False),
        movement_cooldown=_check_fraction(s["movement_cooldown"], "--movement-cooldown", lo_open=False),
        movement_noise=_check_positive(s["movement_noise"], "--movement-noise", allow_zero=True),
        precision=check_precision(s["precision"]),
    )
    check_method_options(method)
    if method.movement_warmup + method.movement_cooldown >= 1:
        raise UsageError("--movement-warmup + --movement-cooldown must be < 1")
    if s["match_sparsity"] is not None:
        method = matched_sparsity(method, str(s["match_sparsity"]), per_layer=bool(s["match_sparsity_per_layer"]))
    elif s["match_sparsity_per_layer"]:
        raise UsageError("--match-sparsity-per-layer needs --match-sparsity TICKET")
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


# Options that only some methods read (the score-method variants of issue 4, the baselines' hyper-parameters of
# issue 3). Each method class lists the ones it reads in `options`; build_extract_spec refuses the others.
METHOD_OPTIONS = ("aug_density", "layer_densities", "aux_width", "frozen_aux", "signed_scores", "project_final",
                  "global_topk", "iter_tolerance", "max_rounds", "weight_lr", "saliency_batches",
                  "grasp_temperature", "synflow_rounds", "imp_rounds", "regrow_every", "regrow_fraction",
                  "movement_warmup", "movement_cooldown", "movement_noise", "precision")


PRECISIONS = ("fp32", "bf16")


def check_precision(value: Any) -> str:
    if value not in PRECISIONS:
        raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return str(value)


def option_flag(field: str) -> str:
    return "--global" if field == "global_topk" else "--" + field.replace("_", "-")


def method_reads(name: str, field: str) -> bool:
    from ticketcli.methods import METHODS

    return field in getattr(METHODS.get(name), "options", ())


def check_method_options(method: MethodSpec) -> None:
    """Refuse a method-specific option set (to other than its default) for a method that would ignore it."""
    from dataclasses import fields

    from ticketcli.methods import METHODS

    defaults = {f.name: f.default for f in fields(MethodSpec)}
    for field in METHOD_OPTIONS:
        if getattr(method, field) != defaults[field] and not method_reads(method.name, field):
            users = [n for n in METHODS.names() if method_reads(n, field)]
            raise UsageError(f"{option_flag(field)} applies to {', '.join(users) or 'no method'} only, "
                             f"not {method.name}")


def matched_sparsity(method: MethodSpec, path: str, *, per_layer: bool) -> MethodSpec:
    """The method at another ticket's achieved sparsity: global, or per layer as --layer-densities (Appendix G)."""
    from dataclasses import replace

    from ticketcli import ticket as ticket_io
    from ticketcli.models import layer_of

    if method.layer_densities is not None:
        raise UsageError("--match-sparsity sets the densities itself; drop --layer-densities")
    if per_layer and not method_reads(method.name, "layer_densities"):
        raise UsageError(f"--match-sparsity-per-layer needs per-layer densities, which {method.name} does not take",
                         hint="use --match-sparsity alone (global)")
    tk = ticket_io.load(path)
    if per_layer:
        kept: dict[str, list[int]] = {}
        for name, m in tk.masks.items():  # masks are in named_parameters order, so layers come out in order
            k = kept.setdefault(layer_of(name), [0, 0])
            k[0], k[1] = k[0] + int(m.sum()), k[1] + m.numel()
        densities = tuple(a / b for a, b in kept.values())
        return replace(method, sparsity=1.0 - sum(a for a, _ in kept.values()) / sum(b for _, b in kept.values()),
                       layer_densities=densities, matched_to=path)
    kept_total = sum(int(m.sum()) for m in tk.masks.values())
    total = sum(m.numel() for m in tk.masks.values())
    if kept_total == 0:
        raise UsageError(f"{path} keeps no weights; there is no sparsity to match")
    return replace(method, sparsity=1.0 - kept_total / total, matched_to=path)


__all__ = ["ModelSpec", "InitSpec", "DataSpec", "MethodSpec", "RunSpec", "build_extract_spec",
           "merge_settings", "load_config", "parse_floats", "data_location"]
