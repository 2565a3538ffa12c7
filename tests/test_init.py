"""Deterministic initialisation from (scheme, k, seed), the schemes' distributions, fingerprint and derive_seed."""

from __future__ import annotations

import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from ticketcli.models.build import build_model
from ticketcli.models.init import INIT_SCHEMES, init_weights
from ticketcli.models.registry import parse_model
from ticketcli.seeding import derive_seed, fingerprint, generator
from ticketcli.specs.run import MODULE_INIT, InitSpec

SCHEMES = [s for s in INIT_SCHEMES.names() if s != MODULE_INIT]  # the drawn ones (module: test_init_module.py)
SPECS = ["mlp:20-16-8", "mlp:20-16-8+bias"]


def bound(k: float, fan: int) -> float:
    return math.sqrt(2.0) / math.sqrt(k * fan)


def draw(spec: str, scheme: str = "scaled-kaiming-uniform", seed: int = 0, k: float = 0.5):
    module = build_model(parse_model(spec))
    return module, init_weights(module, InitSpec(scheme=scheme, k=k, seed=seed))


def test_registry_has_the_documented_schemes():
    assert {"scaled-kaiming-uniform", "signed-kaiming-constant", "kaiming-normal"} <= set(SCHEMES)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_same_seed_is_bit_identical(spec, scheme):
    torch.manual_seed(123)  # neither the global RNG nor the module's current values may matter
    _, a = draw(spec, scheme, seed=11)
    torch.manual_seed(456)
    torch.rand(1000)
    _, b = draw(spec, scheme, seed=11)
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == torch.float32
        assert a[name].numpy().tobytes() == b[name].numpy().tobytes(), name
    assert fingerprint(a) == fingerprint(b)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_different_seed_differs(spec, scheme):
    _, a = draw(spec, scheme, seed=0)
    _, b = draw(spec, scheme, seed=1)
    assert fingerprint(a) != fingerprint(b)
    for name in a:
        assert not torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_parameter_order_and_shapes(spec, scheme):
    module, w = draw(spec, scheme)
    params = list(module.named_parameters())
    assert list(w) == [n for n, _ in params]
    for n, p in params:
        assert w[n].shape == p.shape
    if spec.endswith("+bias"):
        assert list(w) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_one_generator_in_parameter_order(scheme):
    """Every parameter comes from one generator seeded with the seed, drawn in named_parameters() order."""
    module, w = draw("mlp:20-16-8+bias", scheme, seed=5, k=0.5)
    fn = INIT_SCHEMES.get(scheme)
    g = torch.Generator().manual_seed(5)
    fans = {"layers.0.weight": 20, "layers.0.bias": 20, "layers.1.weight": 16, "layers.1.bias": 16}
    for name, p in module.named_parameters():
        assert torch.equal(w[name], fn(p.shape, fans[name], 0.5, g).to(torch.float32)), name


def test_bias_only_variant_differs_from_bias_free_after_first_layer():
    """Adding biases shifts the generator stream: layers.0.weight is shared, later draws are not."""
    _, a = draw("mlp:20-16-8", seed=0)
    _, b = draw("mlp:20-16-8+bias", seed=0)
    assert torch.equal(a["layers.0.weight"], b["layers.0.weight"])
    assert not torch.equal(a["layers.1.weight"], b["layers.1.weight"])
    assert fingerprint(a) != fingerprint(b)


# ---------------------------------------------------------------------------------------------- distributions


@pytest.mark.parametrize("k", [0.5, 1.0, 2.0])
def test_scaled_kaiming_uniform_bounds(k):
    _, w = draw("mlp:400-500-10+bias", "scaled-kaiming-uniform", seed=3, k=k)
    for name, fan in (
        ("layers.0.weight", 400),
        ("layers.0.bias", 400),
        ("layers.1.weight", 500),
        ("layers.1.bias", 500),
    ):
        b = bound(k, fan)
        assert w[name].abs().max().item() <= b * (1 + 1e-6), name
    big = w["layers.0.weight"].double()  # 200k draws
    b = bound(k, 400)
    assert big.abs().max().item() >= b * (1 - 1e-3)
    assert big.min().item() <= -b * (1 - 1e-3) and big.max().item() >= b * (1 - 1e-3)
    assert abs(big.mean().item()) < 0.01 * b
    assert big.std().item() == pytest.approx(b / math.sqrt(3), rel=0.02)
    # roughly uniform: each tenth of [-b, b] holds about a tenth of the draws
    hist = torch.histc(big, bins=10, min=-b, max=b)
    assert ((hist / big.numel() - 0.1).abs() < 0.01).all()


