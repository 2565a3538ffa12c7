"""Pruning at initialisation (docs/method.md): SNIP, GraSP and SynFlow score the frozen weights once, then top-k.

No weights are trained. SNIP and GraSP read a few seeded minibatches of the extraction split; SynFlow reads no
data at all (an all-ones input of the data's shape).
"""

from __future__ import annotations

import functools
import operator

import torch
import torch.nn.functional as F

from ticketcli.data.datasets import Splits
from ticketcli.errors import UsageError
from ticketcli.methods.base import Context, ExtractResult, Method, dense_masks
from ticketcli.methods.registry import option
from ticketcli.models import batchnorm
from ticketcli.models.masked import MaskedNet
from ticketcli.selection.groups import power_schedule, restricted, select
from ticketcli.specs.run import MethodSpec

Batches = list[tuple[torch.Tensor, torch.Tensor]]
Params = dict[str, torch.Tensor]


def minibatches(data: Splits, spec: MethodSpec, generator: torch.Generator) -> Batches:
    """The first --saliency-batches minibatches of a seeded shuffle of the extraction split."""
    n = len(data.y_extract)  # examples (text: blocks, each of many targets)
    order = torch.randperm(n, generator=generator).to(data.x_extract.device)
    idx = [order[i : i + spec.batch_size] for i in range(0, n, spec.batch_size)][: option(spec, "saliency_batches")]
    return [(data.x_extract[i], data.y_extract[i]) for i in idx]


def leaf_params(net: MaskedNet, dtype: torch.dtype = torch.float32) -> Params:
    return {n: net.weights[n].detach().to(dtype, copy=True).requires_grad_(True) for n in net.names}


def loss_gradient(
    net: MaskedNet, params: Params, batches: Batches, temperature: float = 1.0, create_graph: bool = False
) -> Params:
    """Sum over the batches of dL/dθ, L = mean cross-entropy of logits / temperature."""
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    for x, y in batches:
        loss = F.cross_entropy(net.forward_with(x, params) / temperature, y)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
        total = {n: t + g for (n, t), g in zip(total.items(), grads)}
    return total


def hessian_vector_product(
    net: MaskedNet, params: Params, batches: Batches, v: Params, temperature: float = 1.0
) -> Params:
    """H v summed over the batches, by differentiating (dL/dθ · v) once more (double backward)."""
    hv = {n: torch.zeros_like(p) for n, p in params.items()}
    for x, y in batches:
        g = loss_gradient(net, params, [(x, y)], temperature, create_graph=True)
        z = functools.reduce(operator.add, [(g[n] * v[n]).sum() for n in params])  # the scalar g · v
        hv = {n: h + d for (n, h), d in zip(hv.items(), torch.autograd.grad(z, list(params.values())))}
    return hv


def snip_scores(net: MaskedNet, batches: Batches) -> Params:
    """|dL/dc| at c = 1 for a mask variable c on every weight: |g ⊙ w| with g summed over the batches."""
    params = leaf_params(net)
    g = loss_gradient(net, params, batches)
    return {n: (g[n] * params[n]).detach().abs() for n in params}


def grasp_scores(
    net: MaskedNet, g_batches: Batches, h_batches: Batches, temperature: float, direction: str = "paper"
) -> Params:
    """GraSP's score, ranked largest first: -θ ⊙ (H g) for the paper's reading, θ ⊙ (H g) for the original's.

    g comes from the first collection, H g from the second (the same one for shared data), logits / temperature
    in both. The two readings rank the same numbers in opposite orders."""
    params = leaf_params(net)
    g = {n: t.detach() for n, t in loss_gradient(net, params, g_batches, temperature).items()}
    hg = hessian_vector_product(net, params, h_batches, g, temperature)
    if direction == "original":
        return {n: (params[n] * hg[n]).detach() for n in params}
    return {n: (-params[n] * hg[n]).detach() for n in params}


