"""What a drift run dir says is untrusted: its files are read only within what the run's own settings allow (seeds x
logged steps x a record's size), checked before a byte is read; a run refused before it measured anything takes
back the run dir it started, so the same --run-dir can be used again; and a resume names the --log-to destinations
it recorded and writes outside the run dir only where the command line names the destination again."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from harness import edit_metadata, split
from hostile import assert_clean, cli

RUN = ["drift", "--dataset", "digits", "--model", "mlp:64-16-10", "--batch-size", "32", "--probe-size", "64"]
RUN += ["--log-every", "10", "--steps", "20", "--seeds", "0,1", "--quiet", "--json"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished two-seed run dir (3 logged steps a seed)."""
    folder = tmp_path_factory.mktemp("finished") / "run"
    r = cli(*RUN, "--run-dir", str(folder))
    assert r.exit_code == 0, r.stderr
    return folder


def copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def forge_position(folder: Path, **position: object) -> None:
    """The run dir's state with its measurements position (records, bytes, sha256) replaced."""
    path = folder / "state.safetensors"
    header, _ = split(path.read_bytes())
    state = json.loads(header["__metadata__"]["state"])
    state["measurements"] = {**state["measurements"], **position}
    path.write_bytes(edit_metadata(path.read_bytes(), state=json.dumps(state, sort_keys=True)))


# ---- measurements.jsonl is bounded by the run's settings before it is read ---------------------------------------


@pytest.mark.parametrize("size", [3 << 20, 64 << 20, 300 << 20])
def test_a_measurements_file_larger_than_the_settings_allow_is_refused_unread(finished, tmp_path, size):
    folder = copy(finished, tmp_path / "run")
    with open(folder / "measurements.jsonl", "r+b") as f:  # sparse: the genuine records, then zeros
        f.truncate(size)
    r = cli("drift", "--resume", str(folder), "--quiet", "--json")
    assert_clean(r, contains="more than this run's settings allow")
    assert (folder / "measurements.jsonl").stat().st_size == size  # refused, not cut to the checkpoint


@pytest.mark.parametrize("copies", [200, 5000])
def test_records_appended_past_what_the_settings_hold_are_refused(finished, tmp_path, copies):
    folder = copy(finished, tmp_path / "run")
    line = (folder / "measurements.jsonl").read_bytes().splitlines(keepends=True)[-1]
    with open(folder / "measurements.jsonl", "ab") as f:
        f.write(line * copies)
    assert_clean(cli("drift", "--resume", str(folder), "--quiet", "--json"), contains="settings allow")


