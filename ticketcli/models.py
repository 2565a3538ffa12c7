"""Architecture registry and MaskedNet: a plain nn.Module whose frozen parameters are multiplied by masks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from ticketcli import batchnorm, models_gpt, models_resnet, models_vit
from ticketcli.errors import UsageError
from ticketcli.registry import Registry
from ticketcli.specs import ModelSpec

MODELS: Registry[Callable[[ModelSpec], nn.Module]] = Registry("model")


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


class ConvNet(nn.Module):
    """3x3 convolutions (padding 1) with ReLU, 2x2 max-pools at "M", then flatten and a ReLU MLP head.

    `features` and `classifier` are nn.Sequentials, so the parameter names ("features.0.weight",
    "classifier.1.weight", ...) are those of the same model written in plain PyTorch. No BatchNorm."""

    def __init__(
        self, layers: tuple[str, ...], head: tuple[int, ...], input: tuple[int, int, int], classes: int, bias: bool
    ):
        super().__init__()
        c, h, w = input
        feats: list[nn.Module] = []
        for item in layers:
            if item == "M":
                if h < 2 or w < 2:
                    raise UsageError(
                        f"a {input[1]}x{input[2]} input is too small for {len(layers)} layers "
                        f"with {layers.count('M')} 2x2 max-pools"
                    )
                feats.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
            else:
                feats += [nn.Conv2d(c, int(item), 3, padding=1, bias=bias), nn.ReLU()]
                c = int(item)
        self.features = nn.Sequential(*feats)
        widths = (c * h * w, *head, classes)
        cls: list[nn.Module] = [nn.Flatten()]
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            cls.append(nn.Linear(a, b, bias=bias))
            if i < len(widths) - 2:
                cls.append(nn.ReLU())
        self.classifier = nn.Sequential(*cls)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def forward_with(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """The forward pass with these tensors as parameters (cheaper than torch.func.functional_call)."""
        for prefix, seq in (("features", self.features), ("classifier", self.classifier)):
            for i, m in enumerate(seq):
                if isinstance(m, nn.Conv2d):
                    x = F.conv2d(x, params[f"{prefix}.{i}.weight"], params.get(f"{prefix}.{i}.bias"), padding=1)
                elif isinstance(m, nn.Linear):
                    x = F.linear(x, params[f"{prefix}.{i}.weight"], params.get(f"{prefix}.{i}.bias"))
                else:
                    x = m(x)
        return x


CONV_FAMILY = {  # Frankle & Carbin / edge-popup Conv-2/4/6: 64-64-pool, +128-128-pool, +256-256-pool; FC 256-256
    "conv2": ("64", "64", "M"),
    "conv4": ("64", "64", "M", "128", "128", "M"),
    "conv6": ("64", "64", "M", "128", "128", "M", "256", "256", "M"),
}


def _conv_family(name: str) -> Callable[[ModelSpec], nn.Module]:
    def build(spec: ModelSpec) -> nn.Module:
        shape, classes = _geometry(spec)
        return ConvNet(CONV_FAMILY[name], (256, 256), shape, classes, spec.bias)

    build.__doc__ = f"{name}: {'-'.join(CONV_FAMILY[name])}, then FC 256-256-classes."
    return build


for _name in CONV_FAMILY:
    MODELS.register(_name)(_conv_family(_name))


@MODELS.register("vgg")
def build_vgg(spec: ModelSpec) -> nn.Module:
    """VGG-style ConvNet without BatchNorm (Appendix G): the spec's convs and pools, then one Linear to classes.

    Appendix G does not spell out the head; a single linear classifier keeps the model VGG-style and distinct
    from conv6 (which has the 256-256 FC head)."""
    shape, classes = _geometry(spec)
    return ConvNet(spec.layers, (), shape, classes, spec.bias)


def _sized(build: Callable[[ModelSpec, tuple[int, int, int], int], nn.Module]) -> Callable[[ModelSpec], nn.Module]:
    """A builder that takes the input shape and class count from the spec's @CxHxW-K."""

    def builder(spec: ModelSpec) -> nn.Module:
        return build(spec, *_geometry(spec))

    builder.__doc__ = build.__doc__
    return builder


# ResNets (non-affine BatchNorm) and the ViT (non-affine LayerNorm) live in their own modules
for _name, _build in (
    ("resnet20", models_resnet.build_resnet20),
    ("resnet18", models_resnet.build_resnet18),
    ("wrn", models_resnet.build_wrn),
    ("vit", models_vit.build_vit),
):
    MODELS.register(_name)(_sized(_build))

MODELS.register("gpt-nano")(models_gpt.build_gpt_nano)  # character-level: its vocabulary comes from the text


