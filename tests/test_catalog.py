"""The catalog (what the command line knows before importing torch) is exactly what the registries hold: every
registered method, model, dataset and init scheme has its one line there, and nothing else does; drift's choices
and the help defaults it mirrors equal their home modules' values."""

from __future__ import annotations

import pytest

from ticketcli import catalog, sweep, weak
from ticketcli.data import DATASETS
from ticketcli.drift import activations as drift_activations
from ticketcli.drift import control as drift_control
from ticketcli.drift import relufy
from ticketcli.drift import spec as drift_spec
from ticketcli.drift.options import Features
from ticketcli.init import INIT_SCHEMES
from ticketcli.methods import METHODS
from ticketcli.models import MODELS

REGISTRIES = {"methods": METHODS, "models": MODELS, "datasets": DATASETS, "inits": INIT_SCHEMES}


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_the_catalog_lists_exactly_the_registered_names(kind):
    registered, listed = set(REGISTRIES[kind].names()), set(catalog.describe(kind))
    missing, stale = sorted(registered - listed), sorted(listed - registered)
    assert not missing, f"registered {kind} without a line in ticketcli/catalog.py: {missing}"
    assert not stale, f"ticketcli/catalog.py lists {kind} that are not registered: {stale}"


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
    assert catalog.DRIFT_INPUTS == drift_spec.INPUTS
    assert catalog.ACT_CONTROL_MODES == drift_control.MODES
    assert catalog.RELUFY_TARGETS == relufy.TARGETS


def test_mirrored_help_defaults_equal_their_home_values():
    spec = weak.WeakSpec()
    assert catalog.ACT_TARGET_DEFAULT == drift_control.DEFAULT_TARGET
    assert catalog.RELUFY_EPOCHS_DEFAULT == relufy.RelufySpec.epochs
    assert catalog.TRADEOFF_WORKERS_DEFAULT == Features.workers
    assert (catalog.WEAK_EPOCHS, catalog.WEAK_BATCH_SIZE, catalog.WEAK_LR) == (
        spec.epochs,
        spec.batch_size,
        spec.optim.lr,
    )
    assert catalog.SWEEP_LAYERWISE == sweep.PAPER_LAYERWISE
    assert catalog.SWEEP_DENSITIES == sweep.PAPER_DENSITIES
