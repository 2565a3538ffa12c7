"""Activation-sparsity control during drift training (arXiv 2605.17659, improvements 1 and 2): top-k activation
pruning or percentile centering at every activation site, and an accumulation stop for the centering statistics.

An activation site is one call of the activation function in a forward pass. Sites are numbered in the order the
pass reaches them and named by the caller (an MLP's hidden layers: layers.0, layers.1, ...), so any model whose
functional forward takes `act=` and calls it once per site gets the control without changes of its own. A site's
tensor is (B, units...): top-k and the percentiles treat everything after the batch dimension as its units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.drift.spec import ControlSpec

Act = Callable[[torch.Tensor], torch.Tensor]
SHARES = ("sparsity", "error", "neg_preact_share", "neg_act_input_share")  # a site's summary: _shares' numbers


def keep_count(units: int, target: float) -> int:
    """Activations top-k keeps per example: the count nearest to (1 - target) * units."""
    return int(round((1.0 - target) * units))


def topk_keep(a: torch.Tensor, k: int) -> torch.Tensor:
    """a (B, units) with all but each row's k largest entries set to zero (ties: torch.topk's choice)."""
    if k >= a.shape[1]:
        return a
    keep = torch.zeros_like(a, dtype=torch.bool).scatter_(1, a.topk(k, dim=1).indices, True)
    return a * keep  # the kept entries keep their gradient


def _units(t: torch.Tensor) -> torch.Tensor:
    """(examples, units): a sequence model's (B, T, C) counts each position as an example of C units (per-token
    control); images and vectors flatten everything after the batch dimension."""
    return t.reshape(-1, t.shape[-1]) if t.dim() == 3 else t.flatten(1)


class ActivationControl:
    """One training run's control: per-site running quantiles and the count of training steps that updated them.

    Percentile centering feeds act(h - q) to the network, q (units,) the running per-unit target-quantile of the
    pre-activations h; q is a statistic (no gradient). Before the first training step there is no q yet and a pass
    centres on its own batch's quantile (so the step-0 measurement is controlled too)."""

    def __init__(self, spec: ControlSpec):
        self.spec = spec
        self.quantiles: dict[str, torch.Tensor] = {}  # site -> (units,)
        self.updates = 0  # training steps that updated the statistics
        self.updating = False  # inside a training step that updates them
        self.record: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None

    def frozen(self) -> bool:
        """True once --freeze-stats-after steps have updated the statistics (the accumulation stop)."""
        return self.spec.freeze_after is not None and self.updates >= self.spec.freeze_after

    @contextmanager
    def training_step(self) -> Iterator[None]:
        """One training step: percentile statistics update (until frozen); every other pass only reads them."""
        self.updating = self.spec.mode == "percentile" and not self.frozen()
        try:
            yield
        finally:
            self.updates += self.updating
            self.updating = False

    def per_site(self, name: str, act: Act) -> Act:
        """The controlled activation at the site fed by layer `name` (sites.PerSite)."""

        def controlled(h: torch.Tensor) -> torch.Tensor:
            seen, out = self.apply(name, h, act, self.updating)
            if self.record is not None:
                self.record[name] = (h.detach(), seen.detach(), out.detach())
            return out

        return controlled

    def apply(self, name: str, h: torch.Tensor, act: Act, update: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(what the activation sees, the controlled activation) at one site."""
        if self.spec.mode == "topk":
            a = _units(act(h))
            return h, topk_keep(a, keep_count(a.shape[1], self.spec.target)).view_as(h)
        flat = _units(h)
        q = self.quantiles.get(name)
        if update or q is None:
            batch_q = torch.quantile(flat.detach().float(), self.spec.target, dim=0).to(h.dtype)  # (units,)
            if update:
                q = batch_q if q is None else self.spec.ema * q + (1.0 - self.spec.ema) * batch_q
                self.quantiles[name] = q
            else:
                q = batch_q
        centred = (flat - q).view_as(h)
        return centred, act(centred)

    def summary(
        self,
        forward: Callable[[torch.Tensor, dict[str, torch.Tensor]], torch.Tensor],
        params: dict[str, torch.Tensor],
        x: torch.Tensor,
        zero: Callable[[torch.Tensor], torch.Tensor],
    ) -> JsonObject:
        """Achieved activation sparsity against the target and the negative shares, per site and over all units,
        on the probe batch x with the weights params; zero(a) is drift's zero rule."""
        record: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.record = record
        try:
            with torch.no_grad():
                forward(x, params)  # drift's pass, built with per_site: every site records itself
        finally:
            self.record = None
        sites, totals = {}, [0, 0, 0, 0]
        for name, (h, seen, a) in record.items():
            n, zeros, neg, neg_seen = h.numel(), int(zero(a).sum()), int((h < 0).sum()), int((seen < 0).sum())
            centering = float(self.quantiles[name].mean()) if name in self.quantiles else None
            sites[name] = {**self._shares(n, zeros, neg, neg_seen), "centering_mean": centering}
            totals = [t + v for t, v in zip(totals, (n, zeros, neg, neg_seen), strict=True)]
        return {
            "target": self.spec.target,
            "sites": sites,
            "overall": self._shares(max(totals[0], 1), *totals[1:]),
            "statistics_updates": self.updates if self.spec.mode == "percentile" else None,
            "frozen": self.frozen(),
        }

    def _shares(self, n: int, zeros: int, neg: int, neg_seen: int) -> JsonObject:
        """Of n units: the achieved sparsity and its error against the target, and the negative shares."""
        return {
            "sparsity": zeros / n,
            "error": zeros / n - self.spec.target,
            "neg_preact_share": neg / n,
            "neg_act_input_share": neg_seen / n,
        }


def aggregate(spec: ControlSpec, per_run: list[JsonObject]) -> JsonObject:
    """The control's spec and every run's summary, with the mean over runs (seeds) of each number."""

    def mean(values: list[float | None]) -> float | None:
        v = [x for x in values if x is not None]
        return sum(v) / len(v) if v else None

    sites = per_run[0]["sites"]
    return {
        **spec.to_dict(),
        "overall": {k: mean([r["overall"][k] for r in per_run]) for k in SHARES},
        "sites": {
            s: {k: mean([r["sites"][s][k] for r in per_run]) for k in (*SHARES, "centering_mean")} for s in sites
        },
        "runs": per_run,
    }
