"""The command line through Typer's CliRunner: exit codes, one JSON document on stdout, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import QUICK, flags_for, invoke, one_line_error
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.registry import parse_model
from ticketcli.specs.run import InitSpec
from ticketcli.ticketfile import ticket as ticket_io

runner = CliRunner()


def extract(out: Path, *extra: str):
    """`ticket extract` with QUICK, less --epochs and --batch-size for a method in `extra` that reads neither."""
    method = extra[extra.index("--method") + 1] if "--method" in extra else "augmented"
    return invoke("extract", *flags_for(method, QUICK), "--out", str(out), *extra)


@pytest.mark.parametrize("method", ["augmented", "edge-popup", "random"])
def test_extract_evaluate_inspect_json(tmp_path, method):
    out = tmp_path / "t.safetensors"
    r = extract(out, "--method", method, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["method"]["name"] == method and out.is_file()
    assert summary["sparsity"]["requested"] == 0.9
    assert [la["name"] for la in summary["layers"]] == ["layers.0.weight", "layers.1.weight", "layers.2.weight"]
    assert ("aux_share" in summary["sparsity"]) == (method == "augmented")

    r = invoke("evaluate", str(out), "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(r.stdout)
    assert ev["reproduced"] is True
    assert ev["metrics"]["test"]["correct"] == summary["metrics"]["test"]["correct"]

    r = invoke("inspect", str(out), "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.stdout)
    assert info["method"]["name"] == method and info["file_bytes"] == out.stat().st_size
    assert info["sparsity"]["density"] == pytest.approx(1 - summary["sparsity"]["achieved"])


def test_tables_for_people(tmp_path):
    out = tmp_path / "t.safetensors"
    r = extract(out)
    assert r.exit_code == 0 and "achieved sparsity" in r.stdout and "auxiliary" in r.stdout
    r = invoke("evaluate", str(out))
    assert r.exit_code == 0 and "reproduces the stored accuracy exactly" in r.stdout
    r = invoke("inspect", str(out))
    assert r.exit_code == 0 and "layers.0.weight" in r.stdout


def test_min_accuracy_gate(tmp_path):
    out = tmp_path / "t.safetensors"
    assert extract(out).exit_code == 0
    ok = invoke("evaluate", str(out), "--min-accuracy", "0.05", "--json")
    assert ok.exit_code == 0 and json.loads(ok.stdout)["gate"]["passed"] is True
    bad = invoke("evaluate", str(out), "--min-accuracy", "0.999", "--json")
    assert bad.exit_code == 1
    doc = json.loads(bad.stdout)  # the result is still printed, as one document
    assert doc["gate"] == {"min_accuracy": 0.999, "passed": False}
    assert "below --min-accuracy" in bad.stderr


def test_same_command_twice_gives_identical_mask_bits(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    assert extract(a, "--method", "edge-popup").exit_code == 0
    assert extract(b, "--method", "edge-popup").exit_code == 0
    ta, tb = load_file(str(a)), load_file(str(b))
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)


def test_config_file_and_flag_precedence(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "edge-popup"\nsparsity = 0.5\nepochs = 1\n')
    out = tmp_path / "t.safetensors"
    r = extract(out, "--config", str(cfg), "--sparsity", "0.75", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["method"]["name"] == "edge-popup"  # from the file
    assert s["sparsity"]["requested"] == 0.75  # the flag wins over the file
    assert ticket_io.load(out).method.option("epochs") == 2  # QUICK's --epochs 2 overrides the file's 1

    bad = tmp_path / "bad.toml"
    bad.write_text("sparsty = 0.5\n")
    one_line_error(extract(tmp_path / "u.safetensors", "--config", str(bad)))


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--sparsity", "1.5"], "--sparsity"),
        (["--sparsity", "0"], "--sparsity"),
        (["--layer-densities", "0.1,abc"], "--layer-densities"),
        (["--method", "edge-popup", "--layer-densities", "0.1,0.2"], "layers"),
        (["--epochs", "-1"], "--epochs"),
        (["--model", "mlp:784-10"], "784 inputs"),
        (["--model", "transformer"], "unknown model 'transformer'; choose one of"),
        (["--model", "mlp:abc"], "invalid model spec"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "device"),
        (["--betas", "0.9"], "--betas"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path, args, needle):
    out = tmp_path / "t.safetensors"
    err = one_line_error(extract(out, *args))
    assert needle in err
    assert not out.exists()


def test_unknown_method_lists_choices(tmp_path):
    r = extract(tmp_path / "t.safetensors", "--method", "magic")
    assert r.exit_code == 2 and "augmented" in r.output and "Traceback" not in r.output


def test_existing_output_needs_force(tmp_path):
    out = tmp_path / "t.safetensors"
    out.write_bytes(b"precious")
    err = one_line_error(extract(out))
    assert "--force" in err and out.read_bytes() == b"precious"
    assert extract(out, "--force").exit_code == 0
    assert ticket_io.load(out).method.name == "augmented"


def test_missing_output_directory_is_made(tmp_path):
    """--out makes its folders (as --out-dir does); a refused run makes none (its refusals come first)."""
    one_line_error(extract(tmp_path / "refused" / "t.safetensors", "--sparsity", "2"))
    assert not (tmp_path / "refused").exists()
    assert extract(tmp_path / "a" / "b" / "t.safetensors").exit_code == 0
    assert (tmp_path / "a" / "b" / "t.safetensors").is_file()


@pytest.mark.parametrize("content", [b"", b"garbage", b"\xff" * 100])
def test_corrupt_ticket_is_exit_2(tmp_path, content):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(content)
    for cmd in ("evaluate", "inspect"):
        one_line_error(invoke(cmd, str(bad)))


def test_missing_ticket_and_directory(tmp_path):
    one_line_error(invoke("evaluate", str(tmp_path / "none.safetensors")))
    one_line_error(invoke("inspect", str(tmp_path)))


def rewrite_metadata(path: Path, **changes: str) -> None:
    tensors = load_file(str(path))
    meta = ticket_io.load(path).metadata()
    meta.update(changes)
    save_file(tensors, str(path), metadata=meta)


def test_fingerprint_mismatch_is_detected(tmp_path):
    out = tmp_path / "t.safetensors"
    assert extract(out).exit_code == 0
    rewrite_metadata(out, weights_sha256="0" * 64)
    assert "fingerprint mismatch" in one_line_error(invoke("evaluate", str(out)))


def test_edited_seed_is_detected(tmp_path):
    out = tmp_path / "t.safetensors"
    assert extract(out).exit_code == 0
    init = ticket_io.load(out).init.to_json()
    rewrite_metadata(out, init=json.dumps({**init, "seed": init["seed"] + 1}))
    assert "fingerprint mismatch" in one_line_error(invoke("evaluate", str(out)))


def test_shape_mismatch_is_detected(tmp_path):
    out = tmp_path / "t.safetensors"
    assert extract(out).exit_code == 0
    model = ticket_io.load(out).model.to_json()
    rewrite_metadata(out, model=json.dumps({**model, "spec": "mlp:64-32-33-10"}))
    assert "shapes do not match" in one_line_error(invoke("evaluate", str(out)))


def test_weights_from_checkpoint(tmp_path):
    spec = parse_model("mlp:64-32-32-10")
    module = build_model(spec)
    w = {n: t * 1.5 for n, t in init_weights(module, InitSpec(seed=7)).items()}  # not reproducible from a seed
    ckpt = tmp_path / "init.safetensors"
    save_file(w, str(ckpt))
    out = tmp_path / "t.safetensors"
    r = extract(out, "--weights", str(ckpt), "--json")
    assert r.exit_code == 0, r.output
    tk = ticket_io.load(out)
    assert tk.checkpoint.path == ckpt.name and len(tk.checkpoint.sha256) == 64  # relative to the ticket
    info = json.loads(invoke("inspect", str(out), "--json").stdout)
    # extract says what it wrote
    assert json.loads(r.stdout)["checkpoint"] == info["checkpoint"] == tk.checkpoint.to_json()

    r = invoke("evaluate", str(out), "--weights", str(ckpt), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["reproduced"] is True

    other = tmp_path / "other.safetensors"
    save_file({n: t * 2 for n, t in w.items()}, str(other))
    assert "sha256" in one_line_error(invoke("evaluate", str(out), "--weights", str(other)))

    wrong = tmp_path / "wrong.safetensors"
    save_file({"layers.0.weight": torch.zeros(3, 3)}, str(wrong))
    err = one_line_error(extract(tmp_path / "u.safetensors", "--weights", str(wrong)))
    assert "missing" in err and "wrong shape" in err


def test_pytorch_state_dict_checkpoint(tmp_path):
    module = build_model(parse_model("mlp:64-32-32-10"))
    ckpt = tmp_path / "init.pt"
    torch.save(init_weights(module, InitSpec(seed=3)), ckpt)
    assert extract(tmp_path / "t.safetensors", "--weights", str(ckpt)).exit_code == 0
    ckpt.write_bytes(b"not a pickle")
    one_line_error(extract(tmp_path / "u.safetensors", "--weights", str(ckpt)))


def test_missing_dataset_says_how_to_get_it(tmp_path, isolated_env, monkeypatch):
    monkeypatch.setattr("ticketcli.data.places.SYSTEM_DIRS", ())
    r = invoke("extract", "--epochs", "1", "--out", str(tmp_path / "t.safetensors"), "--data-dir", str(tmp_path))
    err = one_line_error(r)
    assert "FashionMNIST not found" in err and "apt-get install dataset-fashion-mnist" in err and "--download" in err


def test_version_and_help():
    assert invoke("--version").stdout.startswith("ticketcli ")
    r = invoke("extract", "--help")
    assert r.exit_code == 0
    for opt in ("--method", "--sparsity", "--layer-densities", "--aug-density", "--weights", "--config", "--json"):
        assert opt in r.stdout
