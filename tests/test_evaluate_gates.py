"""`evaluate --max-drop D`: exit 1 exactly when the re-measured test accuracy lies more than D below the one the
ticket stored (a drop of exactly D passes), exit 2 for a D outside [0, 1] or a ticket that stores no test accuracy;
the JSON result carries the gate either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.runs.evaluate import EvaluateResult, StoredMetrics, evaluation_gate
from ticketcli.runs.header import TicketHeader
from ticketcli.runs.parts import SplitMetrics
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MethodRecord

runner = CliRunner()
QUICK = ["--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1", "--n-extract", "300", "--n-val", "100"]


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """One small ticket, extracted on the CPU; tests copy it before editing."""
    out = tmp_path_factory.mktemp("gates") / "t.safetensors"
    r = runner.invoke(app, ["extract", *QUICK, "--device", "cpu", "--quiet", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def copy_with_metrics(made: Path, dest: Path, edit) -> Path:
    """A copy of the ticket whose stored `metrics` went through `edit` (masks and the rest untouched)."""
    meta = ticket_io.load(made).metadata()
    metrics = json.loads(meta["metrics"])
    edit(metrics)
    save_file(load_file(str(made)), str(dest), metadata={**meta, "metrics": json.dumps(metrics)})
    return dest


def evaluate(path: Path, *extra: str):
    return runner.invoke(app, ["evaluate", str(path), "--device", "cpu", *extra])


def one_line(r, code: int) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    err = r.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in r.output, err
    return err


@pytest.mark.slow
def test_a_ticket_that_reproduces_passes_even_max_drop_zero(made, tmp_path):
    r = evaluate(made, "--max-drop", "0", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    stored = ticket_io.load(made).metrics.test.accuracy
    assert doc["gate"] == {"max_drop": 0.0, "stored_accuracy": stored, "drop": 0.0, "passed": True}
    r = evaluate(made, "--max-drop", "0.005")  # the table says so too
    assert r.exit_code == 0 and "passed" in r.stdout and "drop" in r.stdout


def test_raised_stored_accuracy_fails_the_gate_with_exit_1(made, tmp_path):
    measured = ticket_io.load(made).metrics.test.accuracy
    raised = copy_with_metrics(made, tmp_path / "raised.safetensors", lambda m: m["test"].update(accuracy=1.0))
    drop = 1.0 - measured
    r = evaluate(raised, "--max-drop", "0.005", "--json")
    err = one_line(r, 1)
    assert f"{measured:.4f}" in err and "1.0000" in err and f"{drop:.4f}" in err and "--max-drop 0.005" in err
    gate = json.loads(r.stdout)["gate"]  # the result is still printed, as one document
    assert gate["passed"] is False and gate["stored_accuracy"] == 1.0 and gate["drop"] == pytest.approx(drop)
    assert evaluate(raised, "--max-drop", str(drop + 0.01)).exit_code == 0
    r = evaluate(raised, "--max-drop", "0.005", "--min-accuracy", "0.01", "--json")  # both gates: one fails
    assert one_line(r, 1) and json.loads(r.stdout)["gate"]["min_accuracy"] == 0.01


def test_a_lower_stored_accuracy_is_a_gain_and_passes(made, tmp_path):
    lowered = copy_with_metrics(made, tmp_path / "low.safetensors", lambda m: m["test"].update(accuracy=0.0))
    r = evaluate(lowered, "--max-drop", "0", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gate"]["drop"] < 0


def test_ticket_without_stored_test_accuracy_is_exit_2(made, tmp_path):
    bare = copy_with_metrics(made, tmp_path / "bare.safetensors", lambda m: m.pop("test"))
    assert "stores no test accuracy" in one_line(evaluate(bare, "--max-drop", "0.01"), 2)
    assert evaluate(bare).exit_code == 0  # without the gate the ticket still evaluates


@pytest.mark.parametrize("value", ["-0.1", "1.5", "nan"])
def test_max_drop_outside_unit_interval_is_exit_2(made, value):
    assert "--max-drop must lie in [0, 1]" in one_line(evaluate(made, "--max-drop", value), 2)


def evaluated(measured: float, stored: float) -> EvaluateResult:
    """An evaluation of a ticket "t" that measured `measured` test accuracy and stores `stored`."""
    split = SplitMetrics(accuracy=measured, loss=0.0, correct=0, n=1)
    return EvaluateResult(
        header=TicketHeader("t", MethodRecord.of({"name": "augmented"}), "mlp:64-16-10", 0),
        device="cpu",
        test=split,
        val=split,
        stored=StoredMetrics(test_accuracy=stored, val_accuracy=None, device="cpu"),
        reproduced=False,
        requested_sparsity=0.5,
        achieved_sparsity=0.5,
        layers=(),
        integrity="ok",
    )


@pytest.mark.parametrize("n", [7, 300, 1797])
def test_a_drop_of_exactly_max_drop_passes_and_one_more_example_fails(n):
    """Accuracies are counts over n: a drop of exactly k/n passes --max-drop k/n despite float rounding, a drop of
    (k+1)/n fails it."""
    for correct in range(0, n + 1, max(1, n // 13)):
        for k in range(0, correct + 1, max(1, correct // 5 or 1)):
            stored, measured = correct / n, (correct - k) / n
            result = evaluated(measured, stored)
            assert evaluation_gate(result, min_accuracy=None, max_drop=k / n)[0].passed, (n, correct, k)
            if k >= 1:
                gate, failures = evaluation_gate(result, min_accuracy=None, max_drop=(k - 1) / n)
                assert not gate.passed and len(failures) == 1, (n, correct, k)