def synflow_scores(net: MaskedNet, masks: Params, input_like: torch.Tensor) -> Params:
    """|θ ⊙ dR/dθ| for θ = |W| ⊙ M and R = sum of the outputs on an all-ones input (float64: R is a product).

    BatchNorm runs in eval mode on its running statistics, as SynFlow's authors do (batch statistics of a
    constant input would zero every activation)."""
    params = {n: (net.weights[n].detach().double().abs() * masks[n]).requires_grad_(True) for n in net.names}
    with batchnorm.buffers_as(net.module, torch.float64):
        r = net.forward_with(torch.ones_like(input_like, dtype=torch.float64), params, batch_statistics=False).sum()
    grads = torch.autograd.grad(r, list(params.values()))
    return {n: (g * params[n]).detach().abs() for (n, _), g in zip(params.items(), grads)}


class _Saliency(Method):
    trains = frozenset()  # scores are computed once, never trained
    resumable = False  # one shot: nothing worth a checkpoint
    data_parallel = False
    uses_epochs = False  # the progress bar counts epochs; these methods have none
    seeded = True  # minibatches drawn from the generator
    score_init = None
    default_scope = "global"  # one top-k over all parameters (Appendix B), per layer with --layer-densities

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        scores = self.scores(net, data, spec, ctx.generator)
        return ExtractResult(select(scores, self.groups(net, spec), pattern=self.pattern(spec)))

    def scores(self, net: MaskedNet, data: Splits, spec: MethodSpec, generator: torch.Generator) -> Params:
        """One score per weight, from minibatches drawn from `generator`."""
        raise NotImplementedError


class Snip(_Saliency):
    name = "snip"

    def scores(self, net: MaskedNet, data: Splits, spec: MethodSpec, generator: torch.Generator) -> Params:
        return snip_scores(net, minibatches(data, spec, generator))


class Grasp(_Saliency):
    """Two readings (docs/method.md). paper (the default): keep the k LARGEST -θ ⊙ Hg, as Appendix B's "signed
    score ... followed by global top-k" says. original: keep the k largest θ ⊙ Hg, i.e. remove the largest -θ ⊙ Hg,
    as GraSP (Wang et al. 2020, arXiv 2002.07376) and the Synaptic-Flow code do. g and Hg come from two independent
    collections of minibatches (separate, the default) or from one (shared, as the original code)."""

    name = "grasp"

    def scores(self, net: MaskedNet, data: Splits, spec: MethodSpec, generator: torch.Generator) -> Params:
        g_batches = minibatches(data, spec, generator)  # two independent shuffles: two independent collections
        h_batches = g_batches if option(spec, "grasp_data") == "shared" else minibatches(data, spec, generator)
        return grasp_scores(
            net, g_batches, h_batches, option(spec, "grasp_temperature"), option(spec, "grasp_direction")
        )


class SynFlow(_Saliency):
    """Iterative SynFlow: round r of R keeps density d^(r/R) (exponential schedule), rescoring on the survivors."""

    name = "synflow"
    seeded = False  # data-free and deterministic: the seed only enters through the weights

    def masks_for(self, net: MaskedNet, data: Splits, spec: MethodSpec, ctx: Context) -> ExtractResult:
        if net.sequence:  # its input is a tensor of ones, which character ids cannot be
            raise UsageError(
                "synflow scores a network on an all-ones input, and a character-level model takes character ids",
                hint="use snip or grasp, the saliency methods that read the text",
            )
        masks = dense_masks(net)
        groups = self.groups(net, spec)
        rounds = option(spec, "synflow_rounds")
        for r in range(1, rounds + 1):
            scores = synflow_scores(net, {n: m.double() for n, m in masks.items()}, data.x_extract[:1])
            # pruned entries score 0 anyway; -inf makes sure they never come back on ties
            masks = select(restricted(scores, masks), groups, power_schedule(r, rounds), self.pattern(spec))
        return ExtractResult(masks)
