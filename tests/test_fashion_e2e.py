"""End to end on real FashionMNIST (the paper's data): extract -> evaluate in a fresh process.

Skipped when FashionMNIST is not installed, except under TICKET_REQUIRE_FASHION=1 (CI), where that fails.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import require_fashion
from typer.testing import CliRunner

from ticketcli.cli.app import app


@pytest.mark.slow
def test_extract_then_evaluate_on_fashion_mnist(tmp_path):
    require_fashion()
    out = tmp_path / "ticket.safetensors"
    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            "augmented",
            "--sparsity",
            "0.9",
            "--seed",
            "0",
            "--epochs",
            "3",
            "--out",
            str(out),
            "--json",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["data"]["dataset"] == "fashion-mnist"
    assert (s["data"]["n_extract"], s["data"]["n_val"], s["data"]["n_test"]) == (5000, 5000, 10000)
    assert s["metrics"]["test"]["accuracy"] > 0.6  # chance is 0.1; three epochs already find a strong ticket
    assert 0.8 <= s["sparsity"]["achieved"] <= 0.9  # floor(0.1 * 2n) kept in the augmented space
    n = s["sparsity"]["total"]
    assert out.stat().st_size <= (n + 7) // 8 + 16 * 1024

    # a fresh process in another working directory rebuilds the same network and the same accuracy
    other = tmp_path / "elsewhere"
    other.mkdir()
    p = subprocess.run(
        [sys.executable, "-m", "ticketcli", "evaluate", str(out), "--min-accuracy", "0.6", "--json"],
        cwd=other,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    ev = json.loads(p.stdout)
    assert ev["reproduced"] is True
    assert ev["metrics"]["test"]["correct"] == s["metrics"]["test"]["correct"]
