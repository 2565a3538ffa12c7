"""What the registries hold, written down without importing them: names and one-line descriptions of methods,
models, datasets and init schemes, and the choices of `ticket drift`.

The command line needs these names before it runs anything (option choices, help texts, `ticket list`), and the
registries live in modules that import torch (seconds). This module imports nothing, so `ticket --help` stays
fast; tests/test_catalog.py checks that it agrees exactly with the runtime registries, so a method, model,
dataset or scheme registered without its line here fails a test that says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from ticketcli.contract.result import Result


class DatasetEntry(NamedTuple):
    description: str
    n_extract: int  # default extraction split (data.DatasetInfo.n_extract)
    n_val: int  # default validation split


METHODS: dict[str, str] = {
    "augmented": "Double-scoring (the paper's Algorithm 1): edge-popup over an enlarged score space of width n + m*n.",
    "edge-popup": "Edge-popup: train a score per weight, keep the top-k by |score| (straight-through estimator).",
    "grasp": "GraSP at initialisation: keep the k largest -θ⊙Hg (the paper's reading) or θ⊙Hg (the original's).",
    "imp": "Iterative magnitude pruning with rewinding: train, prune by magnitude, rewind to the init, repeat.",
    "iterated": "DoubleScore-Iterated: rounds of augmented training that shrink a cumulative mask to the target.",
    "movement": "Movement pruning: weights and movement scores trained jointly, cubic density schedule.",
    "random": "A seeded random mask: exactly floor(density * n) weights kept per layer (the baseline).",
    "rigl": "RigL: sparse weight training; prune by magnitude, regrow by gradient magnitude.",
    "set": "SET: sparse weight training; prune by magnitude, regrow at random.",
    "snip": "SNIP at initialisation: keep the k largest |W⊙grad| summed over a few minibatches.",
    "synflow": "Iterative SynFlow: data-free synaptic-flow scores, round r of R keeps density d^(r/R).",
}

MODELS: dict[str, str] = {
    "conv2": "Conv-2: conv 64-64-M, then fully connected 256-256-classes.",
    "conv4": "Conv-4: conv 64-64-M-128-128-M, then fully connected 256-256-classes.",
    "conv6": "Conv-6: conv 64-64-M-128-128-M-256-256-M, then fully connected 256-256-classes.",
    "gpt-nano": "Character GPT for `ticket drift --text`: gpt-nano:l2-d64-h4-c64 (blocks, width, heads, context).",
    "lenet300": "LeNet-300-100: an MLP with hidden layers of 300 and 100.",
    "mlp": "Multilayer perceptron mlp:784-256-256-256-10 (+res skips, +norm=batch|layer|rms, +bias).",
    "resnet18": "ResNet-18, CIFAR style (3x3 stem, no max-pool; non-affine BatchNorm).",
    "resnet20": "ResNet-20 for CIFAR (non-affine BatchNorm).",
    "vgg": "VGG-style ConvNet from a layer list, e.g. vgg:64-64-M-128-128-M-256-256-M.",
    "vit": "Vision Transformer vit:p4-d64-l4-h4 (patch, width, blocks, heads; -m2: MLP ratio).",
    "wrn": "Wide ResNet wrn:16-4 (depth-width).",
}

DATASETS: dict[str, DatasetEntry] = {
    "cifar10": DatasetEntry("CIFAR-10: 32x32 colour images, 10 classes (files or --download).", 5000, 5000),
    "digits": DatasetEntry("The 8x8 digits bundled with scikit-learn, 10 classes: needs no files.", 1000, 400),
    "fashion-mnist": DatasetEntry("FashionMNIST: 28x28 clothing images, 10 classes (the paper's dataset).", 5000, 5000),
    "mnist": DatasetEntry("MNIST: 28x28 handwritten digits, 10 classes (files or --download).", 5000, 5000),
}

INITS: dict[str, str] = {
    "kaiming-normal": "N(0, (gain/sqrt(k*fan_in))^2); k = 1 is torch's kaiming_normal_ (fan_in, relu).",
    "module": "Keep a model factory's own weights as it created them (under a fixed seed); factories only.",
    "scaled-kaiming-uniform": "The paper's init: U[-b, b] with b = gain/sqrt(k*fan_in) (ReLU gain, k = 1/2).",
    "signed-kaiming-constant": "+-gain/sqrt(k*fan_in) with a random sign (the hidden-networks signed constant).",
}

# `ticket drift`'s registries (drift.activations: ACTIVATIONS, LOSSES); its other choices are in drift.spec
DRIFT_ACTIVATIONS = ("gelu", "gelu2", "relu", "relu2", "relu2-clip", "silu")
DRIFT_LOSSES = ("cross-entropy", "mse")

# Defaults that help texts show but whose home modules import torch (each named in the comment; tests check them)
SWEEP_LAYERWISE = 8  # sweep.plan.PAPER_LAYERWISE
SWEEP_DENSITIES = (
    0.01,
    0.02,
    0.05,
    0.075,
    0.10,
    0.15,
    0.20,
    0.30,
    0.40,
    0.50,
    0.65,
    0.80,
)  # sweep.plan.PAPER_DENSITIES

SWEEP_BAND = (0.85, 0.95)  # sweep.summary.PAPER_BAND

# grasp's two readings and its data for g and Hg (specs.GRASP_DIRECTIONS, specs.GRASP_DATA)
GRASP_DIRECTIONS = ("paper", "original")
GRASP_DATA = ("separate", "shared")

KINDS = ("methods", "models", "datasets", "inits")  # the registries `ticket list` lists (and the settings)


def describe(kind: str) -> dict[str, str]:
    """Name -> one-line description of one kind of registry entry (a name in KINDS), sorted by name."""
    table: dict[str, str] = {
        "methods": METHODS,
        "models": MODELS,
        "datasets": {name: entry.description for name, entry in DATASETS.items()},
        "inits": INITS,
    }[kind]
    return dict(sorted(table.items()))


@dataclass(frozen=True)
class ListItem:
    """One entry of `ticket list`: a name the option takes and its one-line description; a run setting (`ticket
    list settings`, settings/setting.py's Setting.list_item) also has its flag, default and range as help shows
    them, the methods that read it (none: every method, or it is no method option), its help panel, and whether it
    is a config key and API keyword."""

    name: str
    description: str
    flag: str | None = None
    default: str = ""
    range: str = ""
    methods: tuple[str, ...] = ()
    panel: str = ""
    config: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.flag is not None:
            d.update(flag=self.flag, default=self.default, range=self.range, methods=list(self.methods))
            d.update(panel=self.panel, config=self.config)
        return d


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping): == the dict it was
class ListResult(Result):
    """What `ticket list <kind>` reports: every name of one kind (a name in KINDS), sorted, with its description; or
    every run setting, in declaration order (kind "settings")."""

    COMMAND: ClassVar[str] = "list"

    kind: str
    entries: tuple[ListItem, ...]  # the document's `items` (a Mapping's items() keeps its meaning here)

    def body(self) -> dict[str, Any]:
        return {"kind": self.kind, "items": [e.to_dict() for e in self.entries]}


def listing(kind: str) -> ListResult:
    """`ticket list`'s result for one kind of registry entry (a name in KINDS)."""
    return ListResult(kind, tuple(ListItem(name, text) for name, text in describe(kind).items()))
