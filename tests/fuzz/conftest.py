"""Fixtures of the hostile-input suite. Helpers are imported from harness.py and hostile.py, never from a conftest
(two conftest modules would shadow each other for `from conftest import ...`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import write_seed_ticket


@pytest.fixture(scope="module")
def ticket(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A valid ticket from the real writer (tiny mlp, padding bits in three masks), fresh for each test module."""
    path = tmp_path_factory.mktemp("seed") / "t.safetensors"
    write_seed_ticket(path)
    return path
