"""`ticket drift`'s specs, each default written once as a dataclass field, without importing torch: DriftSpec (with
TextSpec, a character-level model's corpus), ControlSpec (activation-sparsity control), RelufySpec (ReLUfication)
and Features (the feature flags together, the trade-off's workers among them), and the choices its flags take.

options.py builds these from the command's flags and falls back to these fields' defaults, which the settings read
(settings.py), so a default changed here changes everywhere. The command line imports this
module for --help, so it imports nothing that imports torch (tests/test_startup.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import UsageError
from ticketcli.specs.run import DataSpec, InitSpec, ModelSpec, WeightOptim
from ticketcli.specs.text import TextSpec

INPUTS = ("data", "gaussian", "uniform")  # the dataset's images, N(0, 1) or U[0, 1] features with random labels
CONTROL_MODES = ("topk", "percentile")  # --act-sparsity
# activations with exact zeros: sparsity counts a == 0 (the others, smooth: |a| < zero_threshold); they are also
# what ReLUfication swaps in (activations.py registers each activation's function)
EXACT_ZEROS = ("relu", "relu2", "relu2-clip")
RELUFY_TARGETS = EXACT_ZEROS
DRIFT_ARCHS = ("mlp", "lenet300", "resnet20", "resnet18", "vit", "gpt-nano")  # models with activation sites
DEFAULT_TEXT_MODEL = "gpt-nano:l2-d64-h4-c64"  # --text without --model


@dataclass(frozen=True)
class DriftSpec:
    model: ModelSpec
    data: DataSpec  # the dataset: sizes the default model; the inputs when inputs == "data"
    inputs: str = "data"  # INPUTS
    loss: str = "cross-entropy"  # LOSSES name
    activation: str = "relu"  # ACTIVATIONS name, between hidden layers
    clip: float = 50.0  # c of relu2-clip
    optim: WeightOptim = field(default_factory=WeightOptim)
    batch_size: int = 512
    steps: int = 500
    log_every: int = 10
    probe_size: int = 1024  # fixed batch the statistics are measured on
    zero_threshold: float = 1e-2  # smooth activations: |a| below this counts as zero
    seeds: tuple[int, ...] = (0,)
    init: InitSpec = field(default_factory=InitSpec)  # its seed is replaced by each of seeds
    device: str = "auto"
    text: TextSpec | None = None  # a character-level model's corpus (then data is unused)

    def to_dict(self) -> JsonObject:
        exact = self.activation in EXACT_ZEROS
        text = {} if self.text is None else {"text": self.text.to_dict()}  # only then: other records stay as they were
        return {
            "model": self.model.to_string(),
            "dataset": self.data.name if self.text is None else "text",
            **text,
            "inputs": self.inputs,
            "loss": self.loss,
            "activation": self.activation,
            "clip": self.clip,
            "optimizer": self.optim.to_dict(),
            "batch_size": self.batch_size,
            "steps": self.steps,
            "log_every": self.log_every,
            "probe_size": self.probe_size,
            "zero_rule": "a == 0" if exact else f"|a| < {self.zero_threshold:g}",
            "zero_threshold": 0.0 if exact else self.zero_threshold,
            "init": self.init.to_dict(),
        }


@dataclass(frozen=True)
class ControlSpec:
    mode: str  # topk: keep the largest activations per example; percentile: centre on a running per-unit quantile
    target: float = 0.7  # activation sparsity to reach at every site, in (0, 1) (--act-target)
    freeze_after: int | None = None  # percentile: stop updating the statistics after this many training steps
    # percentile: q <- ema * q + (1 - ema) * q_batch (the first batch sets q); a short memory, because training
    # keeps pushing the pre-activations up past a stale q (0.9 undershot a 0.8 target by 9 points)
    ema: float = 0.5

    def to_dict(self) -> JsonObject:
        d = asdict(self)
        if self.mode == "percentile":
            d["statistic"] = f"EMA ({self.ema:g}) of each batch's per-unit {self.target:g}-quantile of h"
        else:
            d.update(statistic=None, ema=None)
        return d


@dataclass(frozen=True)
class RelufySpec:
    source: str  # ACTIVATIONS name the network trains with first (--from)
    target: str  # the ReLU variant swapped in at every activation site (--to)
    epochs: int = 1  # fine-tuning passes over the extraction split after the swap

    def to_dict(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class Features:
    control: ControlSpec | None  # one controlled run; with tradeoff the mode and freezing, target per run
    relufy: RelufySpec | None
    targets: tuple[float, ...] | None  # the trade-off sweep's targets, increasing
    models: tuple[str | None, ...] = (None,)  # trade-off: the models overlaid (None: drift's default model)
    workers: int = 1  # trade-off: 1 runs in-process, more in a local spawn pool


def require_drift_model(arch: str) -> None:
    """Refuse a model drift cannot measure (one without activation sites, or a user's factory)."""
    if arch not in DRIFT_ARCHS:
        raise UsageError(
            f"drift measures models with activation sites ({', '.join(DRIFT_ARCHS)}), not {arch!r} models",
            hint="use e.g. --model mlp:784-256-256-256-10, resnet20, vit:p4-d64-l4-h4 or gpt-nano:l2-d64-h4-c64",
        )
