"""Frozen run specifications, spec-string parsing and TOML configs: the only place that knows about flags."""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ticketcli.bounded import read_regular_file
from ticketcli.errors import UsageError
from ticketcli.ranges import BOOL, FLOAT, INT, NUMBERS, TEXT, Range, show

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PAPER_HIDDEN = (256, 256, 256)  # three width-256 hidden layers (paper, Appendix B)
MAX_SPEC_CHARS = 1000  # a model spec longer than this is refused (the longest real ones are under 100)
MAX_SPEC_DIGITS = 9  # every number in a built-in spec is below 10^9 (int() of a 5000-digit string raises)
MAX_PARAMS = 2 * 10**9  # default --max-params: a bigger model is refused before anything is allocated


@dataclass(frozen=True)
class ModelSpec:
    """A model spec string, parsed. Forms (the built-in ones take "+bias"):
    "mlp:784-256-256-256-10" (widths; also "+res" and "+norm=batch|layer|rms"), "lenet300" (784-300-100-10),
    "conv2" / "conv4" / "conv6", "vgg:64-64-M-128-128-M-256-256-M" (3x3 conv widths, M = 2x2 max-pool),
    "resnet20", "resnet18", "wrn:16-4" (depth-width), "vit:p4-d64-l4-h4" (patch, width, blocks, heads; "-m2" sets
    the MLP ratio), each optionally "@CxHxW-K" (input shape and classes; filled in from the dataset when absent),
    "gpt-nano:l2-d64-h4-c64" (blocks, width, heads, context; "-m2" the MLP ratio, "-v96" the vocabulary, which the
    text fills in) and "pkg.module:factory" (a user's function returning an nn.Module; "@CxHxW-K" passes
    num_classes=K). Suffixes print in one canonical order: +res, +norm=..., +bias."""

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
        return self.arch in ("mlp", "user", *TEXT_ARCHS) or (self.input is not None and self.classes is not None)

    def with_data(self, shape: tuple[int, int, int], classes: int) -> ModelSpec:
        """Fill in the input shape and class count from the dataset where the spec leaves them open."""
        if self.arch in ("mlp", "user", *TEXT_ARCHS) or self.resolved:
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
        if len(t) > MAX_SPEC_CHARS:
            raise UsageError(f"model spec of {len(t)} characters is too long (at most {MAX_SPEC_CHARS})")
        if re.search(f"[0-9]{{{MAX_SPEC_DIGITS + 1}}}", t):
            raise UsageError(
                f"invalid model spec {_clip(t)!r}: numbers in a model spec have at most {MAX_SPEC_DIGITS} digits"
            )
        geometry_re = r"(?:@([0-9]+)x([0-9]+)x([0-9]+)-([0-9]+))?"
        factory = re.fullmatch(
            r"((?:[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*)" + geometry_re, t
        )
        if factory and factory.group(1).partition(":")[0] not in MODELS:  # "vit:p4" is a built-in, not a module
            if bias:
                raise UsageError("--bias applies to built-in models; a factory's modules decide their own biases")
            shape, classes = _geometry(text, factory.group(2, 3, 4, 5))
            return cls(arch="user", widths=(), factory=factory.group(1), input=shape, classes=classes)
        hint = (
            "expected e.g. mlp:784-256-256-256-10, mlp:64-128-10+bias, mlp:784-256-256-10+res+norm=layer, "
            "lenet300, conv6, vgg:64-64-M-128-128-M-256-256-M, resnet20, wrn:16-4, vit:p4-d64-l4-h4, "
            "conv6@3x32x32-10 or my_pkg.my_module:build_net"
        )
        arch_re = r"([a-z][a-z0-9_]*(?:-[a-z][a-z0-9_]*)*)"  # "gpt-nano" has a dash
        m = re.fullmatch(
            arch_re + r"(?::([0-9A-Za-z]+(?:-[0-9A-Za-z]+)*))?" + geometry_re + r"((?:\+[a-z]+(?:=[a-z]+)?)*)", t
        )
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
                raise UsageError(
                    f"invalid model spec {text!r}: +res adds identity skips only around hidden layers "
                    "whose input and output widths agree, and this mlp has none",
                    hint="e.g. mlp:784-256-256-256-10+res",
                )
            return cls(arch="mlp", widths=widths, bias=has_bias, residual=suffix["res"], norm=suffix["norm"])
        layers = _body(text, arch, body, hint)
        return cls(arch=arch, widths=(), bias=has_bias, layers=layers, input=shape, classes=classes)


