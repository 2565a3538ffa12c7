"""Architecture registry and MaskedNet: a plain nn.Module whose frozen parameters are multiplied by masks."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ticketcli import batchnorm, budget, models_conv, models_gpt, models_resnet, models_vit
from ticketcli.errors import UsageError
from ticketcli.models_user import build_user_model
from ticketcli.registry import Registry
from ticketcli.spec_syntax import BUILTIN_SPEC, FACTORY_SPEC, SPEC_HINT, spec_text
from ticketcli.specs import ModelSpec

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


# mlp "+norm=...": normalisation without learned parameters (edge-popup's non-affine convention, batchnorm.py)
NORMS: dict[str, Callable[[int], nn.Module]] = {
    "batch": lambda w: nn.BatchNorm1d(w, affine=False),
    "layer": lambda w: nn.LayerNorm(w, elementwise_affine=False),
    "rms": lambda w: nn.RMSNorm(w, eps=1e-5, elementwise_affine=False),
}


class MLP(nn.Module):
    """Flatten, then Linear layers with ReLU between them (no activation after the last).

    norm: a parameter-free norm layer `norms.i` between hidden Linear i and its activation. residual: a hidden
    Linear i (neither the first nor the last) whose input and output widths agree adds its input to its output,
    a_{i+1} = a_i + relu(norm(W_i a_i)): identity skips between equal-width hidden layers only."""

    def __init__(self, widths: tuple[int, ...], bias: bool, residual: bool = False, norm: str | None = None):
        super().__init__()
        if len(widths) < 2:
            raise UsageError("an mlp needs at least an input and an output width")
        self.in_features = widths[0]
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths[:-1], widths[1:]))
        self.norms = None if norm is None else nn.ModuleList(NORMS[norm](w) for w in widths[1:-1])
        self.skips = frozenset(i for i in range(1, len(widths) - 2) if residual and widths[i] == widths[i + 1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The plain PyTorch forward pass (the oracle for forward_with)."""
        a = x.flatten(1)
        for i, layer in enumerate(self.layers):
            z = layer(a)
            if i == len(self.layers) - 1:
                return z
            out = torch.relu(z if self.norms is None else self.norms[i](z))
            a = a + out if i in self.skips else out
        raise ValueError("an MLP has at least one layer")

    def forward_with(
        self,
        x: torch.Tensor,
        params: dict[str, torch.Tensor],
        act: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
        trace: list | None = None,
    ) -> torch.Tensor:
        """The forward pass with these tensors as parameters (cheaper than torch.func.functional_call); see
        mlp_forward for `act` and `trace`."""
        return mlp_forward(x, params, len(self.layers), act, trace, self.norms, self.skips)


def mlp_forward(
    x: torch.Tensor,
    params: dict[str, torch.Tensor],
    n_layers: int,
    act: Callable[[torch.Tensor], torch.Tensor] | Sequence[Callable[[torch.Tensor], torch.Tensor]] = torch.relu,
    trace: list | None = None,
    norms: nn.ModuleList | None = None,
    skips: frozenset[int] = frozenset(),
) -> torch.Tensor:
    """An MLP's forward pass from its parameters, with `act` between layers (drift varies it; a sequence: one
    function per hidden layer), norms[i] before
    hidden activation i and identity skips around the hidden layers in `skips`. With a trace list, appends per
    layer (input a, linear output z, activation input h = norm(z), activation output act(h)); the last layer's
    is (a, z, z, z)."""
    a = x.flatten(1)  # (B, in_features)
    for i in range(n_layers):
        z = F.linear(a, params[f"layers.{i}.weight"], params.get(f"layers.{i}.bias"))  # (B, out_i)
        if i == n_layers - 1:
            if trace is not None:
                trace.append((a, z, z, z))
            return z
        h = z if norms is None else norms[i](z)
        out = act[i](h) if isinstance(act, Sequence) else act(h)
        if trace is not None:
            trace.append((a, z, h, out))
        a = a + out if i in skips else out
    raise ValueError("an MLP has at least one layer")


@MODELS.register("mlp")
def build_mlp(spec: ModelSpec) -> nn.Module:
    return MLP(spec.widths, spec.bias, spec.residual, spec.norm)


def _geometry(spec: ModelSpec) -> tuple[tuple[int, int, int], int]:
    if spec.input is None or spec.classes is None:
        raise UsageError(
            f"model {spec.to_string()} needs its input shape and classes",
            hint=f"append @CxHxW-K, e.g. {spec.to_string()}@1x28x28-10, or let the dataset fill them in",
        )
    return spec.input, spec.classes


@MODELS.register("lenet300")
def build_lenet300(spec: ModelSpec) -> nn.Module:
    """LeNet-300-100: an MLP in_features-300-100-classes."""
    (c, h, w), classes = _geometry(spec)
    return MLP((c * h * w, 300, 100, classes), spec.bias)


