"""Folders of tickets and reproducing a ticket: `ticket inspect DIR` (a row per ticket, --json, --csv),
`ticket evaluate DIR` (every ticket re-measured and gated) and `ticket inspect --command/--toml` (the extract
command and config that make the same masks again). The folder is a small sweep-k --out-dir, as users give it."""

from __future__ import annotations

import csv
import io
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.contract.schema import schema_of
from ticketcli.runs.inspect import inspect_ticket

jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "300", "--n-val", "100", "--model", "mlp:64-16-10", "--epochs", "1"]
TINY += ["--batch-size", "64", "--threads", "1"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    """A sweep's output folder: tickets, their JSON records and the sweep's own note (not tickets)."""
    out = tmp_path_factory.mktemp("sweep") / "runs"
    args = ["sweep-k", *TINY, "--seeds", "0", "--densities", "0.1,0.3", "--layerwise", "1", "--device", "cpu"]
    r = runner.invoke(app, [*args, "--out-dir", str(out), "--quiet", "--json"])
    assert r.exit_code == 0, r.output
    (out / "plot.png").write_bytes(b"\x89PNG not a ticket")
    return out


def tickets_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith(".safetensors"))


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def flip_first_mask_bit(path: Path) -> None:
    """Change one mask bit in place (the first element of the first mask: never padding); the recorded
    masks_sha256 stays, so readers report the ticket as modified."""
    raw = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    first = min((v["data_offsets"][0] for k, v in header.items() if k.startswith("mask/")), default=None)
    assert first is not None
    raw[8 + n + first] ^= 0x80
    path.write_bytes(bytes(raw))


# --- inspect DIR ------------------------------------------------------------------------------------------------


