"""`ticket train-weak`'s spec without importing torch: WeakSpec, its defaults written once as its fields (the paper's
weak-ticket protocol, Appendix B), and its one builder from the command's flags. The command's help texts read the
defaults from here (tests/test_defaults.py fails on one written a second time)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ticketcli.settings.registry import check_setting
from ticketcli.settings.run import RUN
from ticketcli.specs import WeightOptim


@dataclass(frozen=True)
class WeakSpec:
    """Weight-training settings; defaults are the paper's weak-ticket protocol (Appendix B)."""

    epochs: int = 40
    batch_size: int = 512
    optim: WeightOptim = field(default_factory=WeightOptim)  # Adam, lr 1e-3, betas (0.9, 0.999), eps 1e-8
    precision: str = "fp32"  # or bf16 autocast of the training forward pass

    def to_dict(self) -> dict:
        d = {"epochs": self.epochs, "batch_size": self.batch_size, "optimizer": self.optim.to_dict()}
        return d | ({"precision": self.precision} if self.precision != "fp32" else {})


def build_weak_spec(
    *, epochs: int | None = None, batch_size: int | None = None, lr: float | None = None, precision: str | None = None
) -> WeakSpec:
    """A validated WeakSpec from flag values; None keeps the paper's default."""
    d = WeakSpec()
    return WeakSpec(
        epochs=d.epochs if epochs is None else check_setting("epochs", epochs),
        batch_size=d.batch_size if batch_size is None else check_setting("batch_size", batch_size),
        optim=d.optim if lr is None else replace(d.optim, lr=check_setting("lr", lr)),
        precision=d.precision if precision is None else RUN["precision"].check(precision),
    )