def _sized(build: Callable[[ModelSpec, tuple[int, int, int], int], nn.Module]) -> Callable[[ModelSpec], nn.Module]:
    """A builder that takes the input shape and class count from the spec's @CxHxW-K."""

    def builder(spec: ModelSpec) -> nn.Module:
        return build(spec, *_geometry(spec))

    builder.__doc__ = build.__doc__
    return builder


# ConvNets, ResNets (non-affine BatchNorm) and the ViT (non-affine LayerNorm) live in their own modules
for _name, _build in (
    *((name, models_conv.conv_family(name)) for name in models_conv.CONV_FAMILY),
    ("vgg", models_conv.build_vgg),
    ("resnet20", models_resnet.build_resnet20),
    ("resnet18", models_resnet.build_resnet18),
    ("wrn", models_resnet.build_wrn),
    ("vit", models_vit.build_vit),
):
    MODELS.register(_name)(_sized(_build))

MODELS.register("gpt-nano")(models_gpt.build_gpt_nano)  # character-level: its vocabulary comes from the text


def build_model(spec: ModelSpec) -> nn.Module:
    """An nn.Module for the spec, in eval mode, parameters frozen (values come from init.py or a checkpoint).

    Built-in builders compute no tensor values from data, so `with torch.device("meta"): build_model(spec)` counts
    parameters and checks shapes without allocating."""
    if spec.arch == "user" and spec.factory is not None:
        net = build_user_model(spec.factory, spec.classes)
        if not masked_names(net):
            raise UsageError(f"model {spec.factory} has no nn.Linear or nn.Conv2d parameters to mask")
    else:
        net = MODELS.get(spec.arch)(spec)
    return _frozen(net)


def frozen_copy(module: nn.Module) -> nn.Module:
    """A caller's own module (the Python API) as build_model would return it: a copy, frozen, in eval mode."""
    if not masked_names(module):
        raise UsageError(f"model {type(module).__name__} has no nn.Linear or nn.Conv2d parameters to mask")
    return _frozen(copy.deepcopy(module).cpu())


def _frozen(net: nn.Module) -> nn.Module:
    for p in net.parameters():
        p.requires_grad_(False)
    return net.eval()  # BatchNorm's mode is set per forward pass by MaskedNet (batchnorm.py); no dropout anywhere


def check_param_count(spec: ModelSpec, count: int, max_params: int) -> None:
    """Refuse a model with more than max_params parameters (one line, naming the limit's flag)."""
    if count > max_params:
        raise UsageError(
            f"model {_short(spec.to_string())} has {count:,} parameters, more than the limit of {max_params:,}",
            hint="raise the limit with --max-params N if you mean it",
        )


def planned_shapes(spec: ModelSpec, limits: budget.Budget) -> dict[str, list[int]]:
    """A built-in model's masked parameter shapes, worked out on the meta device (nothing is allocated, whatever
    the spec says), once its cost worked out from the spec alone fits the budget (budget.check): every built-in
    model is built through here first, so nothing over the budget is ever built, not even on the meta device."""
    budget.check(spec, limits)
    with torch.device("meta"):
        module = MODELS.get(spec.arch)(spec)
    check_param_count(spec, sum(p.numel() for p in module.parameters()), limits.max_params)
    shapes = dict(module.named_parameters())
    return {n: list(shapes[n].shape) for n in masked_names(module)}


