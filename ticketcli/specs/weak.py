"""`ticket train-weak`'s spec without importing torch: WeakSpec, its defaults written once as its fields (the paper's
weak-ticket protocol, Appendix B). Its options are declared in settings/weak.py and resolve.build_weak_spec builds
it from them (tests/test_defaults.py fails on a default written a second time)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ticketcli.contract.schema import JsonObject
from ticketcli.specs.run import WeightOptim


@dataclass(frozen=True)
class WeakSpec:
    """Weight-training settings; defaults are the paper's weak-ticket protocol (Appendix B)."""

    epochs: int = 40
    batch_size: int = 512
    optim: WeightOptim = field(default_factory=WeightOptim)  # Adam, lr 1e-3, betas (0.9, 0.999), eps 1e-8
    precision: str = "fp32"  # or bf16 autocast of the training forward pass

    def to_dict(self) -> JsonObject:
        d = {"epochs": self.epochs, "batch_size": self.batch_size, "optimizer": self.optim.to_dict()}
        return d | ({"precision": self.precision} if self.precision != "fp32" else {})
