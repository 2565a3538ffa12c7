"""`ticket drift`'s settings: the activations and losses it offers, the frozen DriftSpec and its validation from
the command's flags (None = default)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ticketcli.data import DATASETS
from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.drift.text import TextSpec
from ticketcli.errors import UsageError
from ticketcli.models import parse_model
from ticketcli.spec_syntax import TEXT_ARCHS
from ticketcli.specs import PAPER_HIDDEN, DataSpec, InitSpec, ModelSpec, check_setting
from ticketcli.train import WeightOptim

INPUTS = ("data", "gaussian", "uniform")  # the dataset's images, N(0, 1) or U[0, 1] features with random labels


@dataclass(frozen=True)
class DriftSpec:
    model: ModelSpec
    data: DataSpec  # the dataset: sizes the default model; the inputs when inputs == "data"
    inputs: str = "data"  # data | gaussian | uniform
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

    def to_dict(self) -> dict[str, Any]:
        exact = ACTIVATIONS.get(self.activation).exact_zeros
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


# drift's numeric settings and their defaults; their ranges are specs.RANGES's
DRIFT_DEFAULTS = {
    "lr": 1e-3,
    "momentum": 0.0,
    "clip": 50.0,
    "batch_size": 512,
    "steps": 500,
    "log_every": 10,
    "probe_size": 1024,
    "zero_threshold": 1e-2,
}


def build_drift_spec(s: dict[str, Any], location: dict[str, Any]) -> DriftSpec:
    """Validate the command's settings (None = default) and freeze them; location is data_location()'s dict."""
    info = DATASETS.get(s.get("dataset") or "fashion-mnist")
    if s.get("model") is not None:
        model = parse_model(str(s["model"])).with_data(info.shape, info.classes)
    elif s.get("text") is not None:
        model = parse_model(DEFAULT_TEXT_MODEL)
    else:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes))
    require_drift_model(model.arch)
    inputs = s.get("inputs") or "data"
    if inputs not in INPUTS:
        raise UsageError(f"unknown --inputs {inputs!r}; choose one of: {', '.join(INPUTS)}")
    text = _text_spec(s, model, inputs, location)
    loss, act = s.get("loss") or "cross-entropy", s.get("activation") or "relu"
    LOSSES.get(loss)
    ACTIVATIONS.get(act)
    optimizer = s.get("optimizer") or "adam"
    if optimizer not in ("adam", "sgd"):
        raise UsageError(f"unknown --optimizer {optimizer!r}; choose adam or sgd")
    num = {k: check_setting(k, _default(s, k, v)) for k, v in DRIFT_DEFAULTS.items()}
    optim = WeightOptim(name=optimizer, lr=num["lr"], momentum=num["momentum"])
    seeds = parse_seeds(_default(s, "seeds", "0"))
    return DriftSpec(
        model=model,
        data=DataSpec(name=info.name, **location),
        inputs=inputs,
        loss=loss,
        activation=act,
        clip=num["clip"],
        optim=optim,
        batch_size=num["batch_size"],
        steps=num["steps"],
        log_every=min(num["log_every"], num["steps"]),
        probe_size=num["probe_size"],
        zero_threshold=num["zero_threshold"],
        seeds=seeds,
        device=str(s.get("device") or "auto"),
        text=text,
    )


def _text_spec(s: dict[str, Any], model: ModelSpec, inputs: str, location: dict[str, Any]) -> TextSpec | None:
    """A character-level model trains on text (--text, or the fortunes files), and only it does."""
    if model.arch not in TEXT_ARCHS:
        if s.get("text") is not None:
            raise UsageError(
                f"--text trains a character-level model, not {model.arch}", hint=f"use --model {DEFAULT_TEXT_MODEL}"
            )
        return None
    clash = [f for f, k in (("--dataset", "dataset"), ("--inputs", "inputs")) if s.get(k) not in (None, "data")]
    if clash:
        raise UsageError(f"{', '.join(clash)} cannot be combined with {model.arch}, which trains on --text")
    return TextSpec(path=None if s.get("text") is None else str(s["text"]), search_dirs=tuple(location["search_dirs"]))


def _default(s: dict, key: str, value: Any) -> Any:
    return value if s.get(key) is None else s[key]


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): distinct non-negative integers."""
    try:
        seeds = tuple(check_setting("seeds", int(t), "--seeds entries") for t in str(text).split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must be distinct comma-separated integers, got {text!r}")
    return seeds


DRIFT_ARCHS = ("mlp", "lenet300", "resnet20", "resnet18", "vit", "gpt-nano")  # models with activation sites
DEFAULT_TEXT_MODEL = "gpt-nano:l2-d64-h4-c64"  # --text without --model


def require_drift_model(arch: str) -> None:
    """Refuse a model drift cannot measure (one without activation sites, or a user's factory)."""
    if arch not in DRIFT_ARCHS:
        raise UsageError(
            f"drift measures models with activation sites ({', '.join(DRIFT_ARCHS)}), not {arch!r} models",
            hint="use e.g. --model mlp:784-256-256-256-10, resnet20, vit:p4-d64-l4-h4 or gpt-nano:l2-d64-h4-c64",
        )
