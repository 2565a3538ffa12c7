"""METHODS, the extraction methods by name, torch-free: each registered below with its one-line description, the
class that implements it (imported only when the method is used, MethodInfo.load), the shared settings it reads
(settings/run.py) and its own hyper-parameters (`Option`s, declared here). `--method`'s choices, `ticket list
methods`, every method option's flag, config key, API keyword and help, the refusal of an option a method does not
read and its tickets' records read it without torch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, cast

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.registry import Registry, load
from ticketcli.specs.ranges import BOOL, CHOICE, FLOAT, INT, TEXT
from ticketcli.specs.run import MethodSpec, Option

if TYPE_CHECKING:
    from ticketcli.methods.base import Method


@dataclass(frozen=True)
class MethodInfo:
    description: str  # its one line in `ticket list methods`
    implementation: str  # "package.module:Class", a Method subclass
    reads: tuple[str, ...] = ()  # the shared settings it reads beyond name and sparsity (a family's tuple below)
    options: tuple[Option, ...] = ()  # its own hyper-parameters
    check: Callable[[Mapping[str, Any]], None] = lambda options: None  # what its options must hold together

    def load(self) -> type[Method]:
        """Its Method subclass, its module (and torch) imported now."""
        return cast("type[Method]", load(self.implementation))

    def read(self) -> frozenset[str]:
        """Every option it reads: the shared ones and its own."""
        return frozenset(self.reads) | {o.name for o in self.options}


# The shared settings each family reads (settings/run.py declares them)
TRAINING = ("epochs", "batch_size", "betas", "eps", "weight_decay")  # an Adam training loop
SCORES = ("signed_scores", "global_topk", *TRAINING, "lr", "precision")  # score training (Adam on the scores at --lr)
WEIGHTS = ("layer_densities", *TRAINING, "weight_lr")  # weight training (Adam on the weights at --weight-lr)
SALIENCY = ("layer_densities", "batch_size")  # gradients summed over minibatches

# Options whose meaning another option carries for some methods: refusing one names the sibling the method reads
SIBLINGS = (("lr", "weight_lr"), ("imp_rounds", "max_rounds", "synflow_rounds"))

# Options two methods share
AUX = (
    Option(
        "aux_width",
        1,
        INT(1, 64),
        "Auxiliary score width as a multiple m of the original, i.e. scores of width n + m*n per layer (the "
        "paper's Aug-x1/x2/x4).",
        2,
        "Method",
        "layer_densities",
    ),
    Option(
        "frozen_aux",
        False,
        BOOL,
        "Auxiliary scores keep their random init and are never updated. Under Algorithm 1 they get zero gradient "
        "anyway, so this only differs from the default with --weight-decay > 0.",
        True,
        after="layer_densities",
    ),
)
# The structured masks (selection/structure.py) of every method that selects by score, at every selection step
SHAPED = (
    Option(
        "structure",
        None,
        TEXT,
        "N:M structured mask, e.g. 2:4: exactly N of every M consecutive weights along each row's input dimension "
        "kept (a convolution's is in_channels*kh*kw), at every selection step. It implies the sparsity 1 - N/M: "
        "a different --sparsity is refused. Every layer's input width must be a multiple of M.",
        "2:4",
        "Method",
        "sparsity",
        when_set=True,
    ),
    Option(
        "block",
        None,
        TEXT,
        "Block-structured mask, e.g. 4x4: whole blocks of R outputs by C inputs kept or dropped, each scored by "
        "the mean of its scores, at every selection step; --sparsity is the fraction of blocks dropped (edge "
        "blocks of a layer that R or C does not divide are smaller).",
        "4x4",
        "Method",
        "sparsity",
        when_set=True,
    ),
)
SALIENCY_BATCHES = Option(
    "saliency_batches",
    5,
    INT(1, 10_000),
    "snip: minibatches whose gradients are summed; grasp: minibatches in each of its collections (two with "
    "--grasp-data separate, one with shared).",
    1,
)
REGROW = (
    Option("regrow_every", 100, INT(1, 10_000_000), "Optimisation steps between prune-and-regrow updates.", 2),
    Option(
        "regrow_fraction",
        0.3,
        FLOAT(0, 1, hi_open=True),
        "Fraction of active weights pruned by magnitude and regrown per update.",
        0.6,
    ),
)

METHODS: Registry[MethodInfo] = Registry("method")


def method(
    name: str, description: str, implementation: str, reads: tuple[str, ...], *options: Option, **kw: Any
) -> None:
    """Register a built-in method: its module:Class under ticketcli/methods/, the shared settings it reads and its
    own options (`check`: what they must hold together). Registered in the order their own options are listed
    (--help, `ticket list settings`, records)."""
    METHODS.register(name)(MethodInfo(description, f"ticketcli.methods.{implementation}", reads, options, **kw))


def movement_schedule(options: Mapping[str, Any]) -> None:
    """Warmup and cooldown leave some of the steps to the cubic schedule."""
    if options["movement_warmup"] + options["movement_cooldown"] >= 1:
        raise UsageError("--movement-warmup + --movement-cooldown must be < 1")


method(
    "augmented",
    "Double-scoring (the paper's Algorithm 1): edge-popup over an enlarged score space of width n + m*n.",
    "scores:Augmented",
    SCORES,
    *SHAPED,
    Option(
        "aug_density",
        None,
        FLOAT(0, 1, lo_open=True),
        "Augmented-space keep density; 0.5 is the canonical fixed-density double-scoring. Overrides --sparsity's "
        "augmented density.",
        0.3,
        "Method",
        "layer_densities",
    ),
    *AUX,
    Option(
        "project_final",
        False,
        BOOL,
        "Train as usual, then keep exactly the requested density of the original coordinates (top-k of the original "
        "scores) as the final mask.",
        True,
        after="signed_scores",
    ),
)
method(
    "edge-popup",
    "Edge-popup: train a score per weight, keep the top-k by |score| (straight-through estimator).",
    "scores:EdgePopup",
    ("layer_densities", *SCORES),
    *SHAPED,
)
method(
    "iterated",
    "DoubleScore-Iterated: rounds of augmented training that shrink a cumulative mask to the target.",
    "iterated:Iterated",
    SCORES,
    *SHAPED,
    *AUX,
    Option(
        "iter_tolerance",
        0.02,
        FLOAT(0, 1, lo_open=True, hi_open=True),
        "Stop once the achieved sparsity is within this of the requested one.",
        0.3,
        after="global_topk",
    ),
    Option(
        "max_rounds",
        8,
        INT(1, 1000),
        "At most this many rounds, each a full score training of --epochs.",
        1,
        after="global_topk",
    ),
)
method(
    "grasp",
    "GraSP at initialisation: keep the k largest -θ⊙Hg (the paper's reading) or θ⊙Hg (the original's).",
    "saliency:Grasp",
    SALIENCY,
    *SHAPED,
    SALIENCY_BATCHES,
    Option("grasp_temperature", 200.0, FLOAT(0, 1e6, lo_open=True), "Logits are divided by this.", 1.0),
    Option(
        "grasp_direction",
        "paper",
        CHOICE("paper", "original"),
        "Which end of the ranking it keeps. paper: the k largest -θ⊙Hg (the double-scoring paper's Appendix B, signed "
        "score then top-k); original: the k largest θ⊙Hg, i.e. it removes the largest -θ⊙Hg (Wang et al. 2020, and "
        "the Synaptic-Flow code).",
        "original",
    ),
    Option(
        "grasp_data",
        "separate",
        CHOICE("separate", "shared"),
        "separate: g and Hg from two independent collections of --saliency-batches minibatches; shared: both from one "
        "collection (the original GraSP code).",
        "shared",
    ),
)
method(
    "snip",
    "SNIP at initialisation: keep the k largest |W⊙grad| summed over a few minibatches.",
    "saliency:Snip",
    SALIENCY,
    *SHAPED,
    SALIENCY_BATCHES,
)
method(
    "synflow",
    "Iterative SynFlow: data-free synaptic-flow scores, round r of R keeps density d^(r/R).",
    "saliency:SynFlow",
    ("layer_densities",),
    *SHAPED,
    Option("synflow_rounds", 100, INT(1, 10_000), "Pruning rounds; round r keeps density d^(r/R).", 1),
)
method(
    "imp",
    "Iterative magnitude pruning with rewinding: train, prune by magnitude, rewind to the init, repeat.",
    "sparse:IMP",
    WEIGHTS,
    Option("imp_rounds", 5, INT(1, 1000), "Prune-and-rewind rounds, each training --epochs / rounds epochs.", 2),
)
method(
    "rigl",
    "RigL: sparse weight training; prune by magnitude, regrow by gradient magnitude.",
    "sparse:RigL",
    WEIGHTS,
    *REGROW,
)
method("set", "SET: sparse weight training; prune by magnitude, regrow at random.", "sparse:SET", WEIGHTS, *REGROW)
method(
    "movement",
    "Movement pruning: weights and movement scores trained jointly, cubic density schedule.",
    "movement:Movement",
    (*WEIGHTS, "lr"),
    Option(
        "movement_warmup",
        0.1,
        FLOAT(0, 1, hi_open=True),
        "Fraction of steps kept dense before the cubic schedule.",
        0.5,
    ),
    Option("movement_cooldown", 0.1, FLOAT(0, 1, hi_open=True), "Final fraction of steps at the target density.", 0.4),
    Option("movement_noise", 1e-6, FLOAT(0, 1), "Std of the Gaussian noise on the zero score init.", 0.5),
    check=movement_schedule,
)
method(
    "random",
    "A seeded random mask: exactly floor(density * n) weights kept per layer (the baseline).",
    "random:RandomMask",
    ("layer_densities",),
    *SHAPED,
)


def own_options() -> tuple[Option, ...]:
    """Every method's own options, each once, in registration order (an option two methods share is one Option)."""
    out: dict[str, Option] = {}
    for info in METHODS.registered():
        for o in info.options:
            if out.setdefault(o.name, o) != o:
                raise ValueError(f"option {o.name!r} is declared twice, differently")
    return tuple(out.values())