@pytest.mark.parametrize("size", [8 << 20, 128 << 20])
def test_a_state_vouching_for_more_than_the_settings_allow_is_refused_unread(finished, tmp_path, size):
    folder = copy(finished, tmp_path / "run")
    records = folder / "measurements.jsonl"
    line = records.read_bytes().splitlines(keepends=True)[0]
    with open(records, "r+b") as f:  # the claimed bytes are there and hash as claimed
        f.truncate(size)
    digest = hashlib.sha256(b"\0" * size).hexdigest()
    forge_position(folder, records=size // len(line), bytes=size, sha256=digest)
    r = cli("drift", "--resume", str(folder), "--quiet", "--json")
    assert_clean(r, contains="settings allow")


@pytest.mark.parametrize("records", [10**6, 7, 2**62])
def test_a_state_claiming_more_records_than_the_settings_hold_is_refused(finished, tmp_path, records):
    folder = copy(finished, tmp_path / "run")
    forge_position(folder, records=records)
    assert_clean(cli("drift", "--resume", str(folder), "--quiet", "--json"), contains="settings allow")


# ---- a refused --run-dir run leaves no run dir behind -----------------------------------------------------------

QUICK = ["drift", "--batch-size", "32", "--probe-size", "64", "--log-every", "10", "--steps", "10", "--quiet"]
REFUSED = {
    "missing dataset": ["--dataset", "mnist", "--data-dir", "{empty}", "--model", "mlp:784-16-10"],
    "missing cifar10": ["--dataset", "cifar10", "--data-dir", "{empty}", "--model", "resnet20"],
    "model the data does not fit": ["--dataset", "digits", "--model", "mlp:784-16-10"],
    "missing ticket": ["--ticket", "{empty}/missing.safetensors"],
    "a ticket that is not one": ["--ticket", "{empty}/junk.safetensors"],
}


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("existing", [False, True], ids=["new", "empty-folder"])
def test_a_refused_run_leaves_no_run_dir_and_the_retry_starts(case, existing, tmp_path):
    empty, folder = tmp_path / "empty", tmp_path / "deep" / "run"
    empty.mkdir()
    (empty / "junk.safetensors").write_bytes(b"\x10" + b"\0" * 7 + b"{" * 16)
    folder.parent.mkdir()
    if existing:
        folder.mkdir()
    args = [a.replace("{empty}", str(empty)) for a in REFUSED[case]]
    assert_clean(cli(*QUICK, *args, "--run-dir", str(folder)))
    assert (folder.is_dir() and not any(folder.iterdir())) if existing else not folder.exists()
    assert_clean(cli(*QUICK, *args, "--run-dir", str(folder)))  # the retry is refused for its own reason again
    assert "not empty" not in cli(*QUICK, *args, "--run-dir", str(folder)).stderr


# ---- a resume writes outside the run dir only where the command line says so -----------------------------------

OUTSIDE = {
    "relative escape": "tensorboard:../escaped",
    "dot-dot through the run dir": "tensorboard:{run}/../escaped",
    "absolute folder": "tensorboard:{tmp}/elsewhere",
    "sqlite file elsewhere": "mlflow:sqlite:///{tmp}/notebook.db",
    "relative sqlite file": "mlflow:sqlite:///notebook.db",
    "mlflow folder elsewhere": "mlflow:{tmp}/store",
    "mlflow file uri elsewhere": "mlflow:file://{tmp}/store",
    "symlink out of the run dir": "tensorboard:{run}/link/tb",
    "inside then outside": ["tensorboard:{run}/tb", "tensorboard:{tmp}/elsewhere"],
}


def record_log_to(folder: Path, log_to: list[str]) -> None:
    doc = json.loads((folder / "run.json").read_text())
    doc["flags"]["track"]["log_to"] = log_to
    (folder / "run.json").write_text(json.dumps(doc, indent=1))


@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_a_recorded_destination_outside_the_run_dir_is_refused(case, finished, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # relative destinations resolve here, as the run resolved them
    folder = copy(finished, work / "run")
    (tmp_path / "target").mkdir()
    (folder / "link").symlink_to(tmp_path / "target")
    spots = OUTSIDE[case] if isinstance(OUTSIDE[case], list) else [OUTSIDE[case]]
    dests = [d.format(run=folder, tmp=tmp_path) for d in spots]
    record_log_to(folder, dests)
    before = sorted(p.name for p in tmp_path.iterdir())
    for where in (str(folder), "run"):
        r = cli("drift", "--resume", where, "--quiet", "--json")
        assert_clean(r, contains="writes outside the run dir")
        assert dests[-1] in r.stderr and "repeat --log-to" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not any((tmp_path / "target").iterdir())
    assert not (work / "notebook.db").exists()


@pytest.mark.slow
def test_recorded_destinations_are_named_and_one_outside_is_written_only_when_repeated(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    monkeypatch.chdir(tmp_path)
    inside, outside = "tensorboard:run/tb", "tensorboard:elsewhere"
    r = cli(*RUN, "--run-dir", "run", "--log-to", inside, "--log-to", outside)
    assert r.exit_code == 0, r.stderr
    shutil.rmtree(tmp_path / "elsewhere")
    (tmp_path / "run" / "state.safetensors").unlink()  # the run starts over: it logs again
    refused = cli("drift", "--resume", "run", "--quiet", "--json")
    assert_clean(refused, contains=f"--log-to {outside}, which writes outside the run dir")
    assert not (tmp_path / "elsewhere").exists()
    again = cli("drift", "--resume", "run", "--log-to", inside, "--log-to", outside, "--quiet", "--json")
    assert again.exit_code == 0, again.stderr
    named = [line for line in again.stderr.splitlines() if "--resume logs to its recorded --log-to" in line]
    assert len(named) == 2 and inside in named[0] and outside in named[1], again.stderr
    assert (tmp_path / "elsewhere").is_dir()
