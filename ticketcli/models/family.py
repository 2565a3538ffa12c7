"""`Family`: what the models registry knows of a built-in model without importing torch (its description, the grammar
of its spec's ':' arguments, its cost from the spec alone, example specs) and where its builder lives, imported only
when a model is built. Each family declares its own beside its network (models/<family>_family.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketcli.errors import UsageError
from ticketcli.models.cost import Estimate
from ticketcli.registry import load
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import SPEC_HINT

if TYPE_CHECKING:
    from torch import nn

Shape = tuple[int, int, int]
Arguments = dict[str, Any]  # ModelSpec fields by name: those a spec's suffixes set, those its ':' arguments fill
# (spec text, family name, its ':' arguments or None, its suffixes) -> the ModelSpec fields the arguments fill
Parse = Callable[[str, str, "str | None", Arguments], Arguments]
# (spec, input shape, classes) -> its cost; an open geometry is estimated as a 1x1x1 input with 1 class
CostFn = Callable[[ModelSpec, Shape, int], Estimate]


@dataclass(frozen=True)
class Family:
    """A built-in model family, torch-free.

    description: its one line in `ticket list models`.
    build: "package.module:function", the builder, imported when a model is built: function(spec) -> nn.Module, or
        for a sized family function(spec, shape, classes).
    parse: the grammar of its ':' arguments (validated; refused with one line).
    cost: its parameters, buffers and activations from the spec alone (tests/test_budget.py checks them exactly).
    examples: small specs the registry-driven tests build, the first for a 1x8x8 input with 10 classes.
    sized: the dataset (or "@CxHxW-K") gives its input shape and classes; False: its spec fixes them.
    text: a character-level model, trained on a text (`--text`), not on images.
    suffixes: the "+key" suffixes it takes beside +bias ("res", "norm").
    no_geometry: why it refuses "@CxHxW-K" (None: it takes one).
    """

    description: str
    build: str
    parse: Parse
    cost: CostFn
    examples: tuple[str, ...]
    sized: bool = True
    text: bool = False
    suffixes: tuple[str, ...] = ()
    no_geometry: str | None = None

    def builder(self) -> Callable[[ModelSpec], nn.Module]:
        """Its builder as a function of the spec alone, its module imported now."""
        build = load(self.build)
        if not self.sized:
            return build  # type: ignore[no-any-return]
        return lambda spec: build(spec, *data_geometry(spec))


def data_geometry(spec: ModelSpec) -> tuple[Shape, int]:
    """The input shape and class count a sized model is built for: the spec's @CxHxW-K, or a one-line refusal."""
    if spec.input is None or spec.classes is None:
        raise UsageError(
            f"model {spec.to_string()} needs its input shape and classes",
            hint=f"append @CxHxW-K, e.g. {spec.to_string()}@1x28x28-10, or let the dataset fill them in",
        )
    return spec.input, spec.classes


def no_arguments(text: str, name: str, body: str | None, suffix: Arguments) -> Arguments:
    """The grammar of a family without ':' arguments (lenet300, conv6, resnet20)."""
    if body is not None:
        raise UsageError(f"invalid model spec {text!r}: {name} takes no ':' arguments", hint=SPEC_HINT)
    return {}
