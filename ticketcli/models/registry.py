"""MODELS, the built-in models by name, and `parse_model`, a model spec string as a ModelSpec.

Importing this module registers every built-in model: the builders are written in their own modules (mlp, conv,
resnet, vit, gpt) and registered here, in one place, so whoever reads MODELS reads the full registry."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ticketcli.errors import UsageError
from ticketcli.models import conv, gpt, mlp, resnet, vit
from ticketcli.registry import Registry
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import BUILTIN_SPEC, FACTORY_SPEC, SPEC_HINT, spec_text

MODELS: Registry[Callable[[ModelSpec], nn.Module]] = Registry("model")


def parse_model(text: str, *, bias: bool | None = None) -> ModelSpec:
    """A model spec string (forms: ModelSpec's docstring) as a ModelSpec; --bias adds biases to built-in models."""
    t = spec_text(text)
    factory = FACTORY_SPEC.fullmatch(t)
    if factory and factory.group(1).partition(":")[0] not in MODELS:  # "vit:p4" is a built-in, not a module
        return ModelSpec.from_factory(text, factory, bias=bias)
    m = BUILTIN_SPEC.fullmatch(t)
    if not m:
        raise UsageError(f"invalid model spec {text!r}", hint=SPEC_HINT)
    MODELS.get(m.group(1))  # an unknown name: "unknown model ...; choose one of ..." before any syntax complaint
    return ModelSpec.from_builtin(text, m, bias=bias)


def _geometry(spec: ModelSpec) -> tuple[tuple[int, int, int], int]:
    if spec.input is None or spec.classes is None:
        raise UsageError(
            f"model {spec.to_string()} needs its input shape and classes",
            hint=f"append @CxHxW-K, e.g. {spec.to_string()}@1x28x28-10, or let the dataset fill them in",
        )
    return spec.input, spec.classes


def _sized(build: Callable[[ModelSpec, tuple[int, int, int], int], nn.Module]) -> Callable[[ModelSpec], nn.Module]:
    """A builder that takes the input shape and class count from the spec's @CxHxW-K."""

    def builder(spec: ModelSpec) -> nn.Module:
        return build(spec, *_geometry(spec))

    builder.__doc__ = build.__doc__
    return builder


MODELS.register("mlp")(mlp.build_mlp)  # its widths are the spec's own, input and output included

# LeNet, the ConvNets, ResNets (non-affine BatchNorm) and the ViT (non-affine LayerNorm): sized by the dataset
for _name, _build in (
    ("lenet300", mlp.build_lenet300),
    *((name, conv.conv_family(name)) for name in conv.CONV_FAMILY),
    ("vgg", conv.build_vgg),
    ("resnet20", resnet.build_resnet20),
    ("resnet18", resnet.build_resnet18),
    ("wrn", resnet.build_wrn),
    ("vit", vit.build_vit),
):
    MODELS.register(_name)(_sized(_build))

MODELS.register("gpt-nano")(gpt.build_gpt_nano)  # character-level: its vocabulary comes from the text
