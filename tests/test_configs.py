"""Every sample config parses into a valid run spec."""

from pathlib import Path

import pytest

from ticketcli.settings.resolve import build_extract_spec, merge_settings

CONFIGS = sorted((Path(__file__).parent.parent / "sample_configs").glob("*.toml"))


def test_there_are_sample_configs():
    assert CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_sample_config_builds_a_spec(path):
    spec = build_extract_spec(merge_settings({}, path))
    assert spec.method.epochs >= 1 and 0 < spec.method.sparsity < 1


def test_paper_config_is_the_paper_protocol():
    spec = build_extract_spec(merge_settings({}, CONFIGS[0].parent / "paper-augmented-90.toml"))
    m = spec.method
    assert (m.name, m.sparsity, m.epochs, m.lr, m.batch_size, m.betas, m.eps, m.weight_decay) == (
        "augmented",
        0.9,
        100,
        1e-2,
        512,
        (0.9, 0.999),
        1e-8,
        0.0,
    )
    assert spec.model.to_string() == "mlp:784-256-256-256-10" and spec.init.k == 0.5
