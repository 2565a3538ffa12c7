"""Frozen run specifications, whose fields hold the defaults of every run setting: the bottom layer, importing
nothing of the package but its errors and the spec-string syntax. The options that fill them are declared in
ticketcli/settings/ (their ranges, help, readers); turning flags, config files and registry look-ups into specs is
resolve.py's work."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.specs import syntax
from ticketcli.specs.ranges import Range

PAPER_HIDDEN = (256, 256, 256)  # three width-256 hidden layers (paper, Appendix B)
MAX_PARAMS = 2 * 10**9  # default --max-params: a bigger model is refused before anything is allocated
MODULE_INIT = "module"  # --init module: a user factory's weights as it created them, not redrawn
FACTORY_SEED = 20260102  # the global RNG seed a factory runs under: its own default init is then reproducible


@dataclass(frozen=True)
class ModelSpec:
    """A model spec string, parsed (models.parse_model reads one). Forms (the built-in ones take "+bias"):
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
    # whether the dataset (or "@CxHxW-K") gives its input shape and classes: its family's `sized`, which
    # models.registry.parse_model copies here (False for a character-level model, sized by its text); not part of
    # the spec's identity, since the name already decides it
    sized: bool = field(default=True, compare=False, repr=False)

    @property
    def resolved(self) -> bool:
        """Whether the spec fixes every shape (an mlp's widths do; the others need @CxHxW-K)."""
        return self.arch in ("mlp", "user") or not self.sized or (self.input is not None and self.classes is not None)

    def with_data(self, shape: tuple[int, int, int], classes: int) -> ModelSpec:
        """Fill in the input shape and class count from the dataset where the spec leaves them open."""
        if self.resolved:
            return self
        c, h, w = shape  # a list from a caller becomes the tuple a frozen spec holds
        return replace(self, input=(c, h, w), classes=int(classes))

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

    def to_dict(self) -> JsonObject:
        d: JsonObject = {"spec": self.to_string(), "arch": self.arch}
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
    def from_factory(cls, text: str, match: re.Match[str], *, bias: bool | None = None) -> ModelSpec:
        """A user factory's spec from a FACTORY_SPEC match of `text` (models.parse_model decides it is no built-in);
        a built-in model's spec is its family's to parse (models.registry.parse_model)."""
        if bias:
            raise UsageError("--bias applies to built-in models; a factory's modules decide their own biases")
        shape, classes = syntax.geometry(text, match.group(2, 3, 4, 5))
        return cls(arch="user", widths=(), factory=match.group(1), input=shape, classes=classes)


@dataclass(frozen=True)
class ModelPolicy:
    """What a reader of a ticket may do to rebuild its network. A ticket never decides that code runs: a model
    factory (pkg.module:function) it names is imported only with trust_model_code or when `model` (the --model
    given on the command line) names that same factory."""

    trust_model_code: bool = False  # --trust-model-code: import and call the factory the ticket names
    model: str | None = None  # --model: with a ticket, confirms the ticket's own factory (same effect)
    max_params: int = MAX_PARAMS  # refuse a model with more parameters, before anything is built
    max_memory: int | None = None  # bytes a built-in model may need (budget.py); None: half the physical memory
    train_batch: int = 0  # examples per training step of the command rebuilding it (0: it only evaluates)


@dataclass(frozen=True)
class InitSpec:
    scheme: str = "scaled-kaiming-uniform"  # init registry name; the paper's default
    k: float = 0.5  # fan_in is scaled by k (paper: k = 1/2)
    seed: int = 0  # the weights' seed; the whole network is rebuilt from it

    def to_dict(self) -> JsonObject:
        if self.scheme == MODULE_INIT:  # the factory's own weights: no k or gain shaped them, its fixed seed did
            return {"scheme": self.scheme, "factory_seed": FACTORY_SEED, "seed": self.seed}
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
    text: str | None = None  # --dataset text: --text FILE (None: the fortunes files, found in search_dirs)
    context: int | None = None  # --dataset text: characters per block, the model's context (from its spec)


