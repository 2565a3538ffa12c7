"""Each family's cost from its spec alone (models/<family>_family.py, through registry.estimate), checked against
the models themselves on every example spec its family declares, and the budget's refusals (budget.py)."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli import train
from ticketcli.errors import UsageError
from ticketcli.models import budget, cost, registry
from ticketcli.models.budget import Budget
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.settings.run import RUN
from ticketcli.specs.syntax import MAX_BLOCKS

# Several specs per registered model, its family's examples (variants: bias, residual, norms, odd geometries, causal
# attention)
EXAMPLES = {name: MODELS.get(name).examples for name in MODELS.names()}
SPECS = [s for specs in EXAMPLES.values() for s in specs]


def test_the_evaluation_batch_is_the_one_evaluation_uses():
    assert cost.EVAL_BATCH == train.EVAL_CHUNK


def counts(spec_text: str) -> tuple[int, int]:
    module = build_model(parse_model(spec_text))
    return sum(p.numel() for p in module.parameters()), sum(b.numel() * b.element_size() for b in module.buffers())


@pytest.mark.parametrize("text", SPECS)
def test_parameters_and_buffers_are_exact(text):
    est = registry.estimate(parse_model(text))
    assert est is not None
    assert (est.params, est.buffer_bytes) == counts(text)


def saved_activation_bytes(text: str, batch: int) -> int:
    """What autograd really keeps for the backward pass of one training forward pass (parameters and buffers
    left out: the budget counts those apart), by storage, each once."""
    spec = parse_model(text)
    net = MaskedNet(build_model(spec), spec)
    params = {n: w.clone().requires_grad_(True) for n, w in net.weights.items()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    if spec.arch == "gpt-nano":
        x = torch.randint(0, 12, (batch, int(spec.layers[3][1:])))
    else:
        x = torch.randn(batch, *(spec.input or (spec.widths[0],)))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = net.forward_with(x, params)
        out = out.reshape(-1, out.shape[-1])
        F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long)).backward()
    for t in [*params.values(), *net.module.buffers()]:
        kept.pop(t.untyped_storage().data_ptr(), None)
    return sum(kept.values())


@pytest.mark.parametrize("text", SPECS)
def test_activations_bound_what_autograd_saves(text):
    """The estimate is an upper bound of the saved activations, and not a wild one (within 4x)."""
    batch = 4
    est = registry.estimate(parse_model(text))
    assert est is not None
    measured = saved_activation_bytes(text, batch)
    estimated = cost.FLOAT * batch * est.saved
    assert measured <= estimated <= 4 * measured, (measured, estimated)


SMALL = st.integers(1, 6)


@st.composite
def small_specs(draw) -> str:
    """Random small specs of every family, geometry included."""
    arch = draw(st.sampled_from(sorted(MODELS.names())))
    bias = draw(st.sampled_from(["", "+bias"]))
    c, h, w, k = draw(SMALL), draw(st.integers(4, 12)), draw(st.integers(4, 12)), draw(st.integers(2, 5))
    geometry = f"@{c}x{h}x{w}-{k}"
    if arch == "mlp":
        widths = draw(st.lists(st.integers(1, 12), min_size=2, max_size=6))
        norm = draw(st.sampled_from(["", "+norm=batch", "+norm=layer", "+norm=rms"]))
        return "mlp:" + "-".join(map(str, widths)) + norm + bias
    if arch == "vgg":
        layers = [str(draw(SMALL))] + draw(st.lists(st.sampled_from(["M", "3", "5"]), max_size=2))
        return "vgg:" + "-".join(layers) + geometry + bias
    if arch == "wrn":
        return f"wrn:{6 * draw(st.integers(1, 2)) + 4}-{draw(st.integers(1, 2))}{geometry}{bias}"
    if arch == "vit":
        patch = draw(st.sampled_from([1, 2, 4]))
        heads = draw(st.sampled_from([1, 2]))
        return f"vit:p{patch}-d{8 * heads}-l{draw(st.integers(1, 2))}-h{heads}-m{draw(SMALL)}@{c}x8x8-{k}{bias}"
    if arch == "gpt-nano":
        heads = draw(st.sampled_from([1, 2]))
        return f"gpt-nano:l{draw(SMALL)}-d{4 * heads}-h{heads}-c{draw(SMALL)}-m{draw(SMALL)}-v{draw(SMALL)}{bias}"
    return arch + geometry + bias


@settings(max_examples=40, deadline=None)
@given(small_specs())
@pytest.mark.slow
def test_random_small_specs_are_counted_exactly(text):
    """An oracle test: whatever the spec, the arithmetic gives the built model's own counts."""
    spec = parse_model(text)
    try:
        planned_shapes(spec, Budget())
    except UsageError:
        return  # a geometry the model refuses (too many pools for the input): refused before any build
    est = registry.estimate(spec)
    assert est is not None
    assert (est.params, est.buffer_bytes) == counts(text)


