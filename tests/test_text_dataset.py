"""`--dataset text`: next-character prediction for gpt-nano on a text the test writes. A ticket's --json has bits
per character, `evaluate` reproduces them exactly, another text is refused in one line, and the splits are whole
blocks (the test set fixed, extraction and validation drawn by the seed) that never share a character position."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TEXT_MODEL, write_text
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.datasets import load_splits
from ticketcli.specs.run import DataSpec

runner = CliRunner()
MODEL = TEXT_MODEL
SLOW = pytest.mark.slow  # each method once more: the fast set keeps a score method and the random baseline


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
        (["--dataset", "digits", "--model", MODEL], "character ids, not digits images"),
        (["--dataset", "text", "--model", "mlp:64-16-10"], "character-level model"),
        (["--dataset", "digits", "--text", "x.txt"], "--dataset text"),
    ],
)
def test_mismatches_are_one_line(args, words, tmp_path) -> None:
    r = runner.invoke(app, ["extract", *args, "--out", str(tmp_path / "t.safetensors")])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize(
    "method, flags",
    [
        ("edge-popup", ["--epochs", "1"]),
        pytest.param("iterated", ["--epochs", "2"], marks=SLOW),
        ("random", []),
        pytest.param("snip", [], marks=SLOW),
        pytest.param("grasp", [], marks=SLOW),
        pytest.param("imp", ["--epochs", "2", "--imp-rounds", "2"], marks=SLOW),
        pytest.param("set", ["--epochs", "1"], marks=SLOW),
        pytest.param("rigl", ["--epochs", "1"], marks=SLOW),
        pytest.param("movement", ["--epochs", "1"], marks=SLOW),
    ],
)
def test_every_method_that_reads_text_makes_a_ticket(made, method, flags, tmp_path) -> None:
    """Each method's ticket masks every parameter of the GPT (embedding, attention, MLP, head) near the sparsity,
    and its bits per character are a loss over the text's characters: below a uniform guess's log2(vocab) plus a
    margin, and above zero."""
    text, _, _ = made
    out = tmp_path / "t.safetensors"
    doc = run(
        "extract", "--model", MODEL, "--dataset", "text", "--text", str(text), "--method", method, *flags,
        "--sparsity", "0.7", "--device", "cpu", "--quiet", "--out", str(out), "--json",
    )  # fmt: skip
    names = [layer["name"] for layer in doc["layers"]]
    assert names[0] == "tok_embed.weight" and names[-1] == "head.weight"
    assert {"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight", "blocks.0.mlp.fc1.weight"} <= set(names)
    assert 0.6 < doc["sparsity"]["achieved"] < 0.8
    vocab = int(doc["model"].rsplit("-v", 1)[1])
    assert 0 < doc["metrics"]["test"]["bits_per_char"] < math.log2(vocab) + 4


def test_synflow_is_refused_in_one_line(made, tmp_path) -> None:
    text, _, _ = made
    args = ["--model", MODEL, "--dataset", "text", "--text", str(text), "--method", "synflow"]
    r = runner.invoke(app, ["extract", *args, "--out", str(tmp_path / "t.safetensors")])
    assert r.exit_code == 2 and "synflow" in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_bench_reads_the_text_through_text(made) -> None:
    """bench opens the ticket as evaluate does: --text finds its text (tests/test_bench_text.py benches it)."""
    text, ticket, _ = made
    args = ["bench", str(ticket), "--text", str(text), "--batch", "1", "--repeats", "3", "--forms", "sparse"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tickets"][0]["sequence_length"] == 16
    other = text.parent / "other.txt"
    other.write_text(text.read_text(encoding="utf-8")[::-1], encoding="utf-8")
    r = runner.invoke(app, ["bench", str(ticket), "--text", str(other), "--batch", "1", "--repeats", "3"])
    assert r.exit_code == 2 and "is not the text" in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_inspect_command_reproduces_the_ticket(made, tmp_path, monkeypatch) -> None:
    text, ticket, doc = made
    line = runner.invoke(app, ["inspect", str(ticket), "--command"]).stdout.strip()
    args = line.split()[1:]  # less "ticket"
    assert args[args.index("--text") + 1] == str(text) and "--dataset" in args
    monkeypatch.chdir(tmp_path)
    again = run(*args, "--quiet", "--json")
    assert again["masks_sha256"] == doc["masks_sha256"]
    assert again["metrics"]["test"]["bits_per_char"] == doc["metrics"]["test"]["bits_per_char"]


def test_inspect_csv_adds_bits_per_char(made) -> None:
    _, ticket, doc = made
    header, row = runner.invoke(app, ["inspect", str(ticket), "--csv"]).stdout.splitlines()[:2]
    cells = dict(zip(header.split(","), row.split(",")))
    assert float(cells["test_bits_per_char"]) == doc["metrics"]["test"]["bits_per_char"]


def test_train_weak_and_its_dense_baseline_read_the_text(made) -> None:
    _, ticket, _ = made
    doc = run("train-weak", str(ticket), "--epochs", "1", "--dense-baseline", "--device", "cpu", "--quiet", "--json")
    for part in (doc, doc["dense"]):
        assert part["metrics"]["test"]["bits_per_char"] > 0


@pytest.mark.parametrize("fmt", ["masked", "prune", "csr", "masks"])
def test_every_export_format_takes_the_ticket(made, fmt, tmp_path) -> None:
    _, ticket, _ = made
    r = runner.invoke(app, ["export", str(ticket), "--format", fmt, "--out", str(tmp_path / f"e.{fmt}"), "--quiet"])
    assert r.exit_code == 0, r.output


def test_the_api_and_a_config_file_take_text(made, tmp_path) -> None:
    import ticketcli as tc

    text, _, doc = made
    t = tc.extract(MODEL, "text", text=str(text), sparsity=0.8, epochs=1, device="cpu")
    assert t.metrics.test is not None and t.metrics.test.bits_per_char == doc["metrics"]["test"]["bits_per_char"]
    config = tmp_path / "c.toml"
    config.write_text(f'model = "{MODEL}"\ndataset = "text"\ntext = "{text}"\nsparsity = 0.8\nepochs = 1\n')
    again = run(
        "extract",
        "--config",
        str(config),
        "--device",
        "cpu",
        "--quiet",
        "--out",
        str(tmp_path / "c.safetensors"),
        "--json",
    )
    assert again["masks_sha256"] == doc["masks_sha256"]


@pytest.mark.slow  # the ONNX export and its onnxruntime check take seconds
def test_onnx_export_takes_any_sequence_length_up_to_the_context(made, tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    _, ticket, _ = made
    out = tmp_path / "t.onnx"
    r = runner.invoke(app, ["export", str(ticket), "--format", "onnx", "--out", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    session = ort.InferenceSession(str(out))
    name = session.get_inputs()[0].name
    for length in (5, 16):
        (logits,) = session.run(None, {name: torch.zeros(2, length, dtype=torch.int64).numpy()})
        assert logits.shape[:2] == (2, length)
