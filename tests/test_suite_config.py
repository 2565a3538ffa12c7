"""The suite's own configuration (pyproject.toml's [tool.pytest.ini_options]; CONTRIBUTING.md, "Tests"): a test
that hangs fails alone at the per-test timeout and the run goes on, both as CI runs the suite (pytest-xdist's
workers) and in the one-process debug run (-n0); a test marked with a longer timeout gets it (each case runs pytest
on a tiny test file in a child process, under the project's own pytest configuration with a 1-second timeout); a
misspelt marker is an error, not a test that `-m "not slow"` silently selects."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TESTS = """
import time

import pytest


def test_before():
    pass


def test_hangs():
    time.sleep(3600)


@pytest.mark.timeout(60)
def test_marked_longer():
    time.sleep(1.5)  # past the 1-second default, within its own limit


def test_after():
    pass
"""


def project_pytest_config() -> str:
    """pyproject.toml's [tool.pytest.ini_options] table, as written."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r"^\[tool\.pytest\.ini_options\]\n.*?(?=^\[)", text, re.S | re.M)
    assert found, "pyproject.toml has no [tool.pytest.ini_options]"
    return found.group(0)


def pytest_child(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest in `folder` under the project's configuration, without what this run's environment would add."""
    (folder / "pyproject.toml").write_text(project_pytest_config())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "timeout=1", *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", [[], ["-n0"]], ids=["as-configured", "one-process"])
@pytest.mark.slow
def test_a_hanging_test_fails_alone_at_the_timeout(workers, tmp_path):
    (tmp_path / "test_tiny.py").write_text(TESTS)
    p = pytest_child(tmp_path, *workers, "--junitxml", "out.xml", "test_tiny.py")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot().iter("testcase")}
    assert sorted(cases) == ["test_after", "test_before", "test_hangs", "test_marked_longer"]
    failed = {name for name, c in cases.items() if c.find("failure") is not None or c.find("error") is not None}
    assert failed == {"test_hangs"}, p.stdout[-3000:]
    assert "Timeout" in cases["test_hangs"].find("failure").get("message", ""), p.stdout[-3000:]
    assert float(cases["test_hangs"].get("time")) < 30  # the timeout ended it, not the child's limit
    if not workers:  # as configured: pytest-xdist's workers ran it
        assert re.search(r"created: \d+/\d+ workers", p.stdout), p.stdout[-3000:]


def test_a_misspelt_marker_is_an_error():
    """Under this run's configuration, as in a test module's decorator."""
    assert pytest.mark.slow.name == "slow"
    with pytest.raises(pytest.fail.Exception, match="'slwo' not found in `markers` configuration option"):
        pytest.mark.slwo  # noqa: B018 - the attribute lookup is what fails
