"""`--dataset text`: next-character prediction for gpt-nano on a text the test writes. A ticket's --json has bits
per character, `evaluate` reproduces them exactly, another text is refused in one line, and the splits are whole
blocks (the test set fixed, extraction and validation drawn by the seed) that never share a character position."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.datasets import load_splits
from ticketcli.specs.run import DataSpec

runner = CliRunner()
MODEL = "gpt-nano:l1-d16-h2-c16"
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex jumbo vats of ale. "


def write_text(path: Path, seed: int, n: int = 6000) -> Path:
    """A few thousand characters of words in a seeded order (vocabulary: the letters, the space and the dot)."""
    words = WORDS.split(" ")
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(words), (n // 5,), generator=g).tolist()
    path.write_text(" ".join(words[i] for i in idx)[:n] + "\n", encoding="utf-8")
    return path


def run(*args: str) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(text, ticket, extract's --json) of one augmented extraction on the CPU."""
    d = tmp_path_factory.mktemp("text")
    text = write_text(d / "a.txt", 0)
    out = d / "t.safetensors"
    doc = run(
        "extract", "--model", MODEL, "--dataset", "text", "--text", str(text), "--method", "augmented",
        "--sparsity", "0.8", "--epochs", "1", "--device", "cpu", "--quiet", "--out", str(out), "--json",
    )  # fmt: skip
    return text, out, doc


def test_extract_reports_language_model_metrics(made) -> None:
    text, _, doc = made
    vocab = len(set(text.read_text(encoding="utf-8")))
    assert doc["model"] == f"{MODEL}-v{vocab}"  # the text filled in -v
    for split in ("test", "val"):
        m = doc["metrics"][split]
        assert m["bits_per_char"] == pytest.approx(m["loss"] / math.log(2))
        assert m["perplexity"] == pytest.approx(math.exp(m["loss"]))
        assert m["n"] % 16 == 0  # whole blocks of the context's 16 targets
    assert doc["sparsity"]["requested"] == 0.8 and 0.7 < doc["sparsity"]["achieved"] < 0.9


def test_evaluate_reproduces_bits_per_char_exactly(made) -> None:
    _, ticket, doc = made
    again = run("evaluate", str(ticket), "--json", "--device", "cpu", "--max-bits-per-char", "100")
    for split in ("test", "val"):
        assert again["metrics"][split] == doc["metrics"][split]
    assert again["reproduced"] and again["gate"] == {"max_bits_per_char": 100.0, "passed": True}


def test_bits_gate_fails_above_the_bound(made) -> None:
    _, ticket, doc = made
    bound = doc["metrics"]["test"]["bits_per_char"] - 1e-6
    r = runner.invoke(app, ["evaluate", str(ticket), "--max-bits-per-char", str(bound), "--quiet"])
    assert r.exit_code == 1
    assert "bits per character" in r.output


def test_another_text_is_refused_in_one_line(made, tmp_path) -> None:
    _, ticket, _ = made
    other = write_text(tmp_path / "other.txt", 1)
    r = runner.invoke(app, ["evaluate", str(ticket), "--text", str(other)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and str(other) in lines[0] and "not the text" in lines[0]


def test_the_same_text_elsewhere_is_accepted(made, tmp_path) -> None:
    text, ticket, doc = made
    moved = tmp_path / "moved.txt"
    moved.write_bytes(text.read_bytes())
    again = run("evaluate", str(ticket), "--text", str(moved), "--json", "--device", "cpu")
    assert again["metrics"]["test"] == doc["metrics"]["test"]


def test_splits_are_disjoint_whole_blocks(tmp_path) -> None:
    text = write_text(tmp_path / "a.txt", 2)
    spec = DataSpec(name="text", text=str(text), context=16)
    a, b = load_splits(spec), load_splits(DataSpec(name="text", text=str(text), context=16, split_seed=1))
    assert torch.equal(a.x_test, b.x_test)  # the test blocks do not depend on the seed
    assert not torch.equal(a.x_extract, b.x_extract)  # extraction and validation do
    assert torch.equal(a.x_extract[:, 1:], a.y_extract[:, :-1])  # a target is the next character of the input
    rows = [tuple(r.tolist()) for x in (a.x_extract, a.x_val, a.x_test) for r in x]
    n = (len(text.read_text(encoding="utf-8"))) // 17
    assert len(rows) == n  # every whole block once: none shared between splits
    assert a.info["text"]["blocks"] == n


@pytest.mark.parametrize(
    "args, words",
    [
        (["--dataset", "digits", "--model", MODEL], "takes no digits images"),
        (["--dataset", "text", "--model", "mlp:64-16-10"], "character-level model"),
        (["--dataset", "digits", "--text", "x.txt"], "--dataset text"),
    ],
)
def test_mismatches_are_one_line(args, words, tmp_path) -> None:
    r = runner.invoke(app, ["extract", *args, "--out", str(tmp_path / "t.safetensors")])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