def test_the_estimate_takes_microseconds_whatever_the_depth():
    spec = parse_model(f"wrn:{6 * (MAX_BLOCKS // 3) + 4}-10@3x32x32-10")
    t0 = time.perf_counter()
    est = registry.estimate(spec)
    assert est is not None and est.depth == 3 * (MAX_BLOCKS // 3)
    assert time.perf_counter() - t0 < 1.0  # a generous bound: microseconds in fact (it never loops over blocks)


@pytest.mark.parametrize(
    "text",
    [
        "vit:p4-d8-l99999999-h2@1x8x8-10",
        "wrn:999999994-1@1x8x8-10",
        "gpt-nano:l99999999-d2-h1-c8",
        f"vit:p4-d8-l{MAX_BLOCKS + 1}-h2",
    ],
)
def test_depth_is_bounded_by_the_parser(text):
    with pytest.raises(UsageError, match="a built-in model may have"):
        parse_model(text)


def test_memory_refusal_names_the_figure_and_the_option():
    spec = parse_model("vit:p4-d8-l1-h2@1x40000x40000-10")
    est = registry.estimate(spec)
    assert est is not None and est.params < 1000  # a tiny model ...
    with pytest.raises(UsageError) as e:
        budget.check(spec, Budget(max_params=1000, max_memory=8 << 30))
    assert "of memory" in str(e.value) and "8.0 GiB" in str(e.value) and "--max-memory" in str(e.value.hint)
    assert est.buffer_bytes == 4 * 10**8 * 8  # ... whose position embedding alone is 3.2 GB


def test_attention_scores_are_counted():
    """gpt-nano with a long context: under 100 parameters, T^2 scores per head."""
    est = registry.estimate(parse_model("gpt-nano:l1-d2-h1-c20000-v8"))
    assert est is not None and est.params < 100 and est.saved >= 3 * 20000**2
    with pytest.raises(UsageError, match="at a training batch of 64") as e:
        limits = Budget(max_memory=1 << 30, train_batch=64, eval_batch=1)
        budget.check(parse_model("gpt-nano:l1-d2-h1-c20000-v8"), limits)
    assert "--batch-size" in str(e.value.hint)


def test_params_limit_comes_first():
    with pytest.raises(UsageError, match="more than the limit of 10"):
        budget.check(parse_model("mlp:64-16-10"), Budget(max_params=10))


def test_training_needs_more_than_evaluating():
    est = registry.estimate(parse_model("resnet18@3x32x32-10"))
    assert est is not None
    assert est.memory_bytes(train_batch=512) > est.memory_bytes() > est.params * cost.HELD_BYTES_PER_PARAM


def test_default_is_half_the_physical_memory():
    total = budget.physical_memory()
    assert total is not None and total > 0
    assert budget.default_max_memory() == int(total * budget.MEMORY_SHARE)


def test_a_factory_is_not_estimated():
    spec = parse_model("my_pkg.my_module:build_net")
    assert registry.estimate(spec) is None and budget.check(spec, Budget(max_memory=1 << 20)) is None


@pytest.mark.parametrize(
    "value,bytes_",
    [("512M", 512 << 20), ("8G", 8 << 30), ("1.5g", 3 << 29), ("8 GiB", 8 << 30), (1 << 30, 1 << 30), ("2T", 2 << 40)],
)
def test_max_memory_sizes(value, bytes_):
    assert RUN["max_memory"].check(value) == bytes_


@pytest.mark.parametrize("value", ["8X", "", "G", "-1G", "1K", 100, True, 1.5, "1e9", "9" * 50, [1]])
def test_bad_max_memory_is_one_line(value):
    with pytest.raises(UsageError, match="--max-memory"):
        RUN["max_memory"].check(value)


def test_declared_params_reads_a_ticket_spec_without_torch_modules():
    assert registry.declared_params("mlp:64-16-10") == 64 * 16 + 16 * 10
    assert registry.declared_params("conv6@1x8x8-10") == counts("conv6@1x8x8-10")[0]
    assert registry.declared_params("pkg.mod:fn") is None
    assert registry.declared_params("no such model!") is None
