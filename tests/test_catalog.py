"""The catalog (what the command line knows before importing torch) is exactly what the registries hold: every
registered method, model, dataset and init scheme has its one line there, and nothing else does; drift's
registries' names and the help defaults it mirrors equal their home modules' values."""

from __future__ import annotations

import pytest
import torch

from ticketcli.data.datasets import DATASETS
from ticketcli.drift import activations as drift_activations
from ticketcli.methods import METHODS
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.registry import MODELS
from ticketcli.specs import catalog
from ticketcli.specs import drift as drift_spec
from ticketcli.sweep import plan as sweep_plan
from ticketcli.sweep import summary as sweep_summary

REGISTRIES = {"methods": METHODS, "models": MODELS, "datasets": DATASETS, "inits": INIT_SCHEMES}


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_the_catalog_lists_exactly_the_registered_names(kind):
    registered, listed = set(REGISTRIES[kind].names()), set(catalog.describe(kind))
    missing, stale = sorted(registered - listed), sorted(listed - registered)
    assert not missing, f"registered {kind} without a line in ticketcli/specs/catalog.py: {missing}"
    assert not stale, f"ticketcli/specs/catalog.py lists {kind} that are not registered: {stale}"


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_every_description_is_one_short_sentence(kind):
    for name, text in catalog.describe(kind).items():
        assert text and "\n" not in text and len(text) <= 120, (name, text)
        assert text.endswith(".") and (text[0].isupper() or text[0] in "+-"), (name, text)


def test_describe_is_sorted_by_name():
    for kind in catalog.KINDS:
        names = list(catalog.describe(kind))
        assert names == sorted(names) == REGISTRIES[kind].names()


def test_dataset_split_sizes_are_the_registry_defaults():
    for name, entry in catalog.DATASETS.items():
        info = DATASETS.get(name)
        assert (entry.n_extract, entry.n_val) == (info.n_extract, info.n_val), name


def test_drift_choices_are_drift_registries():
    assert catalog.DRIFT_ACTIVATIONS == tuple(drift_activations.ACTIVATIONS.names())
    assert catalog.DRIFT_LOSSES == tuple(drift_activations.LOSSES.names())


def test_exact_zero_activations_are_the_ones_that_give_exact_zeros():
    """drift.spec.EXACT_ZEROS (torch-free: the zero rule, ReLUfication's targets) is what the functions do: exactly 0
    for every negative pre-activation, and never exactly 0 there for the smooth ones."""
    h = -torch.linspace(0.01, 3.0, 200)
    exact = {n for n in drift_activations.ACTIVATIONS.names() if bool((ACT(n)(h, 50.0) == 0).all())}
    smooth = {n for n in drift_activations.ACTIVATIONS.names() if bool((ACT(n)(h, 50.0) != 0).all())}
    assert exact == set(drift_spec.EXACT_ZEROS) and smooth == set(catalog.DRIFT_ACTIVATIONS) - exact
    assert all(drift_activations.ACTIVATIONS.get(n).exact_zeros == (n in exact) for n in catalog.DRIFT_ACTIVATIONS)
    assert set(drift_spec.RELUFY_TARGETS) <= exact


def ACT(name: str):
    return drift_activations.ACTIVATIONS.get(name).fn


def test_mirrored_help_defaults_equal_their_home_values():
    assert catalog.SWEEP_LAYERWISE == sweep_plan.PAPER_LAYERWISE
    assert catalog.SWEEP_DENSITIES == sweep_plan.PAPER_DENSITIES
    assert catalog.SWEEP_BAND == sweep_summary.PAPER_BAND