def _clip(text: str, n: int = 80) -> str:
    """At most n characters of a user's text, for an error line."""
    return text if len(text) <= n else text[: n - 3] + "..."


@dataclass(frozen=True)
class ModelPolicy:
    """What a reader of a ticket may do to rebuild its network. A ticket never decides that code runs: a model
    factory (pkg.module:function) it names is imported only with trust_model_code or when `model` (the --model
    given on the command line) names that same factory."""

    trust_model_code: bool = False  # --trust-model-code: import and call the factory the ticket names
    model: str | None = None  # --model: with a ticket, confirms the ticket's own factory (same effect)
    max_params: int = MAX_PARAMS  # refuse a model with more parameters, before anything is built


def build_model_policy(
    *, trust_model_code: bool = False, model: str | None = None, max_params: int | None = None
) -> ModelPolicy:
    """A validated ModelPolicy from flag values (None: the default limit)."""
    limit = MAX_PARAMS if max_params is None else check_setting("max_params", max_params)
    return ModelPolicy(trust_model_code=bool(trust_model_code), model=model, max_params=limit)


SPEC_NORMS = ("batch", "layer", "rms")  # mlp "+norm=..." (models.py maps them to modules)


def _suffixes(text: str, raw: str) -> dict[str, Any]:
    """ "+res+norm=layer+bias" in any order, each at most once -> {"res", "norm", "bias"}."""
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
            raise UsageError(
                f"invalid model spec {text!r}: unknown suffix +{item}",
                hint=f"suffixes: +res, +norm={'|'.join(SPEC_NORMS)}, +bias",
            )
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
GPT_BODY = r"l([0-9]+)-d([0-9]+)-h([0-9]+)-c([0-9]+)(?:-m([0-9]+))?(?:-v([0-9]+))?"
TEXT_ARCHS = ("gpt-nano",)  # character-level models: their vocabulary comes from a text, not from "@CxHxW-K"


def _body(text: str, arch: str, body: str | None, hint: str) -> tuple[str, ...]:
    """The ':' arguments of a built-in other than mlp, validated, as the tuple ModelSpec.layers stores."""
    if arch == "vgg":
        if body is None or not all(p == "M" or (p.isdigit() and int(p) > 0) for p in body.split("-")):
            raise UsageError(
                f"invalid model spec {text!r}: vgg takes positive conv widths and M (max-pool)",
                hint="e.g. vgg:64-64-M-128-128-M-256-256-M",
            )
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
            raise UsageError(
                f"invalid model spec {text!r}: a wide ResNet's depth is 6n+4 (10, 16, 22, 28, 40, ...) "
                "and its width factor at least 1"
            )
        return (str(depth), str(width))
    if arch == "vit":
        m = re.fullmatch(VIT_BODY, body or "")
        if not m:
            raise UsageError(
                f"invalid model spec {text!r}: vit takes p<patch>-d<width>-l<blocks>-h<heads>[-m<mlp ratio>]",
                hint="e.g. vit:p4-d64-l4-h4 or vit:p4-d64-l4-h4-m2",
            )
        values = [int(v) for v in m.groups() if v is not None]
        if min(values) <= 0:
            raise UsageError(f"invalid model spec {text!r}: vit's numbers must be positive")
        patch, width, _, heads = values[:4]
        if width % heads or width % 4:
            raise UsageError(
                f"invalid model spec {text!r}: vit's width d{width} must be a multiple of its "
                f"{heads} heads and of 4 (the 2-D sin-cos position embedding)"
            )
        return tuple(body.split("-"))  # type: ignore[union-attr]
    if arch in TEXT_ARCHS:
        if not re.fullmatch(GPT_BODY, body or ""):
            raise UsageError(
                f"invalid model spec {text!r}: gpt-nano takes l<blocks>-d<width>-h<heads>-c<context>"
                "[-m<mlp ratio>][-v<vocabulary>]",
                hint="e.g. gpt-nano:l2-d64-h4-c64",
            )
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
    max_params: int = MAX_PARAMS  # refuse a bigger model before building it


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
    "max_params": None,
}

