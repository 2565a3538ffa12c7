"""METHODS, the extraction methods by name, torch-free: each registered below with its one-line description and the
class that implements it, imported only when the method is used (MethodInfo.load). `--method`'s choices,
`ticket list methods` and the help's "augmented, iterated: ..." prefixes read it without torch; the options a method
reads are declared with each option (settings/run.py's `methods=`; settings.readers.method_options)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ticketcli.registry import Registry, load

if TYPE_CHECKING:
    from ticketcli.methods.base import Method


@dataclass(frozen=True)
class MethodInfo:
    description: str  # its one line in `ticket list methods`
    implementation: str  # "package.module:Class", a Method subclass
    # options it reads beyond those whose declarations name it (settings/run.py's `methods=`): for a method
    # registered outside the package, whose name no declaration can know; the built-in ones leave it empty
    options: frozenset[str] = frozenset()

    def load(self) -> type[Method]:
        """Its Method subclass, its module (and torch) imported now."""
        return cast("type[Method]", load(self.implementation))


METHODS: Registry[MethodInfo] = Registry("method")
for _name, _text, _implementation in (
    (
        "augmented",
        "Double-scoring (the paper's Algorithm 1): edge-popup over an enlarged score space of width n + m*n.",
        "scores:Augmented",
    ),
    (
        "edge-popup",
        "Edge-popup: train a score per weight, keep the top-k by |score| (straight-through estimator).",
        "scores:EdgePopup",
    ),
    (
        "grasp",
        "GraSP at initialisation: keep the k largest -θ⊙Hg (the paper's reading) or θ⊙Hg (the original's).",
        "saliency:Grasp",
    ),
    (
        "imp",
        "Iterative magnitude pruning with rewinding: train, prune by magnitude, rewind to the init, repeat.",
        "sparse:IMP",
    ),
    (
        "iterated",
        "DoubleScore-Iterated: rounds of augmented training that shrink a cumulative mask to the target.",
        "iterated:Iterated",
    ),
    (
        "movement",
        "Movement pruning: weights and movement scores trained jointly, cubic density schedule.",
        "movement:Movement",
    ),
    (
        "random",
        "A seeded random mask: exactly floor(density * n) weights kept per layer (the baseline).",
        "random:RandomMask",
    ),
    ("rigl", "RigL: sparse weight training; prune by magnitude, regrow by gradient magnitude.", "sparse:RigL"),
    ("set", "SET: sparse weight training; prune by magnitude, regrow at random.", "sparse:SET"),
    ("snip", "SNIP at initialisation: keep the k largest |W⊙grad| summed over a few minibatches.", "saliency:Snip"),
    (
        "synflow",
        "Iterative SynFlow: data-free synaptic-flow scores, round r of R keeps density d^(r/R).",
        "saliency:SynFlow",
    ),
):
    METHODS.register(_name)(MethodInfo(_text, f"ticketcli.methods.{_implementation}"))
