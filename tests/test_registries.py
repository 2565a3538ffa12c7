"""The registries are their own torch-free source: each entry's one-line description is one short sentence, `ticket
list` reads them sorted, importing them imports no torch, and each lazily loaded implementation is what its entry
says (the method classes are registered under their own names, the exact-zero activations give exact zeros)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ticketcli.data.registry import DATASETS
from ticketcli.drift import spec as drift_spec
from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.methods.base import Method
from ticketcli.methods.registry import METHODS
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.registry import MODELS
from ticketcli.settings import listing
from ticketcli.settings.run import RUN

REGISTRIES = {"methods": METHODS, "models": MODELS, "datasets": DATASETS, "inits": INIT_SCHEMES}
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("kind", listing.KINDS)
def test_every_description_is_one_short_sentence(kind):
    for name, text in listing.describe(kind).items():
        assert text and "\n" not in text and len(text) <= 120, (name, text)
        assert text.endswith(".") and (text[0].isupper() or text[0] in "+-"), (name, text)


@pytest.mark.parametrize("kind", listing.KINDS)
def test_describe_lists_every_registered_name_sorted(kind):
    assert list(listing.describe(kind)) == REGISTRIES[kind].names()


def test_the_registries_import_no_torch():
    modules = "data.registry methods.registry models.registry drift.activations models.init settings.listing"
    code = "; ".join(f"import ticketcli.{m}" for m in modules.split()) + "; import sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    assert out.stdout.decode().strip() == "False", out.stderr.decode()[-2000:]


@pytest.mark.parametrize("name", METHODS.names())
def test_each_method_loads_the_class_registered_under_its_name(name):
    cls = METHODS.get(name).load()
    assert issubclass(cls, Method) and cls.name == name
    assert METHODS.get(name).read() <= set(RUN.names())  # every option it reads is one of extract's settings


def test_each_dataset_declares_default_splits_its_pool_can_give():
    for name in DATASETS.names():
        info = DATASETS.get(name)
        assert info.name == name and info.n_extract > 0 and info.n_val > 0 and min(info.shape) > 0


def test_exact_zero_activations_are_the_ones_that_give_exact_zeros():
    """drift.spec.EXACT_ZEROS (torch-free: the zero rule, ReLUfication's targets) is what the functions do: exactly 0
    for every negative pre-activation, and never exactly 0 there for the smooth ones."""
    h = -torch.linspace(0.01, 3.0, 200)
    exact = {n for n in ACTIVATIONS.names() if bool((ACTIVATIONS.get(n).fn(h, 50.0) == 0).all())}
    smooth = {n for n in ACTIVATIONS.names() if bool((ACTIVATIONS.get(n).fn(h, 50.0) != 0).all())}
    assert exact == set(drift_spec.EXACT_ZEROS) and smooth == set(ACTIVATIONS.names()) - exact
    assert all(ACTIVATIONS.get(n).exact_zeros == (n in exact) for n in ACTIVATIONS.names())
    assert set(drift_spec.RELUFY_TARGETS) <= exact


def test_the_losses_are_cross_entropy_and_mse_against_one_hot():
    logits, y = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]]), torch.tensor([0, 2])
    assert torch.allclose(LOSSES.get("cross-entropy")(logits, y), torch.nn.functional.cross_entropy(logits, y))
    one_hot = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert torch.allclose(LOSSES.get("mse")(logits, y), ((logits - one_hot) ** 2).mean())
