"""Tickets over checkpoint weights record the checkpoint relative to the ticket's own folder (plus its sha256), and
readers look there first: a ticket and its checkpoint moved together as a folder evaluate from anywhere to the same
numbers. A changed checkpoint or a missing one is one `error:` line and exit 2; older tickets (an absolute path,
or no digest) still evaluate."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.files.checkpoint import recorded_locations, ticket_relative
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.registry import parse_model
from ticketcli.seeding import file_sha256
from ticketcli.specs.run import InitSpec
from ticketcli.ticketfile import ticket as ticket_io

runner = CliRunner()
MODEL = "mlp:64-16-10"
QUICK = ["--dataset", "digits", "--model", MODEL, "--epochs", "1", "--n-extract", "300", "--n-val", "100"]
CPU = ["--device", "cpu"]


def write_checkpoint(path: Path, scale: float = 1.5) -> None:
    """Weights no seed reproduces (the init, scaled), as a safetensors state dict."""
    module = build_model(parse_model(MODEL).with_data((1, 8, 8), 10))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({n: t * scale for n, t in init_weights(module, InitSpec(seed=7)).items()}, str(path))


def make(folder: Path, ticket: str, weights: str) -> None:
    """Extract `ticket` from the checkpoint `weights`, both given relative to `folder` (the working directory)."""
    write_checkpoint(folder / weights)
    (folder / ticket).parent.mkdir(parents=True, exist_ok=True)
    r = runner.invoke(app, ["extract", *QUICK, *CPU, "--quiet", "--weights", weights, "--out", ticket])
    assert r.exit_code == 0, r.output


def evaluate(ticket: Path, *extra: str):
    return runner.invoke(app, ["evaluate", str(ticket), *CPU, "--json", *extra])


def numbers(r) -> tuple:
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return doc["metrics"]["test"], doc["metrics"]["val"], doc["reproduced"]


def one_line(r, code: int = 2) -> str:
    assert r.exit_code == code, (r.exit_code, r.output)
    err = r.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in r.output, err
    return err


@pytest.mark.parametrize(
    "ticket, weights, recorded",
    [
        ("t.safetensors", "init.safetensors", "init.safetensors"),  # side by side
        ("tickets/t.safetensors", "tickets/w/init.safetensors", "w/init.safetensors"),  # below the ticket
        ("tickets/t.safetensors", "weights/init.safetensors", "../weights/init.safetensors"),  # a sibling folder
    ],
)
def test_ticket_and_checkpoint_moved_as_a_folder_evaluate_anywhere(tmp_path, monkeypatch, ticket, weights, recorded):
    a, b, elsewhere = tmp_path / "A", tmp_path / "B", tmp_path / "elsewhere"
    for d in (a, b, elsewhere):
        d.mkdir()
    monkeypatch.chdir(a)
    make(a, ticket, weights)
    tk = ticket_io.load(a / ticket)
    assert tk.checkpoint.to_json() == {"path": recorded, "sha256": file_sha256(a / weights)}
    before = numbers(evaluate(a / ticket))
    assert before[2] is True

    shutil.move(str(a), str(b / "moved"))
    monkeypatch.chdir(elsewhere)  # neither the old folder nor the new one
    assert numbers(evaluate(b / "moved" / ticket)) == before


def test_changed_checkpoint_is_exit_2_naming_both_digests(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make(tmp_path, "t.safetensors", "init.safetensors")
    stored = ticket_io.load(tmp_path / "t.safetensors").checkpoint.sha256
    write_checkpoint(tmp_path / "init.safetensors", scale=2.0)  # same names and shapes, other values
    now = file_sha256(tmp_path / "init.safetensors")
    err = one_line(evaluate(tmp_path / "t.safetensors"))
    assert "sha256 differs" in err and now[:12] in err and stored[:12] in err


def test_missing_checkpoint_is_exit_2_with_a_hint_and_weights_still_works(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make(tmp_path, "t.safetensors", "init.safetensors")
    before = numbers(evaluate(tmp_path / "t.safetensors"))
    (tmp_path / "kept").mkdir()
    moved = tmp_path / "kept" / "init.safetensors"
    (tmp_path / "init.safetensors").rename(moved)
    err = one_line(evaluate(tmp_path / "t.safetensors"))
    assert "init.safetensors" in err and "next to it" in err and "--weights FILE" in err
    assert numbers(evaluate(tmp_path / "t.safetensors", "--weights", str(moved))) == before
    assert "no such file" in one_line(evaluate(tmp_path / "t.safetensors", "--weights", str(tmp_path / "none.pt")))


@pytest.mark.parametrize("digest", [True, False])
def test_older_ticket_with_an_absolute_path_still_evaluates(tmp_path, monkeypatch, digest):
    """Tickets written before paths were relative hold the absolute path; a hand-made one may lack the digest, and
    then the weights fingerprint still refuses other weights."""
    monkeypatch.chdir(tmp_path)
    make(tmp_path, "t.safetensors", "init.safetensors")
    path = tmp_path / "t.safetensors"
    before = numbers(evaluate(path))
    meta = ticket_io.load(path).metadata()
    old = {"path": str(tmp_path / "init.safetensors"), **({"sha256": file_sha256(path.parent / "init.safetensors")})}
    if not digest:
        del old["sha256"]
    save_file(load_file(str(path)), str(tmp_path / "old.safetensors"), metadata={**meta, "checkpoint": json.dumps(old)})
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    assert numbers(evaluate(tmp_path / "old.safetensors")) == before
    r = runner.invoke(app, ["inspect", str(tmp_path / "old.safetensors")])
    assert r.exit_code == 0 and ("not recorded" in r.stdout) != digest
    if not digest:
        write_checkpoint(tmp_path / "init.safetensors", scale=2.0)
        assert "fingerprint mismatch" in one_line(evaluate(tmp_path / "old.safetensors"))


@pytest.mark.parametrize(
    "ticket, weights",
    [
        ("t.safetensors", "w.pt"),
        ("a/b/t.safetensors", "w.pt"),
        ("t.safetensors", "a/b/w.pt"),
        ("x/t.safetensors", "y/z/w.pt"),
        ("x/../t.safetensors", "./y/w.pt"),
    ],
)
def test_the_recorded_path_leads_back_to_the_checkpoint_from_any_working_directory(
    tmp_path, monkeypatch, ticket, weights
):
    monkeypatch.chdir(tmp_path)
    stored = ticket_relative(weights, ticket)
    assert not os.path.isabs(stored) and "\\" not in stored
    for cwd in (tmp_path, tmp_path / "x"):  # where the ticket is opened from does not matter
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        first = recorded_locations(stored, tmp_path / ticket)[0]
        assert os.path.normpath(first) == os.path.normpath(tmp_path / weights)
    assert recorded_locations("/abs/w.pt", tmp_path / ticket) == [Path("/abs/w.pt")]


def test_a_ticket_saved_by_the_api_records_its_checkpoint_beside_it(tmp_path):
    """tc.extract(weights=...) then Ticket.save: the path is stored relative to where the ticket is saved, so the
    folder moved elsewhere still evaluates (the same record the CLI writes)."""
    import ticketcli as tc

    write_checkpoint(tmp_path / "a" / "w.safetensors")
    t = tc.extract(
        MODEL,
        "digits",
        method="augmented",
        epochs=1,
        seed=0,
        progress=False,
        device="cpu",
        n_extract=300,
        n_val=100,
        weights=str(tmp_path / "a" / "w.safetensors"),
    )
    (tmp_path / "a" / "sub").mkdir()
    t.save(tmp_path / "a" / "sub" / "t.safetensors")
    assert ticket_io.load(tmp_path / "a" / "sub" / "t.safetensors").checkpoint.path == "../w.safetensors"
    (tmp_path / "a").rename(tmp_path / "b")
    assert numbers(evaluate(tmp_path / "b" / "sub" / "t.safetensors"))[2]
