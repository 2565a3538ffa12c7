"""examples/notebook.py, the Python API's walk-through, runs as a user would run it and says what it promises:
the ticket re-evaluates exactly, the masks on a user's module give build()'s logits, fine-tuning keeps them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_notebook_example_runs_and_keeps_its_promises(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, str(REPO / "examples" / "notebook.py"), "--epochs", "2"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "reproduced: True" in out
    assert "same logits as build(): True" in out
    assert "masked weights still zero: True" in out
    extracted = float(re.search(r"test accuracy at extraction: ([\d.]+)", out).group(1))
    assert re.search(rf"re-evaluated: test {extracted:.4f}", out)
    masked = float(re.search(r"my module with the masks: accuracy on the extraction split ([\d.]+)", out).group(1))
    tuned = float(re.search(r"training accuracy ([\d.]+)", out).group(1))
    assert tuned > masked  # fine-tuning the kept weights helps on the data it trained on
