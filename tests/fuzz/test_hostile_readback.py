"""Bound and type every file read back: sweep-k's records and tickets in --out-dir are read like tickets (regular
files only, bounded size, strict typed JSON of bounded depth); a bad one is one line, exit 2 naming it (it is not
the sweep's file), or with --force one warning and its run recomputed. Every field a reader shows is optional; a
checkpoint a ticket records is bounded by the ticket's own model before it is hashed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from harness import edit_json, write_seed_ticket
from hostile import QUICK_SWEEP as SWEEP
from hostile import assert_clean, child, cli

from ticketcli.runs import checks as runs_checks

VICTIM = "seed0-random"  # the cheapest run to recompute


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    """A finished tiny sweep's --out-dir (copied per case: the copies are not the sweep's own files)."""
    folder = tmp_path_factory.mktemp("sweep") / "runs"
    run = cli(*SWEEP, "--out-dir", str(folder))
    assert run.exit_code == 0, run.stderr
    return folder


@pytest.fixture
def out_dir(finished_sweep, tmp_path) -> Path:
    folder = tmp_path / "runs"
    shutil.copytree(finished_sweep, folder)
    return folder


def record_of(folder: Path) -> dict:
    return json.loads((folder / f"{VICTIM}.json").read_text())


def _string_accuracy(folder: Path) -> None:
    doc = record_of(folder)
    doc["record"]["metrics"]["test"]["accuracy"] = "0.9"
    (folder / f"{VICTIM}.json").write_text(json.dumps(doc))


def _extra_field(folder: Path) -> None:
    doc = record_of(folder)
    doc["record"]["ticket"] = {"nested": [1, 2]}
    (folder / f"{VICTIM}.json").write_text(json.dumps(doc))


def _other_task(folder: Path) -> None:
    doc = record_of(folder)
    doc["record"]["group"] = "edge-popup"  # a record claiming to be another run's
    (folder / f"{VICTIM}.json").write_text(json.dumps(doc))


def _deep(folder: Path) -> None:
    (folder / f"{VICTIM}.json").write_bytes(b"[" * 100000 + b"]" * 100000)


def _not_json(folder: Path) -> None:
    (folder / f"{VICTIM}.json").write_bytes(b"\xff\xfe{")


def _sparse_record(folder: Path) -> None:
    with open(folder / f"{VICTIM}.json", "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of holes: nothing on disk


def _sparse_ticket(folder: Path) -> None:
    with open(folder / f"{VICTIM}.safetensors", "wb") as f:
        f.truncate(1 << 30)


def _ticket_of_other_bytes(folder: Path) -> None:
    (folder / f"{VICTIM}.safetensors").write_bytes((folder / "seed0-fixed.safetensors").read_bytes())


def _fifo_record(folder: Path) -> None:
    (folder / f"{VICTIM}.json").unlink()
    os.mkfifo(folder / f"{VICTIM}.json")


def _fifo_ticket(folder: Path) -> None:
    (folder / f"{VICTIM}.safetensors").unlink()
    os.mkfifo(folder / f"{VICTIM}.safetensors")


def _dev_zero_record(folder: Path) -> None:
    (folder / f"{VICTIM}.json").unlink()
    (folder / f"{VICTIM}.json").symlink_to("/dev/zero")


REGULAR = {  # a bad regular file: exit 2 naming it; with --force one warning and the run recomputed
    "string accuracy": _string_accuracy,
    "a field of the wrong type": _extra_field,
    "another run's record": _other_task,
    "JSON 100000 deep": _deep,
    "not JSON": _not_json,
    "sparse 3 GiB record": _sparse_record,
    "sparse 1 GiB ticket": _sparse_ticket,
    "another run's ticket": _ticket_of_other_bytes,
}
SPECIAL = {  # not a regular file: never read (no hang, no endless read), never replaced, even with --force
    "FIFO record": _fifo_record,
    "FIFO ticket": _fifo_ticket,
    "/dev/zero record": _dev_zero_record,
}


def stamps(folder: Path) -> dict[str, tuple]:
    """Each file's identity and size (not its bytes: reading a sparse 3 GiB file here would be the test's own
    memory bomb)."""
    return {p.name: (p.lstat().st_ino, p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.iterdir()}


@pytest.mark.parametrize("case", list(REGULAR))
def test_a_bad_record_or_ticket_is_one_line_naming_it(case, out_dir):
    REGULAR[case](out_dir)
    before = stamps(out_dir)
    run = cli(*SWEEP, "--out-dir", str(out_dir))
    assert_clean(run, 2, contains=VICTIM, folder=out_dir, peak=256 << 20)
    assert stamps(out_dir) == before


@pytest.mark.parametrize("case", ["string accuracy", "JSON 100000 deep", "sparse 3 GiB record", "sparse 1 GiB ticket"])
def test_with_force_a_bad_record_is_one_warning_and_its_run_is_recomputed(case, out_dir):
    REGULAR[case](out_dir)
    run = cli(*SWEEP, "--out-dir", str(out_dir), "--force", "--json")
    assert run.exit_code == 0 and run.exception is None, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning:") and VICTIM in lines[0], run.stderr
    doc = json.loads(run.stdout)
    assert VICTIM not in doc["resumed"] and len(doc["resumed"]) == len(doc["records"]) - 1
    assert record_of(out_dir)["record"]["id"] == VICTIM  # rewritten, and the sweep's own file now
    again = cli(*SWEEP, "--out-dir", str(out_dir), "--json")
    assert again.exit_code == 0 and len(json.loads(again.stdout)["resumed"]) == len(doc["records"])


@pytest.mark.parametrize(
    "case, force", [(c, False) for c in SPECIAL] + [("FIFO record", True)], ids=[*SPECIAL, "FIFO record, --force"]
)
@pytest.mark.slow
def test_a_special_file_in_out_dir_neither_hangs_nor_is_read(case, force, out_dir):
    SPECIAL[case](out_dir)
    before = stamps(out_dir)
    run = child(*SWEEP, "--out-dir", str(out_dir), *(["--force"] if force else []), timeout=240)
    assert_clean(run, 2, contains=VICTIM, folder=out_dir)
    assert stamps(out_dir) == before


# ---- every field a reader shows is optional ----


def _leaves(value, prefix=()):
    """Every path into a parsed JSON value whose removal leaves a JSON object behind."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from _leaves(v, (*prefix, k))