SEED = INT(0, 2**63, hi_open=True)  # a seed seeds torch generators (64-bit) and is stored in tickets
EPOCHS, BATCH = INT(1, 100_000), INT(1, 1 << 20)
LR = FLOAT(
    0, math.inf, lo_open=True, hi_open=True
)  # any finite rate: a too large one diverges, which runs catch (exit 1)
# What every setting may be, for flags and config files alike (flags are checked against the same table); the
# README's "Config files and value ranges" lists it. train-weak and drift share the names they have in common.
RANGES: dict[str, Range] = {
    "method": TEXT,
    "model": TEXT,
    "init": TEXT,
    "weights": TEXT,
    "dataset": TEXT,
    "data_dir": TEXT,
    "match_sparsity": TEXT,
    "device": TEXT,
    "precision": TEXT,
    "bias": BOOL,
    "download": BOOL,
    "frozen_aux": BOOL,
    "signed_scores": BOOL,
    "project_final": BOOL,
    "global_topk": BOOL,
    "match_sparsity_per_layer": BOOL,
    "sparsity": FLOAT(0, 1, lo_open=True, hi_open=True),
    "layer_densities": NUMBERS(0, 1, lo_open=True),
    "aug_density": FLOAT(0, 1, lo_open=True),
    "aux_width": INT(1, 64),
    "iter_tolerance": FLOAT(0, 1, lo_open=True, hi_open=True),
    "max_rounds": INT(1, 1000),
    "seed": SEED,
    "max_params": INT(1, 10**12),  # --max-params: refuse bigger models before building them (default 2e9)
    "init_k": FLOAT(1e-6, 1e6),  # fan_in scale: the init bound is gain / sqrt(k * fan_in)
    "n_extract": INT(1, 10_000_000),
    "n_val": INT(1, 10_000_000),
    "epochs": EPOCHS,
    "batch_size": BATCH,
    "lr": LR,
    "betas": NUMBERS(0, 1, hi_open=True),
    "eps": FLOAT(0, 1, lo_open=True),
    "weight_decay": FLOAT(0, 100),
    "weight_lr": LR,
    "saliency_batches": INT(1, 10_000),
    "grasp_temperature": FLOAT(0, 1e6, lo_open=True),
    "synflow_rounds": INT(1, 10_000),
    "imp_rounds": INT(1, 1000),
    "regrow_every": INT(1, 10_000_000),
    "regrow_fraction": FLOAT(0, 1, hi_open=True),
    "movement_warmup": FLOAT(0, 1, hi_open=True),
    "movement_cooldown": FLOAT(0, 1, hi_open=True),
    "movement_noise": FLOAT(0, 1),
    # drift only (train-weak takes epochs, lr, batch_size from above)
    "steps": INT(1, 10_000_000),
    "log_every": INT(1, 10_000_000),
    "probe_size": BATCH,
    "momentum": FLOAT(0, 1, hi_open=True),
    "clip": FLOAT(0, 1e6, lo_open=True),
    "zero_threshold": FLOAT(0, 1e6, lo_open=True),
    "seeds": SEED,
    # sweep-k only
    "layerwise": INT(0, 10_000),
    "workers": INT(1, 4096),
    "threads": INT(1, 4096),
}
MAX_CONFIG = 1 << 20  # bytes of a TOML config file


def check_setting(key: str, value: Any, what: str | None = None) -> Any:
    """`value` checked against RANGES[key] and normalised; `what` names it in the error (default: its flag)."""
    return RANGES[key].check(value, what or option_flag(key))


def user_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ticketcli"


