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

from collections.abc import Callable
from functools import partial
from typing import Protocol, cast

import torch
import torch.nn.functional as F
from torch.nn.grad import conv2d_weight

from ticketcli.models import MLP, MaskedNet, mlp_forward
from ticketcli.sites import ActFn, LayerRecord, Trace, find_sites
from ticketcli.train import Loss


class TracedModel(Protocol):
    """A model with activation sites: its forward_with takes a trace (ResNet, ViT, GPT-nano)."""

    def forward_with(self, x: torch.Tensor, p: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor: ...


SiteForward = Callable[..., torch.Tensor]  # (x, params, trace=None) -> logits (N, classes)
PerSite = Callable[[str, ActFn], ActFn]  # (name of the layer feeding the site, drift's activation) -> its function


def from_mlp(forward: Callable, act: ActFn | list[ActFn]) -> SiteForward:
    """An MLP pass `forward(x, params, act=, trace=list)` (mlp_forward's) as a traced site forward."""

    def run(x: torch.Tensor, params: dict[str, torch.Tensor], trace: Trace | None = None) -> torch.Tensor:
        steps: list | None = None if trace is None else []
        logits = forward(x, params, act=act, trace=steps)
        for i, (a, z, h, out) in enumerate(steps or []):
            trace.layer(f"layers.{i}", a, z)  # type: ignore[union-attr]
            if i < len(steps) - 1:  # type: ignore[arg-type]
                trace.site(f"layers.{i}", h, out)  # type: ignore[union-attr]
        return logits

    return run


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


def _masked_mean(t: torch.Tensor, keep: torch.Tensor | None) -> float:
    return float(t.mean() if keep is None else t[keep].mean())


def _split(rec: LayerRecord, g: torch.Tensor, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(outer, cov), each shaped (out, in...) like the weight, whose means add up to the mean weight gradient:
    dL/dW = P · (E[g] E[a]ᵀ + Cov(g, a)) over the layer's samples, P samples per example (float64)."""
    a_in = rec.a.detach().double()
    if rec.conv is None and a_in.dim() == 2:  # (B, in): one sample per example, P = 1
        g_mean, a_mean = g.mean(0), a_in.mean(0)
        outer = torch.outer(g_mean, a_mean)  # (out, in)
        cov = (g - g_mean).T @ (a_in - a_mean) / b  # (out, in)
        return outer, cov
    if rec.conv is None:  # (B, N, in) tokens
        a2, g2 = a_in.flatten(0, -2), g.flatten(0, -2)  # (B*N, in), (B*N, out)
        p = a_in.shape[1]
        g_mean, a_mean = g2.mean(0), a2.mean(0)
        return p * torch.outer(g_mean, a_mean), p * (g2 - g_mean).T @ (a2 - a_mean) / a2.shape[0]
    m = rec.conv
    stride, padding = m.stride, cast(tuple[int, ...], m.padding)  # our paddings are numbers, never "same"
    p = g[0, 0].numel()  # output positions per example
    n = b * p
    g_mean = g.mean((0, 2, 3))  # (out,)
    patch = F.unfold(a_in.mean(0, keepdim=True), m.kernel_size, padding=padding, stride=stride)  # (1, in*k*k, P)
    a_mean = patch[0].mean(1)  # E[a] over samples: unfold is linear, so the mean image's patches suffice
    shape = (g.shape[1], *m.weight.shape[1:])  # the weight's (out, in, k, k)
    # Σ_s g_s a_sᵀ by the convolution's own weight-gradient kernel, in float64 (unfolding every patch is slow)
    gram = conv2d_weight(a_in, shape, g, stride=stride, padding=padding).flatten(1)  # (out, in*k*k)
    outer = torch.outer(g_mean, a_mean)
    cov = gram / n - outer  # the population covariance E[g aᵀ] - E[g] E[a]ᵀ
    return (p * outer).reshape(shape), (p * cov).reshape(shape)


def _dead_units(zero: torch.Tensor) -> int:
    """Units (features, or channels of a convolution) whose activation is zero for every sample."""
    if zero.dim() == 4:  # (B, C, H, W): a unit is a channel
        return int(zero.transpose(0, 1).flatten(1).all(1).sum())
    return int(zero.flatten(0, -2).all(0).sum())  # (B, out) or (B, N, out)


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
) -> dict:
    """All statistics of the effective weights `params` (W * M) on the probe batch (x, y), by layer.

    Gradients are per-example: g = dℓ_i/dz = B · dL/dz for the batch-mean loss L and the layer output z (with a
    norm after the layer, the activation sees norm(z), and the pre-activation statistics use that). The mean
    weight gradient over kept entries splits exactly into a mean-field term (E[g] E[a]ᵀ) and a covariance term
    (population covariance over the layer's samples), computed separately in float64 from g and the input a."""
    eff = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    trace = Trace()
    logits = forward(x, eff, trace=trace)
    loss = loss_fn(logits, y)
    names = trace.measured()
    weights = [eff[f"{name}.weight"] for name in names]
    grads = torch.autograd.grad(loss, weights + [trace.layers[name].z for name in names])
    b = x.shape[0]
    layers = {}
    for i, name in enumerate(names):
        rec = trace.layers[name]
        keep = None if masks is None else masks[f"{name}.weight"].bool()
        w = weights[i].detach()
        kept = w.flatten() if keep is None else w[keep]
        g = grads[len(names) + i].double() * b  # z's shape: per-example dℓ/dz
        outer, cov = _split(rec, g, b)
        s: dict[str, float | int | None] = {
            "weight_mean": float(kept.mean()),
            "weight_std": float(kept.std()) if kept.numel() > 1 else 0.0,
            "neg_weight_share": float((kept < 0).double().mean()),
            "grad_mean": _masked_mean(grads[i].double(), keep),
            "grad_outer": _masked_mean(outer, keep),
            "grad_cov": _masked_mean(cov, keep),
        }
        if rec.h is not None and rec.out is not None:
            h = rec.h.detach()  # pre-activation: what the activation sees
            a = rec.out.detach()  # activation (before any skip connection adds the layer's input)
            zero = a == 0 if exact_zeros else a.abs() < zero_threshold
            pos = h > 0
            rms = float(a.double().square().mean().sqrt())
            s.update(
                neg_preact_share=float((h < 0).double().mean()),
                sparsity=float(zero.double().mean()),
                dead_units=_dead_units(zero),
                grad_pos_preact=float(g[pos].mean()) if bool(pos.any()) else None,
                spike_ratio=float(a.abs().max()) / rms if rms > 0 else None,
            )
        layers[name] = s
    acc = float((logits.argmax(1) == y).double().mean())
    return {"loss": float(loss.detach()), "accuracy": acc, "layers": layers}


def measure(
    params: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor] | None,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    act: ActFn,
    exact_zeros: bool,
    zero_threshold: float,
    loss_fn: Loss,
    forward: Callable | None = None,
) -> dict:
    """measure_traced for an MLP: `forward(x, params, act=, trace=list)` is its pass (default: mlp_forward
    without norms or skips) and `act` its activation."""
    n_layers = sum(1 for n in params if n.endswith(".weight"))
    forward = forward or partial(mlp_forward, n_layers=n_layers)
    return measure_traced(
        params,
        masks,
        x,
        y,
        forward=from_mlp(forward, act),
        exact_zeros=exact_zeros,
        zero_threshold=zero_threshold,
        loss_fn=loss_fn,
    )