def placed(names: Iterable[str], options: Sequence[Option]) -> list[str]:
    """`names` (shared settings or MethodSpec fields, in order) with each option's name after the name it follows."""
    out = [n for name in names for n in (name, *(o.name for o in options if o.after == name))]
    if lost := [o.name for o in options if o.name not in out]:
        raise ValueError(f"options {lost} follow no setting (their `after`)")
    return out


def option(spec: MethodSpec, name: str) -> Any:
    """A method's own option `name`: as `spec` holds it, else its declared default."""
    return spec.options[name] if name in spec.options else {o.name: o.default for o in own_options()}[name]


def method_document(spec: MethodSpec) -> JsonObject:
    """Every method setting's value, shared and each method's own (its default where `spec` holds none), in the order
    the ticket's record and a run's identity have always listed them."""
    values = asdict(spec) | {o.name: o.default for o in own_options()} | dict(spec.options)
    values["betas"] = list(spec.betas)
    if spec.layer_densities is not None:
        values["layer_densities"] = list(spec.layer_densities)
    shared = [f.name for f in fields(MethodSpec) if f.name != "options"]
    off = {o.name for o in own_options() if o.when_set and values[o.name] == o.default}  # left out: Option.when_set
    return {name: values[name] for name in placed(shared, own_options()) if name not in off}