def test_inspect_dir_lists_every_ticket_as_inspect_reads_it_and_skips_other_files(sweep):
    r = invoke("inspect", sweep, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(jsonschema.Draft202012Validator(schema_of("inspect-folder")).iter_errors(doc)) == []
    files = tickets_in(sweep)
    assert len(files) >= 4 and any(p.suffix == ".json" for p in sweep.iterdir())  # records were there to skip
    assert [row["ticket"] for row in doc["tickets"]] == [str(p) for p in files]
    assert doc["count"] == len(files) and doc["failed"] == 0
    for row, path in zip(doc["tickets"], files):  # the oracle: the single-ticket inspect of each file
        one = inspect_ticket(path).to_document()
        assert row["method"] == one["method"]["name"] and row["model"] == one["model"]["spec"]
        assert row["seed"] == one["init"]["seed"] and row["file_bytes"] == path.stat().st_size
        assert row["sparsity"] == {
            "requested": one["sparsity"]["requested"],
            "achieved": 1 - one["sparsity"]["density"],
        }
        assert row["metrics"]["test"]["accuracy"] == one["metrics"]["test"]["accuracy"]
        assert row["integrity"] == "ok" and row["error"] is None and row["masks_sha256"] == one["masks_sha256"]


def test_csv_holds_the_json_rows_and_quotes_awkward_names(sweep, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    src = tickets_in(sweep)[0]
    awkward = 'a,"b" c.safetensors'  # a comma and quotes: only proper quoting keeps the row whole
    shutil.copy(src, folder / awkward)
    shutil.copy(src, folder / "plain.safetensors")
    shutil.copy(src, folder / "x\x1b[2Jy.safetensors")  # an escape sequence in a name reaches no terminal raw
    r = invoke("inspect", folder, "--csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    doc = json.loads(invoke("inspect", folder, "--json").stdout)
    assert [row["ticket"] for row in rows[:2]] == [t["ticket"] for t in doc["tickets"][:2]]
    assert rows[0]["ticket"] == str(folder / awkward) and len(rows) == 3
    assert rows[2]["ticket"] == str(folder / "x\\x1b[2Jy.safetensors") and "\x1b" not in r.stdout
    for row, t in zip(rows, doc["tickets"]):
        assert float(row["achieved_sparsity"]) == t["sparsity"]["achieved"]  # full precision, not rounded
        assert float(row["test_accuracy"]) == t["metrics"]["test"]["accuracy"]
        assert int(row["file_bytes"]) == t["file_bytes"] and row["integrity"] == "ok" and row["error"] == ""


def test_a_damaged_ticket_is_listed_with_its_reason_and_the_folder_exits_1(sweep, tmp_path):
    folder = tmp_path / "mixed"
    shutil.copytree(sweep, folder)
    files = tickets_in(folder)
    flip_first_mask_bit(files[0])
    (folder / "zz-garbage.safetensors").write_bytes(b"\x07" * 64)
    os.mkfifo(folder / "pipe.safetensors")  # listed and refused unread: no hang
    (folder / "sub.safetensors").mkdir()  # a folder is no ticket: skipped
    alone = invoke("inspect", folder / "zz-garbage.safetensors")
    assert alone.exit_code == 2
    reason = alone.stderr.strip().removeprefix("error: ")
    r = invoke("inspect", folder, "--json")
    assert r.exit_code == 1
    rows = {Path(t["ticket"]).name: t for t in json.loads(r.stdout)["tickets"]}
    assert len(rows) == len(files) + 2  # every ticket is still listed
    assert rows[files[0].name]["integrity"] == "modified"
    assert (
        rows["pipe.safetensors"]["integrity"] == "invalid" and "not a regular file" in rows["pipe.safetensors"]["error"]
    )
    assert rows["zz-garbage.safetensors"]["integrity"] == "invalid"
    assert rows["zz-garbage.safetensors"]["error"] == reason.split(" (hint:")[0]
    assert sum(t["integrity"] == "ok" for t in rows.values()) == len(files) - 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"error: 3 of {len(files) + 2} tickets failed")
    assert files[0].name in r.stderr and "zz-garbage.safetensors" in r.stderr
    table = invoke("inspect", folder)
    assert table.exit_code == 1 and reason.split(" (hint:")[0] in table.stdout.replace("\n", "")


def test_no_tickets_is_one_error_line_and_exit_2(tmp_path):
    (tmp_path / "record.json").write_text("{}")
    for args in ([tmp_path], [str(tmp_path / "*.safetensors")], [tmp_path, "--csv"]):
        r = invoke("inspect", *args)
        assert r.exit_code == 2 and r.stdout == ""
        assert r.stderr.startswith("error: no ticket files") and r.stderr.count("\n") == 1


def test_a_quoted_glob_and_several_files_select_those_tickets(sweep):
    files = tickets_in(sweep)
    edge = [p for p in files if "edge-popup" in p.name]
    assert edge and len(edge) < len(files)
    rows = json.loads(invoke("inspect", str(sweep / "*edge-popup*"), "--json").stdout)["tickets"]
    assert [t["ticket"] for t in rows] == [str(p) for p in edge]
    two = json.loads(invoke("inspect", files[1], files[0], files[1], "--json").stdout)["tickets"]
    assert [t["ticket"] for t in two] == [str(files[1]), str(files[0])]  # in the order given, each once


def test_a_single_file_keeps_its_single_ticket_output(sweep):
    path = tickets_in(sweep)[0]
    doc = json.loads(invoke("inspect", path, "--json").stdout)
    assert doc == inspect_ticket(path).to_document() and doc["schema"] == "ticket.inspect/1"
    row = list(csv.DictReader(io.StringIO(invoke("inspect", path, "--csv").stdout)))
    assert len(row) == 1 and row[0]["masks_sha256"] == doc["masks_sha256"]


def test_inspect_refuses_combined_outputs(sweep):
    path = tickets_in(sweep)[0]
    for args in (["--json", "--csv"], ["--command", "--json"]):
        r = invoke("inspect", path, *args)
        assert r.exit_code == 2 and r.stderr.startswith("error: choose one")
    r = invoke("inspect", sweep, "--command")
    assert r.exit_code == 2 and "single ticket" in r.stderr


# --- evaluate DIR -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_evaluate_dir_gates_every_ticket_and_each_entry_is_evaluates_own_document(sweep, tmp_path):
    folder = tmp_path / "eval"
    folder.mkdir()
    files = tickets_in(sweep)[:3]
    for p in files:
        shutil.copy(p, folder / p.name)
    stored = {p.name: inspect_ticket(p)["metrics"]["test"]["accuracy"] for p in files}
    assert len(set(stored.values())) > 1, "the gate below needs tickets of different accuracy"
    bar = sorted(stored.values())[-1]  # only the best ticket(s) reach it
    r = invoke("evaluate", folder, "--min-accuracy", bar, "--json", "--quiet", "--device", "cpu", "--threads", "1")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert list(jsonschema.Draft202012Validator(schema_of("evaluate-folder")).iter_errors(doc)) == []
    below = {n for n, acc in stored.items() if acc < bar}
    failed = {Path(t["ticket"]).name for t in doc["tickets"] if not t["gate"]["passed"]}
    assert failed == below and doc["gate"] == {"min_accuracy": bar, "passed": False}
    assert doc["summary"] == {
        "count": 3,
        "evaluated": 3,
        "errors": 0,
        "reproduced": 3,
        "passed": 3 - len(below),
        "failed": len(below),
    }
    assert r.stderr.startswith(f"error: {len(below)} of 3 tickets failed")
    for entry in doc["tickets"]:  # the oracle: `ticket evaluate TICKET --json` with the same gate
        one = invoke("evaluate", entry["ticket"], "--min-accuracy", bar, "--json", "--quiet", "--device", "cpu")
        assert json.loads(one.stdout) == {**entry, "threads": json.loads(one.stdout)["threads"]}
    passing = invoke("evaluate", folder, "--min-accuracy", min(stored.values()), "--quiet", "--device", "cpu")
    assert passing.exit_code == 0, passing.output
    assert "3 of 3 tickets evaluated" in passing.stdout.replace("\n", " ")


def test_evaluate_dir_reports_a_ticket_it_cannot_evaluate_and_goes_on(sweep, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    good = tickets_in(sweep)[0]
    shutil.copy(good, folder / good.name)
    (folder / "broken.safetensors").write_bytes(b"\x07" * 64)
    r = invoke("evaluate", folder, "--json", "--device", "cpu")  # progress on stderr, off a terminal: plain lines
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert list(jsonschema.Draft202012Validator(schema_of("evaluate-folder")).iter_errors(doc)) == []
    broken = [t for t in doc["tickets"] if "error" in t]
    assert len(broken) == 1 and broken[0]["ticket"].endswith("broken.safetensors")
    assert doc["summary"]["evaluated"] == 1 and doc["summary"]["errors"] == 1
    assert "evaluate 2/2" in r.stderr and r.stderr.strip().splitlines()[-1].startswith("error: 1 of 2 tickets failed")


def test_evaluate_of_an_empty_folder_is_exit_2(tmp_path):
    r = invoke("evaluate", tmp_path)
    assert r.exit_code == 2 and r.stderr.startswith("error: no ticket files") and r.stderr.count("\n") == 1


# --- inspect --command / --toml ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_printed_command_reproduces_the_tickets_masks(sweep, tmp_path):
    """A layerwise edge-popup ticket (a list-valued flag): the printed line, run by a shell as printed (with a
    `ticket` on PATH that runs this checkout), makes a ticket with the same masks."""
    path = next(p for p in tickets_in(sweep) if "lw" in p.name)
    r = invoke("inspect", "--command", path)
    assert r.exit_code == 0 and r.stdout.count("\n") == 1, r.output
    words = shlex.split(r.stdout)
    assert words[:2] == ["ticket", "extract"] and "--layer-densities" in words
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "ticket"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m ticketcli "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    line = r.stdout.strip() + " --quiet --json"
    done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["masks_sha256"] == inspect_ticket(path)["masks_sha256"]
    assert (tmp_path / words[words.index("--out") + 1]).exists()


@pytest.mark.slow
def test_the_printed_toml_reproduces_the_tickets_masks(sweep, tmp_path):
    path = next(p for p in tickets_in(sweep) if "augmented" in p.name)
    r = invoke("inspect", path, "--toml")
    assert r.exit_code == 0, r.output
    (tmp_path / "t.toml").write_text(r.stdout)
    done = invoke(
        "extract", "--config", tmp_path / "t.toml", "--out", tmp_path / "again.safetensors", "--quiet", "--json"
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["masks_sha256"] == inspect_ticket(path)["masks_sha256"]


def test_command_names_what_differs_from_the_defaults_and_toml_names_everything(sweep):
    path = next(p for p in tickets_in(sweep) if "augmented" in p.name)
    words = shlex.split(invoke("inspect", "--command", path).stdout)
    flags = {w for w in words if w.startswith("--")}
    assert {"--n-extract", "--n-val", "--batch-size", "--method", "--sparsity", "--model", "--seed"} <= flags
    assert "--lr" not in flags and "--aux-width" not in flags  # at their defaults
    import tomllib

    config = tomllib.loads(invoke("inspect", "--toml", path).stdout)
    assert config["lr"] == 0.01 and config["aux_width"] == 1 and config["n_extract"] == 300


def test_a_ticket_of_in_memory_data_gets_one_line_why_no_command_makes_it(tmp_path):
    import torch
    from sklearn.datasets import load_digits

    import ticketcli as tc

    d = load_digits()
    x, y = torch.tensor(d.data, dtype=torch.float32) / 16, torch.tensor(d.target)
    t = tc.extract("mlp:64-16-10", (x, y), method="edge-popup", epochs=1, progress=False, device="cpu")
    path = t.save(tmp_path / "mem.safetensors")
    for flag in ("--command", "--toml"):
        r = invoke("inspect", flag, path)
        assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1
        assert "no command reproduces this ticket" in r.stderr and "tc.extract" in r.stderr


def test_the_command_carries_the_device_kind_the_process_count_and_every_setting_of_another_version(sweep, tmp_path):
    """A ticket recording two torchrun processes on cuda:0, made by another ticketcli version (metadata edited: the
    masks stay, so does their digest)."""
    from ticketcli.ticketfile import ticket as ticket_io

    src = next(p for p in tickets_in(sweep) if "augmented" in p.name)
    tk = ticket_io.load(src)
    tk.metrics = type(tk.metrics).of({**tk.metrics.to_json(), "device": "cuda:0", "processes": 2})
    tk.created_by = type(tk.created_by).of({**tk.created_by.to_json(), "ticketcli": "0.0.1"})
    path = tmp_path / "ddp.safetensors"
    ticket_io.save(tk, path)
    r = invoke("inspect", "--command", path)
    assert r.exit_code == 0, r.output
    words = shlex.split(r.stdout)
    assert words[:7] == ["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "ticketcli", "extract"]
    assert words[words.index("--device") + 1] == "cuda"
    assert "--lr" in words and "--aux-width" in words and "--init-k" in words  # every setting, defaults included
    assert "made by ticketcli 0.0.1" in r.stderr
    toml = invoke("inspect", "--toml", path).stdout
    assert "nproc-per-node 2" in toml and 'device = "cuda"' in toml