def _without(path: tuple):
    def drop(value: dict) -> None:
        for k in path[:-1]:
            value = value[k]
        del value[path[-1]]

    return drop


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("seed") / "t.safetensors")


def _optional_cases(raw: bytes) -> list[tuple[str, tuple]]:
    header_len = int.from_bytes(raw[:8], "little")
    meta = json.loads(raw[8 : 8 + header_len])["__metadata__"]
    fields = ("metrics", "sparsity", "method", "data", "init", "created_by", "model")
    return [(f, p) for f in fields for p in _leaves(json.loads(meta[f]))]


@pytest.mark.slow
def test_every_field_a_reader_shows_may_be_missing(seed, tmp_path):
    """Removing any one key of the ticket's metadata objects: inspect (table and JSON) shows the ticket or
    refuses it with one line; never an internal error (e.g. KeyError 'val')."""
    cases = _optional_cases(seed)
    assert any(f == "metrics" and p == ("val",) for f, p in cases)
    path = tmp_path / "t.safetensors"
    for field, key in cases:
        path.write_bytes(edit_json(seed, field, _without(key)))
        for args in (["inspect", str(path)], ["inspect", str(path), "--json"]):
            run = cli(*args)
            assert run.exception is None and run.exit_code in (0, 2), (field, key, run.exit_code, run.stderr[-500:])
            if run.exit_code == 2:
                assert_clean(run, 2)


@pytest.mark.parametrize("split", ["val", "test"])
def test_evaluate_shows_a_ticket_whose_metrics_lack_a_split(split, seed, tmp_path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(edit_json(seed, "metrics", _without((split,))))
    for args in (["evaluate", str(path), "--device", "cpu"], ["evaluate", str(path), "--device", "cpu", "--json"]):
        run = cli(*args)
        assert run.exception is None and run.exit_code == 0, run.stderr[-1000:]


# ---- a checkpoint a ticket records is bounded by the ticket's model ----


def test_a_huge_sparse_checkpoint_a_ticket_records_is_not_hashed(tmp_path, monkeypatch):
    weights = tmp_path / "w.pt"
    torch.manual_seed(0)
    torch.save({"layers.0.weight": torch.randn(13, 64), "layers.1.weight": torch.randn(10, 13)}, weights)
    ticket = tmp_path / "t.safetensors"
    run = cli(
        "extract",
        "--method",
        "random",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-13-10",
        "--n-extract",
        "100",
        "--n-val",
        "50",
        "--weights",
        str(weights),
        "--quiet",
        "--out",
        str(ticket),
    )
    assert run.exit_code == 0, run.stderr
    weights.unlink()
    with open(weights, "wb") as f:
        f.truncate(2 << 30)  # far below 16 x --max-params, far above what 962 weights take

    def hashed(*args):
        raise AssertionError("the checkpoint was hashed before its size was checked")

    monkeypatch.setattr(runs_checks, "file_sha256", hashed)
    for args in (["evaluate", str(ticket)], ["evaluate", str(ticket), "--weights", str(weights)]):
        assert_clean(cli(*args, "--device", "cpu"), 2, contains="bytes", peak=256 << 20)
