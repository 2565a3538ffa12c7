"""MODELS, the built-in model families by name, torch-free; `parse_model` (a model spec string as a ModelSpec),
`estimate` (a built-in model's cost from its spec alone) and `declared_params` (a ticket's model, counted from its
spec string), each answered by the family.

A family is declared once, beside its network (models/<family>_family.py: description, grammar, cost, examples,
where its builder lives), and registered here with one line; its torch module is imported only when a model of it
is built (Family.builder)."""

from __future__ import annotations

from ticketcli.errors import UsageError
from ticketcli.models import conv_family, gpt_family, mlp_family, resnet_family, vit_family
from ticketcli.models.cost import Estimate
from ticketcli.models.family import Family
from ticketcli.registry import Registry
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import BUILTIN_SPEC, FACTORY_SPEC, SPEC_HINT, geometry, spec_text, suffixes

MODELS: Registry[Family] = Registry("model")
MODELS.register("mlp")(mlp_family.MLP)
MODELS.register("lenet300")(mlp_family.LENET300)
MODELS.register("conv2")(conv_family.CONV2)
MODELS.register("conv4")(conv_family.CONV4)
MODELS.register("conv6")(conv_family.CONV6)
MODELS.register("vgg")(conv_family.VGG)
MODELS.register("resnet20")(resnet_family.RESNET20)
MODELS.register("resnet18")(resnet_family.RESNET18)
MODELS.register("wrn")(resnet_family.WRN)
MODELS.register("vit")(vit_family.VIT)
MODELS.register("gpt-nano")(gpt_family.GPT_NANO)


def parse_model(text: str, *, bias: bool | None = None) -> ModelSpec:
    """A model spec string (forms: ModelSpec's docstring) as a ModelSpec; --bias adds biases to built-in models."""
    t = spec_text(text)
    factory = FACTORY_SPEC.fullmatch(t)
    if factory and factory.group(1).partition(":")[0] not in MODELS:  # "vit:p4" is a built-in, not a module
        return ModelSpec.from_factory(text, factory, bias=bias)
    m = BUILTIN_SPEC.fullmatch(t)
    if not m:
        raise UsageError(f"invalid model spec {text!r}", hint=SPEC_HINT)
    name, body = m.group(1), m.group(2)
    family = MODELS.get(name)  # an unknown name: "unknown model ...; choose one of ..." before any syntax
    suffix = suffixes(text, m.group(7))
    has_bias = suffix["bias"] if bias is None else (bias or suffix["bias"])
    if any(suffix[key] for key in ("res", "norm") if key not in family.suffixes):
        raise UsageError(f"invalid model spec {text!r}: +res and +norm apply to mlp specs only")
    if m.group(3) is not None and family.no_geometry:
        raise UsageError(f"invalid model spec {text!r}: {family.no_geometry}")
    shape, classes = geometry(text, m.group(3, 4, 5, 6))
    fields = {"widths": (), "input": shape, "classes": classes, **family.parse(text, name, body, suffix)}
    return ModelSpec(arch=name, bias=has_bias, sized=family.sized, **fields)


def estimate(spec: ModelSpec) -> Estimate | None:
    """The cost of a built-in model from its spec alone; None for a user's factory (known only once built).
    A spec whose geometry is still open (no @CxHxW-K) is estimated as if for a 1x1x1 input and 1 class."""
    if spec.arch == "user":
        return None
    return MODELS.get(spec.arch).cost(spec, spec.input or (1, 1, 1), spec.classes or 1)


def declared_params(text: str) -> int | None:
    """The parameter count of the built-in model a spec string names (a ticket's `model.spec`), torch-free; None
    for a factory or a spec that does not parse (refused with its own message when the model is rebuilt)."""
    try:
        spec = parse_model(text)
        if not spec.resolved and spec.arch != "mlp":
            return None
        est = estimate(spec)
    except UsageError:
        return None
    return None if est is None else est.params


def text_model(arch: str) -> bool:
    """Whether `arch` names a character-level family (trained on a text, `--text`)."""
    return arch in MODELS and MODELS.get(arch).text