def data_search_dirs(data_dir: str | None) -> tuple[str, ...]:
    """The data resolution order: --data-dir, $TICKET_DATA, the user cache, then system copies."""
    from ticketcli.data import SYSTEM_DIRS

    dirs = [data_dir, os.environ.get("TICKET_DATA"), str(user_cache_dir()), *SYSTEM_DIRS]
    return tuple(str(d) for d in dirs if d)


def data_location(data_dir: str | None, download: bool) -> dict[str, Any]:
    """DataSpec's where-to-find-it fields, resolved from flags and the environment here at the edge."""
    return {
        "search_dirs": data_search_dirs(data_dir),
        "download": bool(download),
        "download_dir": str(user_cache_dir()),
    }


def load_config(path: str | Path | None) -> dict[str, Any]:
    """Read a flat TOML run config; keys are option names (dashes or underscores), values are checked against
    RANGES. Only a regular file of at most 1 MiB is read (no FIFO, no device)."""
    if path is None:
        return {}
    p = Path(path)
    raw = read_regular_file(p, MAX_CONFIG, "config file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"config file {p} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {p} is not valid TOML: {str(e).splitlines()[0][:200]}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise UsageError(f"config file {p} nests arrays or tables too deeply (a run config is flat)") from None
    out: dict[str, Any] = {}
    for key, value in data.items():
        k = key.replace("-", "_")
        if k not in EXTRACT_DEFAULTS:
            raise UsageError(
                f"unknown key {show(key)} in {p}", hint=f"valid keys: {', '.join(sorted(EXTRACT_DEFAULTS))}"
            )
        if k in out:
            raise UsageError(f"{p} sets {k} twice (with dashes and with underscores)")
        check_setting(k, value, f"{p}: {k}")
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


def build_extract_spec(settings: dict[str, Any]) -> RunSpec:
    """Validate merged settings and freeze them into a RunSpec."""
    from ticketcli.data import DATASETS  # the dataset decides the default model's input and output widths
    from ticketcli.init import INIT_SCHEMES
    from ticketcli.methods import METHODS
    from ticketcli.models import MODELS, import_factory, takes_num_classes

    s = {k: v if v is None or k not in RANGES else check_setting(k, v) for k, v in settings.items()}
    METHODS.get(s["method"])
    INIT_SCHEMES.get(s["init"])
    info = DATASETS.get(s["dataset"])

    if s["model"] is None:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes), bias=s["bias"])
    else:
        model = ModelSpec.parse(str(s["model"]), bias=bool(s["bias"])).with_data(info.shape, info.classes)
        if model.arch == "user" and model.classes is None and takes_num_classes(import_factory(str(model.factory))):
            # e.g. torchvision.models:resnet18 -> torchvision.models:resnet18@3x32x32-10, built with num_classes=10
            model = replace(model, input=tuple(info.shape), classes=info.classes)
    if model.arch != "user" and model.arch not in MODELS:
        raise UsageError(
            f"invalid model spec {s['model']!r}: unknown model {model.arch!r}",
            hint=f"models: {', '.join(MODELS.names())}, or a factory my_pkg.my_module:build_net",
        )
    if len(s["betas"]) != 2:
        raise UsageError(f"--betas must be two numbers in [0, 1), got {show(settings['betas'])}")

    method = MethodSpec(
        name=s["method"],
        sparsity=s["sparsity"],
        layer_densities=s["layer_densities"],
        aug_density=s["aug_density"],
        aux_width=s["aux_width"],
        frozen_aux=s["frozen_aux"],
        signed_scores=s["signed_scores"],
        project_final=s["project_final"],
        global_topk=s["global_topk"],
        iter_tolerance=s["iter_tolerance"],
        max_rounds=s["max_rounds"],
        epochs=s["epochs"],
        lr=s["lr"],
        batch_size=s["batch_size"],
        betas=(s["betas"][0], s["betas"][1]),
        eps=s["eps"],
        weight_decay=s["weight_decay"],
        weight_lr=s["weight_lr"],
        saliency_batches=s["saliency_batches"],
        grasp_temperature=s["grasp_temperature"],
        synflow_rounds=s["synflow_rounds"],
        imp_rounds=s["imp_rounds"],
        regrow_every=s["regrow_every"],
        regrow_fraction=s["regrow_fraction"],
        movement_warmup=s["movement_warmup"],
        movement_cooldown=s["movement_cooldown"],
        movement_noise=s["movement_noise"],
        precision=check_precision(s["precision"]),
    )
    check_method_options(method)
    if method.movement_warmup + method.movement_cooldown >= 1:
        raise UsageError("--movement-warmup + --movement-cooldown must be < 1")
    if s["match_sparsity"] is not None:
        method = matched_sparsity(method, s["match_sparsity"], per_layer=s["match_sparsity_per_layer"])
    elif s["match_sparsity_per_layer"]:
        raise UsageError("--match-sparsity-per-layer needs --match-sparsity TICKET")
    data = DataSpec(
        name=s["dataset"],
        n_extract=s["n_extract"],
        n_val=s["n_val"],
        split_seed=s["seed"],
        **data_location(s["data_dir"], s["download"]),
    )
    init = InitSpec(scheme=s["init"], k=s["init_k"], seed=s["seed"])
    return RunSpec(
        model=model,
        init=init,
        data=data,
        method=method,
        device=s["device"],
        weights=s["weights"],
        max_params=MAX_PARAMS if s["max_params"] is None else s["max_params"],
    )


