"""What drift measures at a model's activation sites (sites.py): the forward pass it trains and traces, with its
chosen activation at every site, and the per-layer statistics of one traced pass on the probe batch.

Statistics are reported for every Linear/Conv2d layer the traced pass runs through (all but a GPT's token
embedding, a lookup): weight mean, spread and negative share (kept weights only, under a ticket's masks), the
mean weight gradient and its exact split into a mean-field term and a covariance term; for a layer feeding a site
also the negative pre-activation share, activation sparsity, dead units and the activation spike ratio. A
"sample" of a layer is an example for an MLP, an (example, position) pair for a convolution (its input patch) or
a (sequence, token) pair for a transformer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F
from torch import nn

from ticketcli.contract.schema import JsonObject
from ticketcli.drift.sums import all_but, compare, count, masked_sum64, peak_abs, square_sum64, sum64
from ticketcli.models.masked import MaskedNet
from ticketcli.models.mlp import MLP, MlpTrace, mlp_forward
from ticketcli.models.sites import ActFn, Trace, find_sites
from ticketcli.train import Loss


class TracedModel(Protocol):
    """A model with activation sites: its forward_with takes a trace (ResNet, ViT, GPT-nano)."""

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor: ...


SiteForward = Callable[..., torch.Tensor]  # (x, params, trace=None) -> logits (N, classes)
PerSite = Callable[[str, ActFn], ActFn]  # (name of the layer feeding the site, drift's activation) -> its function


def from_mlp(forward: Callable[..., torch.Tensor], act: ActFn | list[ActFn]) -> SiteForward:
    """An MLP pass `forward(x, params, act=, trace=list)` (mlp_forward's) as a traced site forward."""

    def run(x: torch.Tensor, params: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        steps: MlpTrace | None = None if trace is None else []
        logits = forward(x, params, act=act, trace=steps)
        for i, (a, z, h, out) in enumerate(steps or []):
            trace.layer(f"layers.{i}", a, z)  # type: ignore[union-attr]
            if i < len(steps) - 1:  # type: ignore[arg-type]
                trace.site(f"layers.{i}", h, out)  # type: ignore[union-attr]
        return logits

    return run


def mlp_sites(
    params: dict[str, torch.Tensor], act: ActFn, forward: Callable[..., torch.Tensor] | None = None
) -> SiteForward:
    """An MLP's traced site forward for measure_traced: `forward(x, params, act=, trace=list)` is its pass (default:
    mlp_forward over the layers in `params`, without norms or skips) and `act` its activation."""
    n_layers = sum(1 for n in params if n.endswith(".weight"))
    return from_mlp(forward or partial(mlp_forward, n_layers=n_layers), act)


def drift_forward(net: MaskedNet, act: ActFn, per_site: PerSite | None = None) -> SiteForward:
    """The pass drift trains and measures: `act` at every activation site of net's model, or per_site(name, act)
    at the site fed by layer `name` (a hook for site-wise control: centering, top-k). An MLP takes the activations
    as an argument (mlp_forward; its sites are "layers.i"), any other model's site modules are set to them; a
    character-level model's (B, T, vocab) logits come flattened to (B * T, vocab), one prediction per character."""
    module = net.module
    if isinstance(module, MLP):
        hidden = [f"layers.{i}" for i in range(len(module.layers) - 1)]
        acts: ActFn | list[ActFn] = act if per_site is None else [per_site(name, act) for name in hidden]
        return from_mlp(partial(mlp_forward, n_layers=len(module.layers), norms=module.norms, skips=module.skips), acts)
    sites = find_sites(module)
    if not sites:
        raise ValueError(f"{type(module).__name__} has no activation sites")
    for site in sites:
        site.fn = act if per_site is None else per_site(site.source, act)

    traced = cast(TracedModel, module)

    def run(x: torch.Tensor, params: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        logits = traced.forward_with(x, params, trace=trace)
        return logits.flatten(0, -2) if logits.dim() == 3 else logits

    return run


def _kept_sum(g: torch.Tensor, a: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Σ over the samples s and the kept entries (o, j) of g[s, o] · a[s, j] (float64 scalar), for g (n, out) and
    a (n, in): with every entry kept it is Σ_s (Σ_o g) (Σ_j a), without ever forming an (out, in) matrix."""
    if keep is None:
        return (g.sum(1) * a.sum(1)).sum()
    return ((g @ keep.double()) * a).sum()


class _Layer:
    """One layer's statistics, accumulated over the chunks of the probe (all sums in float64).

    Linear and token layers keep per-chunk centred co-moments merged exactly (Chan et al.'s pairwise update), so
    the covariance term is as accurate as a single centred product over the whole probe; convolutions keep the raw
    sum Σ_s g_s a_sᵀ over kept entries, the mean input image and the gradient's channel sums."""

    def __init__(self, conv: nn.Conv2d | None, keep: torch.Tensor | None):
        self.conv, self.keep = conv, keep
        self.examples = 0  # examples seen (a probe's rows)
        self.n = 0  # samples seen: examples, (example, position) pairs or (sequence, token) pairs
        self.p = 1  # samples per example
        self.g_mean: torch.Tensor | None = None  # linear: running mean of g (out,)
        self.a_mean: torch.Tensor | None = None  # linear: running mean of a (in,)
        self.co_moment = torch.zeros((), dtype=torch.float64)  # linear: Σ_kept Σ_s (g - ḡ)(a - ā)ᵀ; conv: raw Σ g aᵀ
        self.g_total: torch.Tensor | None = None  # conv: Σ_s g (out,)
        self.image_total: torch.Tensor | None = None  # conv: Σ over examples of the input image (C, H, W)
        self.site: dict[str, float] | None = None  # the activation's counts, when the layer feeds a site
        self.alive: torch.Tensor | None = None  # per unit: some sample's activation is not zero

    def merge_linear(self, n: int, g_mean: torch.Tensor, a_mean: torch.Tensor, m2: torch.Tensor) -> None:
        if self.g_mean is None or self.a_mean is None:
            self.g_mean, self.a_mean, self.co_moment, self.n = g_mean, a_mean, m2, n
            return
        total = self.n + n
        dg, da = g_mean - self.g_mean, a_mean - self.a_mean
        cross = dg.sum() * da.sum() if self.keep is None else dg @ self.keep.double() @ da
        self.co_moment = self.co_moment + m2 + cross * (self.n * n / total)
        self.g_mean = self.g_mean + dg * (n / total)
        self.a_mean = self.a_mean + da * (n / total)
        self.n = total

    def add_site(self, h: torch.Tensor, out: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
        """Count a chunk's pre-activations h and activations out (zero: out's zero rule); returns h > 0."""
        alive = ~all_but(zero, 1 if zero.dim() == 4 else -1)  # per unit (a channel of a convolution)
        peak = peak_abs(out)
        counts = {
            "numel": h.numel(),
            "neg": count(compare(h, "<", 0)),
            "zeros": count(zero),
            "square": square_sum64(out),
        }
        if self.site is None:
            self.site, self.alive = {**counts, "peak": peak, "pos": 0, "pos_grad": 0.0}, alive
        else:
            for k, v in counts.items():
                self.site[k] += v
            self.site["peak"] = max(self.site["peak"], peak)
            self.alive = alive if self.alive is None else self.alive | alive
        return compare(h, ">", 0)

    def results(self, weight: torch.Tensor, grad_sum: torch.Tensor) -> dict[str, float | int | None]:
        keep = self.keep
        w = weight.detach()
        kept = w.flatten() if keep is None else w[keep]
        n_kept = kept.numel()
        if self.conv is None:
            assert self.g_mean is not None and self.a_mean is not None
            outer_sum = (
                self.g_mean.sum() * self.a_mean.sum() if keep is None else self.g_mean @ keep.double() @ self.a_mean
            )
            outer = float(self.p * outer_sum / n_kept)
            cov = float(self.p * self.co_moment / self.n / n_kept)
        else:
            assert self.g_total is not None and self.image_total is not None
            m = self.conv
            padding = cast(tuple[int, ...], m.padding)  # our paddings are numbers, never "same"
            g_mean = self.g_total / self.n
            image = (self.image_total / self.examples).unsqueeze(0)
            a_mean = F.unfold(image, m.kernel_size, padding=padding, stride=m.stride)[0].mean(1)  # (in*k*k,)
            keep2 = None if keep is None else keep.flatten(1).double()
            outer_sum = g_mean.sum() * a_mean.sum() if keep2 is None else g_mean @ keep2 @ a_mean
            outer = float(self.p * outer_sum / n_kept)
            cov = float(self.p * (self.co_moment / self.n - outer_sum) / n_kept)
        s: dict[str, float | int | None] = {
            "weight_mean": float(kept.mean()),
            "weight_std": float(kept.std()) if n_kept > 1 else 0.0,
            "neg_weight_share": count(compare(kept, "<", 0)) / n_kept if n_kept else math.nan,
            "grad_mean": float(grad_sum / n_kept),
            "grad_outer": outer,
            "grad_cov": cov,
        }
        if self.site is not None and self.alive is not None:
            c = self.site
            rms = (c["square"] / c["numel"]) ** 0.5
            s.update(
                neg_preact_share=c["neg"] / c["numel"],
                sparsity=c["zeros"] / c["numel"],
                dead_units=int((~self.alive).sum()),
                grad_pos_preact=c["pos_grad"] / c["pos"] if c["pos"] else None,
                spike_ratio=c["peak"] / rms if rms > 0 else None,
            )
        return s


class StreamTrace(Trace):
    """A Trace that keeps no tensor of the pass: each layer's and site's statistics are added to their running
    sums as the forward pass reaches them, and the gradient statistics when the backward pass reaches the layer's
    output (a hook on z). What a pending hook needs (the input when masks select entries, h > 0) is held only until
    it runs."""

    def __init__(self, masks: dict[str, torch.Tensor] | None, zero: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.masks, self.zero = masks, zero
        self.stats: dict[str, _Layer] = {}
        self.b = 0  # the current chunk's examples
        self.pending: dict[str, dict[str, Any]] = {}  # layer -> what its gradient hook needs

    def layer(self, name: str, a: torch.Tensor, z: torch.Tensor, conv: nn.Conv2d | None = None) -> None:
        keep = None if self.masks is None else self.masks[f"{name}.weight"].bool()
        acc = self.stats.setdefault(name, _Layer(conv, keep))
        acc.examples += self.b
        a = a.detach()
        job: dict[str, Any] = {"a": a}
        if conv is None:
            a2 = a.flatten(0, -2) if a.dim() > 2 else a  # (samples, in)
            acc.p = a.shape[1] if a.dim() == 3 else 1
            job["a_sum"] = sum64(a2, 0)  # (in,)
            if keep is None:  # Σ_j a_sj is all the covariance needs of a: the input itself can go
                job["a_rows"], job["a"] = sum64(a2, 1), None
        else:
            image = sum64(a, 0)  # (C, H, W)
            acc.image_total = image if acc.image_total is None else acc.image_total + image
            if keep is None:  # Σ over a patch's entries, per output position: a box sum of the channel sum
                ones = torch.ones((1, 1, *conv.kernel_size), dtype=torch.float64, device=a.device)
                padding = cast(tuple[int, ...], conv.padding)
                box = F.conv2d(sum64(a, 1).unsqueeze(1), ones, None, conv.stride, padding)
                job["a_rows"], job["a"] = box[:, 0], None  # (B, H', W')
        self.pending[name] = job
        # torch leaves Tensor.register_hook unannotated
        z.register_hook(partial(self._backward, name))  # type: ignore[no-untyped-call]

    def site(self, source: str, h: torch.Tensor, out: torch.Tensor) -> None:
        h, out = h.detach(), out.detach()
        self.pending[source]["pos"] = self.stats[source].add_site(h, out, self.zero(out))

    def _backward(self, name: str, grad: torch.Tensor) -> None:
        """z's gradient of the chunk's mean loss: g = b · dL/dz is each example's own (float64)."""
        job, acc = self.pending.pop(name), self.stats[name]
        grad = grad.detach()
        if acc.conv is None:
            grad2 = grad.flatten(0, -2) if grad.dim() > 2 else grad  # (samples, out)
            n = grad2.shape[0]
            a_mean = job["a_sum"] / n
            if job["a"] is None:  # row and column sums of g = b · grad, without a float64 copy of it
                g_mean, g_rows = sum64(grad2, 0) * (self.b / n), sum64(grad2, 1) * self.b
                m2 = ((g_rows - g_mean.sum()) * (job["a_rows"] - a_mean.sum())).sum()
            else:
                g2 = grad2.double() * self.b
                g_mean = g2.mean(0)
                a2 = job["a"].flatten(0, -2).double() if job["a"].dim() > 2 else job["a"].double()
                m2 = _kept_sum(g2 - g_mean, a2 - a_mean, acc.keep)
            acc.merge_linear(n, g_mean, a_mean, m2)
        else:  # sums in float64 without a float64 copy of the whole gradient (g = b · grad)
            acc.p = grad[0, 0].numel()
            acc.n += grad.shape[0] * acc.p
            g_total = sum64(grad, (0, 2, 3)) * self.b
            acc.g_total = g_total if acc.g_total is None else acc.g_total + g_total
            if job["a"] is None:
                gram = (sum64(grad, 1) * job["a_rows"]).sum() * self.b
            else:  # Σ_s g_sᵀ M a_s: the input convolved with the mask as weights
                m = acc.conv
                keep = cast(torch.Tensor, acc.keep).double()
                conv = F.conv2d(job["a"].double(), keep, None, m.stride, cast(tuple[int, ...], m.padding))
                gram = (conv * grad.double()).sum() * self.b
            acc.co_moment = acc.co_moment + gram
        pos = job.get("pos")
        if pos is not None and acc.site is not None:
            acc.site["pos"] += count(pos)
            acc.site["pos_grad"] += masked_sum64(grad, pos) * self.b


def _chunks(x: torch.Tensor, y: torch.Tensor, chunk: int | None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The probe in consecutive chunks of `chunk` examples (None: whole); y may hold several targets per example
    (a character model's tokens)."""
    b = x.shape[0]
    if chunk is None or chunk >= b:
        return [(x, y)]
    per = y.shape[0] // b
    return [(x[i : i + chunk], y[i * per : (i + chunk) * per]) for i in range(0, b, chunk)]


def measure_traced(
    params: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor] | None,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    forward: SiteForward,
    exact_zeros: bool,
    zero_threshold: float,
    loss_fn: Loss,
    chunk: int | None = None,
) -> JsonObject:
    """All statistics of the effective weights `params` (W * M) on the probe batch (x, y), by layer.

    Gradients are per-example: g = dℓ_i/dz = B · dL/dz for the batch-mean loss L and the layer output z (with a
    norm after the layer, the activation sees norm(z), and the pre-activation statistics use that). The mean
    weight gradient over kept entries splits exactly into a mean-field term (E[g] E[a]ᵀ) and a covariance term
    (population covariance over the layer's samples), computed separately in float64 from g and the input a.

    The probe is processed in chunks of `chunk` examples (None: in one pass), each forward and backward pass
    adding to float64 running sums and then freed: the statistics are those of the whole probe (up to float
    rounding) whenever examples do not interact, i.e. without batch-statistic normalisation."""
    eff = {n: p.detach().requires_grad_(True) for n, p in params.items()}  # leaves sharing params' storage
    zero = (
        (lambda a: compare(a, "==", 0)) if exact_zeros else (lambda a: compare(a, "<", zero_threshold, magnitude=True))
    )
    trace = StreamTrace(masks, zero)
    total, loss_sum, correct = x.shape[0], 0.0, 0
    grads: dict[str, torch.Tensor] = {}  # per layer: Σ over kept entries of dL/dW (the probe's mean loss)
    for xc, yc in _chunks(x, y, chunk):
        trace.b = xc.shape[0]
        logits = forward(xc, eff, trace=trace)
        loss = loss_fn(logits, yc)
        # autograd's weight gradients, as in training: grad_mean is their kept sum (the hooks on the layers' outputs
        # take every other statistic on the way)
        part = trace.b / total
        names = list(trace.stats)
        for name, gw in zip(names, torch.autograd.grad(loss, [eff[f"{name}.weight"] for name in names])):
            keep = trace.stats[name].keep
            grads[name] = grads.get(name, 0.0) + sum64(gw if keep is None else gw[keep]) * part
        loss_sum += float(loss.detach()) * part
        correct += int((logits.detach().argmax(1) == yc).sum())
        del logits, loss
    layers = {name: acc.results(eff[f"{name}.weight"], grads[name]) for name, acc in trace.stats.items()}
    return {"loss": loss_sum, "accuracy": correct / y.shape[0], "layers": layers}
