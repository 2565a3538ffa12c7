"""train-weak: masked entries never train, kept ones do, initial = evaluate, the output file reproduces the result."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from helpers import QUICK, invoke, one_line_error
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ticketcli.errors import RunFailed
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.seeding import file_sha256
from ticketcli.settings.resolve import data_location
from ticketcli.specs.run import DataSpec, InitSpec, ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import evaluate
from ticketcli.weak.run import WeakSpec, check_sparsity, train_run, train_weak

MODEL = QUICK[QUICK.index("--model") + 1]
TRAIN = ["--epochs", "3", "--batch-size", "128", "--quiet"]
DATA = DataSpec(**data_location(None, False))
SPEC = WeakSpec(epochs=3, batch_size=128)


@pytest.fixture(scope="module")
def ticket(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("weak") / "t.safetensors"
    r = invoke("extract", *QUICK, "--out", str(out))
    assert r.exit_code == 0, r.output
    return out


@pytest.mark.slow
def test_masked_weights_never_train_and_kept_ones_do(ticket):
    o = runs_build.open_ticket(ticket, ReaderSpec(data=DATA, device="cpu"))
    run, trainer = train_run(o, o.masks, SPEC, label="masked")
    for n, w in trainer.weights().items():
        m = o.masks[n]
        assert torch.all(w[~m] == 0)
        state = trainer.opt.state[trainer.params[n]]
        # Adam's moments are exactly zero only where no gradient ever arrived: masked entries never got one
        assert torch.all(state["exp_avg"][~m] == 0) and torch.all(state["exp_avg_sq"][~m] == 0)
        moved, got_grad = w[m] != o.weights[n][m], state["exp_avg_sq"][m] > 0
        # kept weights moved, except those with no gradient at all (always-zero digits pixels, dead units)
        assert not (moved & ~got_grad).any() and moved[got_grad].float().mean() > 0.99
        assert moved.float().mean() > 0.5
    assert torch.equal(o.net.weights["layers.0.weight"], o.weights["layers.0.weight"])  # rewound on return
    assert [p.epoch for p in run.curve] == [1, 2, 3]
    assert run.best_val_accuracy == max(p.val_accuracy for p in run.curve)


def test_check_sparsity_catches_a_nonzero_masked_weight(ticket):
    masks = ticket_io.load(ticket).masks
    w = {n: torch.where(m, 1.0, 0.0) for n, m in masks.items()}
    assert check_sparsity(w, masks).nonzero_after == sum(int(m.sum()) for m in masks.values())
    name = next(iter(masks))
    w[name].view(-1)[int((~masks[name]).view(-1).nonzero()[0])] = 1e-30
    with pytest.raises(RunFailed):
        check_sparsity(w, masks)


def test_initial_accuracy_equals_evaluate(ticket):
    ev = json.loads(invoke("evaluate", str(ticket), "--json").stdout)
    r = invoke("train-weak", str(ticket), *TRAIN, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["masked"]["initial"]["metrics"] == ev["metrics"]
    assert doc["epochs"] == 3 and doc["optimizer"]["name"] == "adam" and doc["optimizer"]["lr"] == 1e-3
    assert doc["sparsity"]["achieved"] == pytest.approx(ev["sparsity"]["achieved"])
    assert doc["weights_check"]["masked_nonzero_after"] == 0 and doc["weights_check"]["unchanged"] is True
    initial = doc["masked"]["initial"]["metrics"]["test"]["accuracy"]
    assert doc["metrics"]["test"]["accuracy"] - initial == pytest.approx(doc["masked"]["gain"])
    assert doc["metrics"] == doc["masked"]["metrics"] and doc["layers"] == ev["layers"]
    assert "dense" not in doc and "out" not in doc


def test_output_file_loads_into_the_model_and_reproduces_final_accuracy(ticket, tmp_path):
    out = tmp_path / "trained.safetensors"
    r = invoke("train-weak", str(ticket), *TRAIN, "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    state = load_file(str(out))  # plain safetensors, no ticketcli reader
    module = build_model(parse_model(MODEL))
    module.load_state_dict(state)  # strict: exactly the model's keys and shapes
    masks = ticket_io.load(ticket).masks
    for n, w in state.items():
        assert torch.all(w[~masks[n]] == 0) and not torch.signbit(w[~masks[n]]).any()  # +0.0, not -0.0
    o = runs_build.open_ticket(ticket, ReaderSpec(data=DATA, device="cpu"))
    test = evaluate(MaskedNet(module), None, o.splits.x_test, o.splits.y_test)
    assert test == doc["metrics"]["test"]
    with safe_open(str(out), "pt") as f:
        meta = f.metadata()
    assert meta["ticket_sha256"] == file_sha256(str(ticket)) == doc["ticket_sha256"]
    assert meta["epochs"] == "3" and json.loads(meta["optimizer"])["name"] == "adam"
    assert meta["weights_sha256"] == ticket_io.load(ticket).weights_sha256


def test_dense_baseline_starts_from_the_same_init(ticket):
    result = train_weak(ticket, ReaderSpec(data=DATA, device="cpu"), spec=SPEC, dense_baseline=True)
    net = MaskedNet(build_model(parse_model(MODEL)))
    net.load_weights(init_weights(net.module, InitSpec(seed=0)))
    o = runs_build.open_ticket(ticket, ReaderSpec(data=DATA, device="cpu"))
    assert result.dense is not None
    assert result.dense.initial.test.to_dict() == evaluate(net, None, o.splits.x_test, o.splits.y_test)
    assert result.dense.initial != result.masked.initial


def test_all_ones_mask_trains_exactly_like_the_dense_baseline(ticket, tmp_path):
    # W * 1 == W bit for bit, so with the same init, batch order and optimiser the two runs must coincide
    tk = ticket_io.load(ticket)
    full = tmp_path / "full.safetensors"
    ticket_io.save(dataclasses.replace(tk, masks={n: torch.ones_like(m) for n, m in tk.masks.items()}), full)
    result = train_weak(full, ReaderSpec(data=DATA, device="cpu"), spec=SPEC, dense_baseline=True)
    assert result.dense is not None
    assert result.masked.curve == result.dense.curve
    assert result.masked.final == result.dense.final
    assert result.sparsity.achieved == 0.0 and result["sparsity"]["achieved"] == 0.0


@pytest.mark.slow
def test_plot_is_a_valid_png(ticket, tmp_path):
    png = tmp_path / "curves.png"
    r = invoke("train-weak", str(ticket), *TRAIN, "--dense-baseline", "--plot", str(png), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert img.std() > 0  # something was drawn


@pytest.mark.slow
def test_table_for_people(ticket):
    r = invoke("train-weak", str(ticket), *TRAIN, "--dense-baseline")
    assert r.exit_code == 0, r.output
    assert "final test accuracy" in r.stdout and "dense" in r.stdout and "masked" in r.stdout


@pytest.mark.slow
def test_existing_outputs_need_force(ticket, tmp_path):
    out, png = tmp_path / "w.safetensors", tmp_path / "c.png"
    out.write_bytes(b"precious")
    assert "--force" in one_line_error(invoke("train-weak", str(ticket), *TRAIN, "--out", str(out)))
    assert out.read_bytes() == b"precious"
    png.write_bytes(b"old")
    assert "--force" in one_line_error(invoke("train-weak", str(ticket), *TRAIN, "--plot", str(png)))
    r = invoke("train-weak", str(ticket), *TRAIN, "--out", str(out), "--plot", str(png), "--force")
    assert r.exit_code == 0, r.output
    assert set(load_file(str(out))) == set(ticket_io.load(ticket).masks)
    deeper = tmp_path / "new" / "folder" / "w.safetensors"  # --out makes its folders, as extract's does
    assert invoke("train-weak", str(ticket), *TRAIN, "--out", str(deeper)).exit_code == 0 and deeper.is_file()


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--epochs", "0"], "--epochs"),
        (["--batch-size", "0"], "--batch-size"),
        (["--lr", "-1"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--weights", "x.safetensors"], "takes no --weights"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "tpu"], "device"),
        (["--out", "/dev/null/dir/w.safetensors"], "does not exist"),  # a file on the way: no folder made
    ],
)
def test_bad_values_are_one_line_errors(ticket, args, needle):
    assert needle in one_line_error(invoke("train-weak", str(ticket), *TRAIN, *args))


@pytest.mark.parametrize("content", [b"", b"garbage"])
def test_bad_ticket_is_exit_2(tmp_path, content):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(content)
    one_line_error(invoke("train-weak", str(bad), *TRAIN))
    one_line_error(invoke("train-weak", str(tmp_path / "none.safetensors"), *TRAIN))


@pytest.mark.slow
def test_checkpoint_ticket_needs_its_weights(tmp_path):
    module = build_model(parse_model(MODEL))
    ckpt = tmp_path / "init.safetensors"
    save_file({n: t * 1.5 for n, t in init_weights(module, InitSpec(seed=7)).items()}, str(ckpt))
    out = tmp_path / "t.safetensors"
    assert invoke("extract", *QUICK, "--weights", str(ckpt), "--out", str(out)).exit_code == 0
    moved = tmp_path / "moved.safetensors"
    ckpt.rename(moved)
    assert "--weights" in one_line_error(invoke("train-weak", str(out), *TRAIN))
    r = invoke("train-weak", str(out), *TRAIN, "--weights", str(moved), "--json")
    assert r.exit_code == 0, r.output
    ev = json.loads(invoke("evaluate", str(out), "--weights", str(moved), "--json").stdout)
    assert json.loads(r.stdout)["masked"]["initial"]["metrics"]["test"] == ev["metrics"]["test"]