def import_factory(path: str) -> Callable[[], nn.Module]:
    """The function named by "pkg.module:function" (imported with the current directory on sys.path).

    Callers decide whether importing is allowed: a ticket alone never is (runs.ticket_model)."""
    import importlib
    import inspect
    import sys

    module_name, _, attr = path.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # `python -m` puts the cwd first; the console script does not
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if module_name in MODELS:
            raise UsageError(f"invalid model spec {path!r}: {module_name} takes numbers, not {attr!r}") from None
        raise UsageError(
            f"cannot import {module_name} for model {path}: {e}",
            hint="the module must be importable (on PYTHONPATH or in the current directory)",
        ) from None
    except (Exception, SystemExit) as e:  # the user's module raised (or called sys.exit) while importing
        raise UsageError(f"importing {module_name} for model {path} failed: {type(e).__name__}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UsageError(f"{module_name} has no function {attr!r} (model {path})")
    if inspect.isbuiltin(fn):  # sys.exit, os.abort, signal.pause, builtins.exec: never a model factory
        raise UsageError(f"model {path} names a built-in function, not a factory returning an nn.Module")
    return fn


FACTORY_SEED = 20260102  # the global RNG seed a factory runs under: its own default init is then reproducible


def takes_num_classes(fn: Callable) -> bool:
    """Whether a factory accepts num_classes= (by name or **kwargs, as torchvision.models' builders do)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == "num_classes" or p.kind is p.VAR_KEYWORD for p in params)


def build_user_model(path: str, classes: int | None = None) -> nn.Module:
    """The factory's module, built under FACTORY_SEED; with `classes` (the spec's @CxHxW-K) as num_classes=K."""
    fn = import_factory(path)
    if classes is not None and not takes_num_classes(fn):
        raise UsageError(
            f"model {path}@...-{classes} passes num_classes={classes}, which {path} does not take",
            hint=f"drop the @CxHxW-K part, or give {path} a num_classes parameter",
        )
    kwargs = {} if classes is None else {"num_classes": classes}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(FACTORY_SEED)
        try:
            module = fn(**kwargs)
        except (Exception, SystemExit) as e:  # a factory's sys.exit() must not become our exit code
            raise UsageError(f"model factory {path} failed: {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise UsageError(f"model factory {path} returned {type(module).__name__}, not an nn.Module")
    if not masked_names(module):
        raise UsageError(f"model {path} has no nn.Linear or nn.Conv2d parameters to mask")
    return module.cpu().float().eval()


def build_model(spec: ModelSpec) -> nn.Module:
    """An nn.Module for the spec, in eval mode, parameters frozen (values come from init.py or a checkpoint).

    Built-in builders compute no tensor values from data, so `with torch.device("meta"): build_model(spec)` counts
    parameters and checks shapes without allocating."""
    net = build_user_model(spec.factory, spec.classes) if spec.arch == "user" else MODELS.get(spec.arch)(spec)
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


def planned_shapes(spec: ModelSpec, max_params: int) -> dict[str, list[int]]:
    """A built-in model's masked parameter shapes, worked out on the meta device (nothing is allocated, whatever
    the spec says), after refusing a model with more than max_params parameters."""
    with torch.device("meta"):
        module = MODELS.get(spec.arch)(spec)
    check_param_count(spec, sum(p.numel() for p in module.parameters()), max_params)
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
        self, x: torch.Tensor, params: dict[str, torch.Tensor], *, batch_statistics: bool = True, **options
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

    def _run(self, x: torch.Tensor, params: dict[str, torch.Tensor], **options) -> torch.Tensor:
        fast = getattr(self.module, "forward_with", None)  # our own models skip functional_call's overhead
        return fast(x, params, **options) if fast is not None else functional_call(self.module, params, (x,))

    def calibrate(self, masks: dict[str, torch.Tensor] | None) -> None:
        """Recompute BatchNorm's running statistics for these masks (None: the dense weights) and the current
        weights from `calibration`; a no-op without BatchNorm, outside recalibrate mode, or when neither masks
        nor weights changed since the last call."""
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
        )
        self._calibrated = key

    __call__ = forward


def _same_state(a: tuple, b: tuple) -> bool:
    """calibrate's keys: same weights version, the very same calibration inputs and mask tensors (held, so their
    ids cannot be reused) at the same in-place version."""
    if a[0] != b[0] or a[1] is not b[1] or (a[2] is None) != (b[2] is None):
        return False
    return a[2] is None or (len(a[2]) == len(b[2]) and all(m is n and v == w for (m, v), (n, w) in zip(a[2], b[2])))