# Options that only some methods read (the score-method variants of issue 4, the baselines' hyper-parameters of
# issue 3). Each method class lists the ones it reads in `options`; build_extract_spec refuses the others.
METHOD_OPTIONS = (
    "aug_density",
    "layer_densities",
    "aux_width",
    "frozen_aux",
    "signed_scores",
    "project_final",
    "global_topk",
    "iter_tolerance",
    "max_rounds",
    "weight_lr",
    "saliency_batches",
    "grasp_temperature",
    "synflow_rounds",
    "imp_rounds",
    "regrow_every",
    "regrow_fraction",
    "movement_warmup",
    "movement_cooldown",
    "movement_noise",
    "precision",
)


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
            raise UsageError(
                f"{option_flag(field)} applies to {', '.join(users) or 'no method'} only, not {method.name}"
            )


def matched_sparsity(method: MethodSpec, path: str, *, per_layer: bool) -> MethodSpec:
    """The method at another ticket's achieved sparsity: global, or per layer as --layer-densities (Appendix G)."""
    from dataclasses import replace

    from ticketcli import ticket as ticket_io
    from ticketcli.models import layer_of

    if method.layer_densities is not None:
        raise UsageError("--match-sparsity sets the densities itself; drop --layer-densities")
    if per_layer and not method_reads(method.name, "layer_densities"):
        raise UsageError(
            f"--match-sparsity-per-layer needs per-layer densities, which {method.name} does not take",
            hint="use --match-sparsity alone (global)",
        )
    counts = ticket_io.scan(path).counts  # counted from the packed bits: nothing imported, built or unpacked
    if per_layer:
        kept: dict[str, list[int]] = {}
        for name, (k_, n_) in counts.items():  # in named_parameters order, so layers come out in order
            k = kept.setdefault(layer_of(name), [0, 0])
            k[0], k[1] = k[0] + k_, k[1] + n_
        densities = tuple(a / b for a, b in kept.values())
        return replace(
            method,
            sparsity=1.0 - sum(a for a, _ in kept.values()) / sum(b for _, b in kept.values()),
            layer_densities=densities,
            matched_to=path,
        )
    kept_total = sum(k for k, _ in counts.values())
    total = sum(n for _, n in counts.values())
    if kept_total == 0:
        raise UsageError(f"{path} keeps no weights; there is no sparsity to match")
    return replace(method, sparsity=1.0 - kept_total / total, matched_to=path)


__all__ = [
    "ModelSpec",
    "InitSpec",
    "DataSpec",
    "MethodSpec",
    "RunSpec",
    "build_extract_spec",
    "merge_settings",
    "load_config",
    "parse_floats",
    "data_location",
    "RANGES",
    "check_setting",
]