def _short(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


MASKABLE = (nn.Linear, nn.Conv2d)


def masked_names(module: nn.Module) -> list[str]:
    """Parameters that get masks: weights and biases of nn.Linear and nn.Conv2d, in named_parameters order.

    Built-in models consist of these layers only, so every parameter is masked; a user's model may have others
    (norm layers, embeddings), which stay frozen and unmasked."""
    owned = {
        f"{prefix}.{n}" if prefix else n
        for prefix, m in module.named_modules()
        if isinstance(m, MASKABLE)
        for n, _ in m.named_parameters(recurse=False)
    }
    return [n for n, _ in module.named_parameters() if n in owned]


def layer_of(param_name: str) -> str:
    """The module that owns a parameter: 'layers.0.weight' -> 'layers.0'."""
    return param_name.rpartition(".")[0]


def fan_in(param: torch.Tensor, weight_for_bias: torch.Tensor | None = None) -> int:
    """Fan-in of a weight (in_features * receptive field); a bias uses its layer's weight."""
    w = weight_for_bias if weight_for_bias is not None else param
    return int(w[0].numel()) if w.dim() > 1 else int(w.numel())


class MaskedNet:
    """A frozen network plus its masked parameter names; forward(x, masks) uses W * M for every masked W.

    BatchNorm (batchnorm.py): training passes (forward_with) normalise with batch statistics, evaluation passes
    (forward) with running statistics, which `calibrate` recomputes from `calibration` (the extraction split's
    inputs) for the masks and weights being evaluated; train.evaluate calls it."""

    def __init__(self, module: nn.Module, spec: ModelSpec | None = None, *, bn_statistics: str = "recalibrate"):
        self.module = module
        self.spec = spec
        self.weights: dict[str, torch.Tensor] = {n: p.detach() for n, p in module.named_parameters()}
        self.names: list[str] = masked_names(module)  # Linear/Conv2d parameters (all, in built-in models)
        self.batchnorms = batchnorm.find(module)
        if bn_statistics not in batchnorm.MODES:
            raise ValueError(f"unknown BatchNorm statistics {bn_statistics!r}")
        self.bn_statistics = bn_statistics
        self.calibration: torch.Tensor | None = None  # inputs the running statistics are recomputed on
        self.calibration_batch = batchnorm.CALIBRATION_BATCH
        self._version = 0  # bumped whenever the weights change, so calibrate knows its statistics are stale
        self._calibrated: tuple | None = None

    def to(self, device: torch.device) -> MaskedNet:
        self.module.to(device)
        self.weights = {n: p.detach() for n, p in self.module.named_parameters()}
        self._version += 1
        return self

    @property
    def device(self) -> torch.device:
        return next(iter(self.weights.values())).device

    def shapes(self) -> dict[str, list[int]]:
        """Shapes of the masked parameters (a ticket's masks)."""
        return {n: list(self.weights[n].shape) for n in self.names}

    def param_shapes(self) -> dict[str, list[int]]:
        """Shapes of every parameter, masked or frozen."""
        return {n: list(w.shape) for n, w in self.weights.items()}

    def layers(self) -> dict[str, list[str]]:
        """Layer name -> its masked parameter names, in order."""
        out: dict[str, list[str]] = {}
        for n in self.names:
            out.setdefault(layer_of(n), []).append(n)
        return out

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.module.named_parameters():
                p.copy_(weights[n])
        self._version += 1

    def masked(self, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """W * M for every masked parameter."""
        return {n: self.weights[n] * masks[n].to(self.weights[n].dtype) for n in self.names}

    def forward(self, x: torch.Tensor, masks: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Evaluation: W * M (or the module's own weights without masks), BatchNorm on running statistics."""
        with batchnorm.statistics(self.batchnorms, self.bn_statistics, "running"):
            return self.module(x) if masks is None else self._run(x, self.masked(masks))

    def forward_with(
        self, x: torch.Tensor, params: Mapping[str, torch.Tensor], *, batch_statistics: bool = True, **options
    ) -> torch.Tensor:
        """Training: the module's forward with these tensors in place of its parameters, BatchNorm on the batch's
        statistics (`batch_statistics=False`: on the running ones, as SynFlow's data-free pass wants). `options`
        go to a built-in model's own forward_with (the MLP takes act= and trace=)."""
        if not self.batchnorms:
            return self._run(x, params, **options)
        if batch_statistics and self.bn_statistics != "frozen":
            batchnorm.check_batch(x.shape[0])
        with batchnorm.statistics(self.batchnorms, self.bn_statistics, "batch" if batch_statistics else "running"):
            return self._run(x, params, **options)

    def _run(self, x: torch.Tensor, params: Mapping[str, torch.Tensor], **options) -> torch.Tensor:
        fast = getattr(self.module, "forward_with", None)  # our own models skip functional_call's overhead
        return fast(x, params, **options) if fast is not None else functional_call(self.module, dict(params), (x,))

    def calibrate(self, masks: dict[str, torch.Tensor] | None, chunks: batchnorm.ChunkProgress | None = None) -> None:
        """Recompute BatchNorm's running statistics for these masks (None: the dense weights) and the current
        weights from `calibration`; a no-op without BatchNorm, outside recalibrate mode, or when neither masks
        nor weights changed since the last call. `chunks` is told the recalibration's chunks as they finish."""
        if not self.batchnorms or self.bn_statistics != "recalibrate":
            return
        key = (self._version, self.calibration, None if masks is None else [(m, m._version) for m in masks.values()])
        if self._calibrated is not None and _same_state(key, self._calibrated):
            return
        if self.calibration is None:
            raise RuntimeError("a BatchNorm network was evaluated before MaskedNet.calibration was set")
        params = None if masks is None else self.masked(masks)
        batchnorm.recalibrate(
            self.batchnorms,
            self.module if params is None else lambda c: self._run(c, params),
            self.calibration,
            self.calibration_batch,
            chunks,
        )
        self._calibrated = key

    __call__ = forward


def _same_state(a: tuple, b: tuple) -> bool:
    """calibrate's keys: same weights version, the very same calibration inputs and mask tensors (held, so their
    ids cannot be reused) at the same in-place version."""
    if a[0] != b[0] or a[1] is not b[1] or (a[2] is None) != (b[2] is None):
        return False
    return a[2] is None or (len(a[2]) == len(b[2]) and all(m is n and v == w for (m, v), (n, w) in zip(a[2], b[2])))