@dataclass(frozen=True)
class ReaderSpec:
    """How a saved ticket is rebuilt (`ticket evaluate`, `export`, `train-weak` and the API's Ticket.evaluate,
    build, apply, splits): where its dataset is found, where it runs, the checkpoint it was extracted from, which
    model code may run and at what cost, and torch's CPU threads (None: torch's own). Built once at the edge
    (settings.reader.build_reader_spec) and passed down whole."""

    data: DataSpec = DataSpec()
    device: str = "auto"
    weights: str | None = None  # --weights: the checkpoint the ticket was extracted from
    policy: ModelPolicy = ModelPolicy()
    threads: int | None = None


@dataclass(frozen=True)
class Option:
    """One method's own hyper-parameter, declared in its registry entry (methods/registry.py): its config key and API
    keyword `name` (the flag: --name-with-dashes), default, range (the flag parses what the range holds), help and
    --help panel. `after`: the setting it follows in --help, `ticket list settings` and the ticket's record (None:
    after the shared training settings, where the baselines' own are). `example`: a valid value other than the
    default whose effect shows on a tiny run (tests/test_options.py sets it). `when_set`: recorded (a ticket's method
    record, a run's identity) only when it is not at its default, so that the records of runs that leave it off are
    the same as before it existed."""

    name: str
    default: Any
    range: Range
    help: str
    example: Any
    panel: str = "Variants"
    after: str = "weight_lr"
    when_set: bool = False


@dataclass(frozen=True)
class MethodSpec:
    """The method and the settings several methods share; `options`: the chosen method's own hyper-parameters (its
    registry entry's `Option`s) by name, read through methods.registry.option (a missing one: its default)."""

    name: str = "augmented"  # methods registry name
    sparsity: float = 0.9  # requested sparsity = 1 - keep density
    layer_densities: tuple[float, ...] | None = None  # per-layer keep densities (edge-popup, random)
    signed_scores: bool = False  # rank raw scores S instead of |S| (the "NoAbs" ablation)
    global_topk: bool = False  # one top-k across all layers instead of one per layer
    epochs: int = 100  # score-training epochs (Appendix B)
    lr: float = 1e-2  # Adam learning rate for scores (Appendix B)
    batch_size: int = 512
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    score_init: str = "kaiming-uniform"  # U[-1/sqrt(fan_in), 1/sqrt(fan_in)], as allenai/hidden-networks
    # Weight-training baselines (imp, set, rigl, movement) train weights with Adam at weight_lr (scores at lr)
    weight_lr: float = 1e-3
    matched_to: str | None = None  # --match-sparsity: the ticket whose achieved sparsity this run matches
    precision: str = "fp32"  # fp32, or bf16 autocast of the training forward pass (score methods)
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def density(self) -> float:
        return 1.0 - self.sparsity


@dataclass(frozen=True)
class WeightOptim:
    """Optimiser for weight training; the paper's protocol (docs/method.md): Adam, lr 1e-3, batch 512."""

    name: str = "adam"  # adam | sgd
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0  # sgd only

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


def field_default(cls: type, path: str) -> Any:
    """The default of dataclass field `path` of `cls` (calling its default_factory if it has one), following dots
    into a nested spec's default ("optim.lr")."""
    name, *rest = path.split(".")
    f = next(f for f in fields(cls) if f.name == name)
    value = f.default_factory() if f.default_factory is not MISSING else f.default
    for part in rest:
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class RunSpec:
    model: ModelSpec
    init: InitSpec
    data: DataSpec
    method: MethodSpec
    device: str = "auto"  # auto | cpu | cuda | cuda:N | mps
    weights: str | None = None  # frozen weights from this checkpoint instead of the seed
    max_params: int = MAX_PARAMS  # refuse a bigger model before building it
    max_memory: int | None = None  # bytes a built-in model may need (budget.py); None: half the physical memory
