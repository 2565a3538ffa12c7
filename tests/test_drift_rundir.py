"""`ticket drift --run-dir / --resume`: a run killed by SIGTERM at a random step (after a checkpoint) and resumed
leaves the same measurements.jsonl and prints the same --json document as an uninterrupted run (wall_time_s, the
one run-specific field, aside); conflicting flags, foreign folders and damaged, truncated or crafted run files are
refused with one line (exit 2), never a traceback."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import warm
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from typer.testing import CliRunner

from ticketcli.cli.app import app

ROOT = Path(__file__).resolve().parent.parent
RUN_SPECIFIC = ("wall_time_s",)  # fields of the --json document that differ between any two runs
ARGS = ["--dataset", "digits", "--model", "mlp:64-16-16-10", "--batch-size", "32", "--probe-size", "64"]
ARGS += ["--log-every", "10", "--act-sparsity", "percentile", "--seeds", "0,1", "--quiet", "--json"]
runner = CliRunner()


def ticket(*args: str, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([*warm.client(env), "-m", "ticketcli", "drift", *args], env=env, **kw)  # a warm child


def doc(text: str) -> dict:
    d = json.loads(text)
    for k in RUN_SPECIFIC:
        d.pop(k)
    return d


# each test runs `ticket drift` processes over a shared uninterrupted run: minutes on a loaded 2-core machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """An uninterrupted run kept in a run dir: its run dir and --json document."""
    folder = tmp_path_factory.mktemp("whole") / "run"
    p = ticket(*ARGS, "--steps", "300", "--run-dir", str(folder), "--checkpoint-every", "25", stdout=subprocess.PIPE)
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0
    return folder, doc(out.decode())


def killed_at(folder: Path, measured: int) -> tuple[int | None, bytes]:
    """Start the run kept in `folder` and send it SIGTERM once measurements.jsonl holds `measured` records (after
    the first checkpoint); its exit code and stderr (None: the run ended before the signal)."""
    p = ticket(*ARGS, "--steps", "300", "--run-dir", str(folder), "--checkpoint-every", "25", stderr=subprocess.PIPE)
    records, deadline = folder / "measurements.jsonl", time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:
        if (folder / "state.safetensors").exists() and records.read_bytes().count(b"\n") >= measured:
            p.send_signal(signal.SIGTERM)
            break
        time.sleep(0.005)
    _, err = p.communicate(timeout=120)
    return (None if p.returncode == 0 else p.returncode), err


def test_a_killed_run_resumes_to_the_uninterrupted_measurements_and_document(whole, tmp_path):
    """Killed at a random measurement (31 a seed: the second seed's, sometimes), counted in the file rather than
    timed, so that a fast machine cannot finish the run before the signal; once more at the first checkpoint if
    it did."""
    folder = tmp_path / "run"
    code, err = killed_at(folder, random.randint(4, 45))
    if code is None:
        folder = tmp_path / "again"
        code, err = killed_at(folder, 3)
    lines = err.decode().strip().splitlines()
    assert code == 143 and len(lines) == 1 and "--resume" in lines[0], (code, err)
    r = ticket("--resume", str(folder), "--json", "--quiet", stdout=subprocess.PIPE)
    out, _ = r.communicate(timeout=600)
    assert r.returncode == 0
    assert doc(out.decode()) == whole[1]
    assert (folder / "measurements.jsonl").read_bytes() == (whole[0] / "measurements.jsonl").read_bytes()
    # a finished run resumed again prints its document without training
    assert doc(runner.invoke(app, ["drift", "--resume", str(folder), "--json"]).stdout) == whole[1]


def test_without_a_run_dir_the_document_is_the_same(whole):
    p = ticket(*ARGS, "--steps", "300", stdout=subprocess.PIPE)
    out, _ = p.communicate(timeout=600)
    assert doc(out.decode()) == whole[1]


def refused(*args: str) -> str:
    r = runner.invoke(app, ["drift", *args])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.output
    return lines[0]


def copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


@pytest.mark.parametrize(
    "flag", [["--lr", "0.5"], ["--steps", "10"], ["--seeds", "3"], ["--act-target", "0.2"], ["--threads", "1"]]
)
def test_a_flag_that_conflicts_with_the_recorded_one_is_refused(whole, flag):
    assert "conflicts with the run" in refused("--resume", str(whole[0]), *flag)


def test_a_flag_that_agrees_with_the_recorded_one_is_accepted(whole):
    r = runner.invoke(app, ["drift", "--resume", str(whole[0]), "--steps", "300", "--seeds", "0,1", "--json"])
    assert r.exit_code == 0 and doc(r.stdout) == whole[1]


def test_folders_that_are_not_run_dirs_are_refused(whole, tmp_path):
    assert "not a run dir" in refused("--resume", str(tmp_path))
    assert "not a run dir" in refused("--resume", str(tmp_path / "missing"))
    (tmp_path / "f").write_text("x")
    assert "not a run dir" in refused("--resume", str(tmp_path / "f"))
    assert "not empty" in refused(*ARGS, "--steps", "5", "--run-dir", str(whole[0]))
    assert "--run-dir" in refused(*ARGS, "--steps", "5", "--checkpoint-every", "2")
    assert "--relufy" in refused("--run-dir", str(tmp_path / "r"), "--relufy", "--from", "gelu", "--to", "relu")


def test_damaged_settings_files_are_refused(whole, tmp_path):
    """Truncations and crafted values of run.json: each refused in one line."""
    good = (whole[0] / "run.json").read_bytes()
    settings = json.loads(good)
    crafted = [
        good[: len(good) // 2],
        b"\xff\xfe",
        b"[]",
        b"{" * 100000,
        json.dumps({**settings, "format": "other"}).encode(),
        json.dumps({**settings, "flags": {**settings["flags"], "run": {"lr": "x"}}}).encode(),
        json.dumps({**settings, "flags": {**settings["flags"], "extra": {}}}).encode(),
        json.dumps({**settings, "settings": {**settings["settings"], "steps": 7}}).encode(),
    ]
    for g in ("run", "features", "reader", "inputs"):
        for key in settings["flags"][g]:
            for value in ([1], {"a": 1}, True, 1.5, "text"):
                flags = {**settings["flags"], g: {**settings["flags"][g], key: value}}
                crafted.append(json.dumps({**settings, "flags": flags}).encode())
    for n, payload in enumerate(crafted):
        folder = copy(whole[0], tmp_path / f"s{n}")
        (folder / "run.json").write_bytes(payload)
        r = runner.invoke(app, ["drift", "--resume", str(folder), "--json"])
        if r.exit_code == 0:  # a value of the right kind and range that resolves the same is a legal edit
            assert doc(r.stdout) == whole[1]
            continue
        assert r.exit_code == 2 and r.stderr.count("error:") == 1 and "Traceback" not in r.output, (n, r.output)


def fuzz_state(whole: Path, tmp_path: Path, mutate, cases: int) -> None:
    data = (whole / "state.safetensors").read_bytes()
    rng = random.Random(0)
    for n in range(cases):
        folder = copy(whole, tmp_path / f"c{n}")
        (folder / "state.safetensors").write_bytes(mutate(data, rng))
        r = runner.invoke(app, ["drift", "--resume", str(folder), "--json"])
        assert "Traceback" not in r.output and not isinstance(r.exception, (MemoryError, RecursionError)), r.output
        assert r.exit_code in (0, 2), (n, r.output)
        if r.exit_code == 2:
            assert r.stderr.count("error:") == 1
        else:  # a flip the state shrugs off (a digit of a float in the metadata JSON, say) still resumes the run
            assert json.loads(r.stdout)["schema"]


def test_truncated_states_are_refused(whole, tmp_path):
    fuzz_state(whole[0], tmp_path, lambda d, rng: d[: rng.randrange(len(d))], 25)


def test_bit_flipped_states_are_refused_or_harmless(whole, tmp_path):
    def flip(d: bytes, rng: random.Random) -> bytes:
        b = bytearray(d)
        header = int.from_bytes(d[:8], "little") + 8
        i = rng.randrange(min(header, len(b)))  # the header: where a flip changes what the file claims
        b[i] ^= 1 << rng.randrange(8)
        return bytes(b)

    fuzz_state(whole[0], tmp_path, flip, 40)


def crafted_states(data: bytes) -> list[bytes]:
    """Well-formed safetensors files that lie: wrong shapes and dtypes, missing or extra tensors, bad metadata."""
    import torch

    tensors = st_load(data)
    meta = json.loads(_metadata(data)["state"])
    name = next(n for n in tensors if n.startswith("param."))
    out = [
        st_save({**tensors, name: tensors[name].double()}, {"state": json.dumps(meta)}),
        st_save({**tensors, name: tensors[name][:1]}, {"state": json.dumps(meta)}),
        st_save({k: v for k, v in tensors.items() if k != name}, {"state": json.dumps(meta)}),
        st_save({**tensors, "param.extra": torch.zeros(3)}, {"state": json.dumps(meta)}),
        st_save({**tensors, "order": torch.zeros_like(tensors["order"])}, {"state": json.dumps(meta)}),
        st_save({**tensors, "rng.inputs": tensors["rng.inputs"][:10]}, {"state": json.dumps(meta)}),
        st_save(tensors, {"state": "not json"}),
        st_save(tensors),
        b"\xff" * 8 + data[8:],  # a header length of 2^64 - 1
        (10**9).to_bytes(8, "little") + data[8:],
    ]
    for value in ([None, None], [{"overall": 1}, {}], ["x", "y"], [{}] * 2):
        out.append(st_save(tensors, {"state": json.dumps({**meta, "finished": value})}))
    for key in ("seed_index", "step", "finished", "measurements", "settings_sha256", "control_updates", "epoch_pos"):
        for value in (None, -1, 10**30, "x", [], {}, True, 1.5):
            out.append(st_save(tensors, {"state": json.dumps({**meta, key: value})}))
    for key in ("records", "bytes", "sha256"):
        for value in (-1, 10**12, "0" * 64, None):
            m = {**meta, "measurements": {**meta["measurements"], key: value}}
            out.append(st_save(tensors, {"state": json.dumps(m)}))
    return out


def _metadata(data: bytes) -> dict:
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n])["__metadata__"]


def test_crafted_states_are_refused(whole, tmp_path):
    cases = crafted_states((whole[0] / "state.safetensors").read_bytes())
    fuzz_state(whole[0], tmp_path, lambda d, rng, it=iter(cases): next(it), len(cases))


def test_damaged_measurements_are_refused(whole, tmp_path):
    good = (whole[0] / "measurements.jsonl").read_bytes()
    for n, payload in enumerate([good[:-5], good[:100], b"", good.replace(b'"step": 10', b'"step": 11', 1)]):
        folder = copy(whole[0], tmp_path / f"m{n}")
        (folder / "measurements.jsonl").write_bytes(payload)
        assert "measurements.jsonl" in refused("--resume", str(folder), "--json")


class _Opens:
    """Unpickled, it creates the file named: a state that is a pickle, or a torch.save archive, must never be."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_pickled_state_is_refused_without_being_unpickled(whole, tmp_path):
    import pickle

    import torch

    ran = tmp_path / "unpickled"
    archive = tmp_path / "archive.pt"
    torch.save({"param.x": torch.zeros(2), "trap": _Opens(ran)}, archive)
    for n, data in enumerate([pickle.dumps(_Opens(ran)), archive.read_bytes()]):
        folder = copy(whole[0], tmp_path / f"p{n}")
        (folder / "state.safetensors").write_bytes(data)
        r = runner.invoke(app, ["drift", "--resume", str(folder), "--json"])
        assert r.exit_code == 2 and r.stderr.count("error:") == 1 and "Traceback" not in r.output, r.output
        assert not ran.exists()
    pickle.loads(pickle.dumps(_Opens(ran))).close()
    assert ran.exists()  # the trap works where something unpickles