@pytest.mark.parametrize("k", [0.5, 1.0])
def test_signed_kaiming_constant_two_values(k):
    _, w = draw("mlp:400-500-10+bias", "signed-kaiming-constant", seed=4, k=k)
    for name, fan in (
        ("layers.0.weight", 400),
        ("layers.0.bias", 400),
        ("layers.1.weight", 500),
        ("layers.1.bias", 500),
    ):
        c = torch.tensor(bound(k, fan), dtype=torch.float32).item()
        values = set(torch.unique(w[name]).tolist())
        assert values <= {c, -c}, name
        if w[name].numel() >= 100:
            assert values == {c, -c}, name
    big = w["layers.0.weight"]
    assert (big > 0).double().mean().item() == pytest.approx(0.5, abs=0.01)


def test_kaiming_normal_std():
    for k in (0.5, 1.0):
        _, w = draw("mlp:400-500-10", "kaiming-normal", seed=6, k=k)
        big = w["layers.0.weight"].double()
        std = bound(k, 400)
        assert big.std().item() == pytest.approx(std, rel=0.1)
        assert big.std().item() == pytest.approx(std, rel=0.01)  # 200k draws: much closer than 10%
        assert abs(big.mean().item()) < 0.01 * std
        small = w["layers.1.weight"].double()  # fan_in 500, 5000 draws
        assert small.std().item() == pytest.approx(bound(k, 500), rel=0.1)
    _, w1 = draw("mlp:400-500-10", "kaiming-normal", seed=6, k=1.0)
    # k = 1 is torch's kaiming_normal_(fan_in, relu) scale
    assert w1["layers.0.weight"].std().item() == pytest.approx(torch.nn.init.calculate_gain("relu") / 20, rel=0.01)


# ---------------------------------------------------------------------------------------------- fingerprint


def test_fingerprint_is_sha256_of_float32_bytes_in_order():
    _, w = draw("mlp:20-16-8+bias", seed=2)
    h = hashlib.sha256(b"".join(t.numpy().astype(np.float32).tobytes(order="C") for t in w.values()))
    assert fingerprint(w) == h.hexdigest()
    assert len(fingerprint(w)) == 64 and all(ch in "0123456789abcdef" for ch in fingerprint(w))


def test_fingerprint_changes_with_any_single_element():
    _, w = draw("mlp:20-16-8+bias", seed=2)
    ref = fingerprint(w)
    assert fingerprint({n: t.clone() for n, t in w.items()}) == ref
    rng = np.random.default_rng(0)
    seen = {ref}
    for name, t in w.items():
        for i in rng.choice(t.numel(), size=3, replace=False).tolist():
            changed = {n: x.clone() for n, x in w.items()}
            flat = changed[name].view(-1)
            flat[i] = torch.nextafter(flat[i], torch.tensor(math.inf))  # the smallest possible change
            fp = fingerprint(changed)
            assert fp not in seen
            seen.add(fp)
    # and with the order of the parameters
    assert fingerprint(dict(reversed(list(w.items())))) != ref


def test_fingerprint_uses_logical_row_major_order():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert fingerprint({"a": t.t()}) == fingerprint({"a": t.t().contiguous()})
    assert fingerprint({"a": t.t()}) != fingerprint({"a": t})
    assert fingerprint({"a": t.double()}) == fingerprint({"a": t})  # hashed as float32


# ---------------------------------------------------------------------------------------------- derive_seed


def test_derive_seed_distinct_and_stable():
    tags = ["split", "scores", "batches", "random-mask", "", "split "]
    seeds = {(s, t): derive_seed(s, t) for s in range(4) for t in tags}
    assert len(set(seeds.values())) == len(seeds)  # different tags and different seeds: different streams
    for (s, t), v in seeds.items():
        assert derive_seed(s, t) == v
        assert isinstance(v, int) and 0 <= v < 2**63
        assert v != s
    g1, g2 = generator(3, "split"), torch.Generator().manual_seed(derive_seed(3, "split"))
    assert torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2))
    assert not torch.equal(
        torch.rand(5, generator=generator(3, "split")), torch.rand(5, generator=generator(3, "scores"))
    )


@pytest.mark.slow
def test_derive_seed_same_in_another_process():
    """No dependence on Python's per-process string hashing: tickets store only the seed."""
    code = (
        "from ticketcli.seeding import derive_seed;"
        "print([derive_seed(s, t) for s in (0, 1, 12345) for t in ('split', 'scores', 'batches')])"
    )
    here = [derive_seed(s, t) for s in (0, 1, 12345) for t in ("split", "scores", "batches")]
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(here)
