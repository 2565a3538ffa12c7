"""Races on outputs: a destination that appears while a run works is never replaced (without --force): every writer
keeps the user's file, keeps its own result beside it under the name its one exit-2 line gives, and leaves no temp
file; --force still replaces atomically; a file there at the start is refused before the work, as ever. Two sweep-k
processes on one --out-dir share the runs (each done exactly once, both tables cover all), and a sweep killed
mid-way leaves claims that the next sweep takes over."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm
from hostile import QUICK_SWEEP as SWEEP
from hostile import REPO, assert_clean, cli

from ticketcli.errors import UsageError
from ticketcli.files import atomic
from ticketcli.files.atomic import write_atomic, write_owned
from ticketcli.ticketfile import ticket as ticket_io

THEIRS = b"the user's file\n"
QUICK = ["--device", "cpu", "--quiet"]
EXTRACT = ["extract", "--method", "edge-popup", "--dataset", "digits", "--model", "mlp:64-13-10", "--epochs", "1"]
EXTRACT += ["--n-extract", "100", "--n-val", "50", *QUICK]


def kept(path: Path, pid: int | None = None) -> Path:
    """Where a run of process `pid` keeps its result when `path` was taken meanwhile."""
    return path.with_name(f"{path.stem}.new-{pid or os.getpid()}{path.suffix}")


def appears_during_the_run(monkeypatch, module, target: Path) -> None:
    """`module`'s start check of `target` passes, then someone writes `target`: the file appears while the run
    works, between the check and the final move."""
    real = module.check_destination

    def then_someone_writes(p, **kwargs):
        real(p, **kwargs)
        if Path(p) == target:
            target.write_bytes(THEIRS)

    monkeypatch.setattr(module, "check_destination", then_someone_writes)


def assert_kept_beside(run, target: Path) -> Path:
    """Exit 2 in one line naming the kept result; the user's file untouched; no temp file."""
    beside = kept(target)
    assert_clean(run, 2, contains="appeared while this run worked", folder=target.parent, peak=2 << 30)  # real work
    assert str(beside) in run.stderr and "--force" in run.stderr
    assert target.read_bytes() == THEIRS
    assert beside.is_file() and beside.stat().st_size > 0
    return beside


# ---- the writer, once: atomic.write_owned ----


def test_a_name_taken_during_the_run_keeps_both_files(tmp_path):
    path = tmp_path / "o.safetensors"
    atomic.check_destination(path)  # the run's start
    path.write_bytes(THEIRS)
    with pytest.raises(UsageError, match="appeared while this run worked") as e:
        write_atomic(path, b"ours", checked_at_start=True)
    assert str(kept(path)) in str(e.value)
    assert path.read_bytes() == THEIRS and kept(path).read_bytes() == b"ours"
    second = path.with_name(f"o.new-{os.getpid()}-2.safetensors")  # that name is taken too: the next one
    with pytest.raises(UsageError, match=second.name):
        write_atomic(path, b"again", checked_at_start=True)
    assert second.read_bytes() == b"again" and kept(path).read_bytes() == b"ours"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_file_there_at_the_start_is_refused_without_writing_and_force_replaces_it(tmp_path):
    path = tmp_path / "o.safetensors"
    path.write_bytes(THEIRS)
    with pytest.raises(UsageError, match="already exists"):
        write_atomic(path, b"ours")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.safetensors"]
    write_atomic(path, b"ours", overwrite=True, checked_at_start=True)  # --force: one atomic rename
    assert path.read_bytes() == b"ours"


def test_a_file_of_the_sweeps_own_replaced_by_someone_elses_is_kept(tmp_path):
    path = tmp_path / "r.json"
    mine = write_owned(path, b"v1")
    path.unlink()
    path.write_bytes(THEIRS)  # the name no longer holds the file the run wrote
    with pytest.raises(UsageError, match="appeared while this run worked"):
        write_owned(path, b"v2", owned=mine, checked_at_start=True)
    assert path.read_bytes() == THEIRS and kept(path).read_bytes() == b"v2"


@pytest.mark.parametrize("fallback", ["renameat2", "placeholder"])
def test_without_hard_links_a_taken_name_is_still_never_replaced(fallback, tmp_path, monkeypatch):
    """A file system without hard links (os.link: EPERM): renameat2(RENAME_NOREPLACE), or where that is missing an
    exclusive placeholder, still gives a free name only."""

    def no_links(src, dst, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    if fallback == "placeholder":
        monkeypatch.setattr(atomic, "_rename_noreplace", lambda src, dst: None)
    fresh = tmp_path / "fresh.png"
    write_atomic(fresh, b"ours", checked_at_start=True)
    assert fresh.read_bytes() == b"ours"
    taken = tmp_path / "taken.png"
    taken.write_bytes(THEIRS)
    with pytest.raises(UsageError, match="appeared while this run worked"):
        write_atomic(taken, b"ours", checked_at_start=True)
    assert taken.read_bytes() == THEIRS and kept(taken).read_bytes() == b"ours"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ---- every command that writes a file: the name appears during its run ----


@pytest.mark.slow
def test_extract_keeps_the_ticket_beside_a_file_that_appeared(tmp_path, monkeypatch):
    from ticketcli.runs import extract as runs_extract

    out = tmp_path / "o.safetensors"
    appears_during_the_run(monkeypatch, runs_extract, out)
    beside = assert_kept_beside(cli(*EXTRACT, "--out", str(out)), out)
    assert ticket_io.load(beside).masks  # the run's ticket, whole, and still a .safetensors name


def test_force_replaces_a_file_that_appeared(tmp_path, monkeypatch):
    from ticketcli.runs import extract as runs_extract

    out = tmp_path / "o.safetensors"
    appears_during_the_run(monkeypatch, runs_extract, out)
    run = cli(*EXTRACT, "--force", "--out", str(out))
    assert run.exit_code == 0, run.stderr
    assert ticket_io.load(out).masks and not kept(out).exists()


@pytest.mark.slow
def test_train_weak_keeps_its_weights_and_plot_beside(ticket, tmp_path, monkeypatch):
    from ticketcli.cli import train_weak as cli_train_weak
    from ticketcli.weak import run as weak_run

    out, png = tmp_path / "w.safetensors", tmp_path / "w.png"
    appears_during_the_run(monkeypatch, weak_run, out)
    assert_kept_beside(cli("train-weak", str(ticket), "--epochs", "1", *QUICK, "--out", str(out)), out)
    out.unlink()
    appears_during_the_run(monkeypatch, cli_train_weak, png)
    run = cli("train-weak", str(ticket), "--epochs", "1", *QUICK, "--plot", str(png))
    assert assert_kept_beside(run, png).read_bytes().startswith(b"\x89PNG")


def test_export_keeps_its_file_beside(ticket, tmp_path, monkeypatch):
    from ticketcli.export import request as export_request  # export_ticket's check, after the command line's

    out = tmp_path / "e.safetensors"
    appears_during_the_run(monkeypatch, export_request, out)
    assert_kept_beside(cli("export", str(ticket), "--format", "masked", "--out", str(out), "--quiet"), out)


@pytest.mark.slow
def test_drift_keeps_its_plot_beside(ticket, tmp_path, monkeypatch):
    from ticketcli.drift import command as drift_command

    png = tmp_path / "d.png"
    appears_during_the_run(monkeypatch, drift_command, png)
    run = cli("drift", "--ticket", str(ticket), "--steps", "1", *QUICK, "--plot", str(png))
    assert assert_kept_beside(run, png).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("suffix", [".safetensors", ".json", ".png"])
@pytest.mark.slow
def test_sweep_k_keeps_a_runs_ticket_record_or_plot_beside(suffix, tmp_path, monkeypatch):
    from ticketcli.sweep import outputs as sweep_outputs
    from ticketcli.sweep import run as sweep_run

    folder, png = tmp_path / "runs", tmp_path / "s.png"
    target = png if suffix == ".png" else folder / f"seed0-edge-popup-k0.5{suffix}"
    appears_during_the_run(monkeypatch, sweep_outputs if suffix == ".png" else sweep_run, target)
    assert_kept_beside(cli(*SWEEP, "--out-dir", str(folder), "--plot", str(png)), target)


# ---- one real process: the file appears while `python -m ticketcli extract` trains ----


@pytest.mark.slow
def test_a_real_extract_keeps_a_file_that_appeared_while_it_trained(tmp_path):
    out = tmp_path / "o.safetensors"
    ckpt = Path(f"{out}.ckpt")  # written after the start check, at the end of the first epoch
    args = [*EXTRACT[: EXTRACT.index("--epochs") + 1], "40", *EXTRACT[EXTRACT.index("--epochs") + 2 :]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen(
        [sys.executable, "-m", "ticketcli", *args, "--checkpoint-every", "1", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        while not ckpt.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGSTOP)  # hold it mid-run while the user's file appears
        assert ckpt.exists() and not out.exists(), "the run ended before the file could appear"
        out.write_bytes(THEIRS)
        os.kill(p.pid, signal.SIGCONT)
        _, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    lines = stderr.decode().strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, stderr
    beside = kept(out, p.pid)
    assert lines[0].startswith("error: ") and str(beside) in lines[0]
    assert out.read_bytes() == THEIRS and ticket_io.load(beside).masks
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".tmp")]


# ---- two sweep-k processes on one --out-dir ----

TWO = [*SWEEP[: SWEEP.index("--densities") + 1], "0.3,0.5", *SWEEP[SWEEP.index("--densities") + 2 :]]


def sweep_process(folder: Path, fresh: bool = False) -> subprocess.Popen:
    """sweep-k in a process of its own: a warm one (tests/warm.py), or a fresh one where the test kills it (a
    client killed by SIGKILL takes its warm child down only a moment later)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    python = [sys.executable] if fresh else warm.client(env)
    command = [*python, "-m", "ticketcli", *TWO, "--out-dir", str(folder), "--json"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(p: subprocess.Popen) -> dict:
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 0, stderr.decode()[-2000:]
    said = [line for line in stderr.decode().splitlines() if not line.startswith("sweep-k: waiting")]
    assert not "".join(said).strip(), stderr.decode()[-2000:]  # nothing but the notes of a wait on the other
    return json.loads(stdout)


def done_here(doc: dict) -> set[str]:
    return {r["id"] for r in doc["records"]} - set(doc["resumed"])


@pytest.mark.slow
def test_two_sweeps_on_one_folder_share_the_runs(tmp_path):
    folder = tmp_path / "runs"
    first, second = sweep_process(folder), sweep_process(folder)
    a, b = finish(first), finish(second)
    ids = {r["id"] for r in a["records"]}
    assert ids == {r["id"] for r in b["records"]} and len(ids) > 2  # each table covers every run
    assert not done_here(a) & done_here(b)  # no run done twice
    assert done_here(a) | done_here(b) == ids  # every run done
    assert {r["id"]: r["masks_sha256"] for r in a["records"]} == {r["id"]: r["masks_sha256"] for r in b["records"]}
    assert not list(folder.glob("*.claim")) and not list(folder.glob("*.tmp")) and not list(folder.glob(".*.tmp"))
    note = json.loads((folder / "sweep-outputs.json").read_text())["files"]
    assert {Path(p).name for p in note} == {f"{i}{s}" for i in ids for s in (".safetensors", ".json")}  # merged


@pytest.mark.slow
def test_a_claim_of_a_dead_sweep_is_taken_over(tmp_path):
    """A claim whose pid is gone on this host: the next sweep runs that run itself."""
    folder = tmp_path / "runs"
    folder.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    claim = {"run": "seed0-edge-popup-k0.5", "pid": gone.pid, "host": socket.gethostname(), "started": 0, "token": "x"}
    (folder / "seed0-edge-popup-k0.5.claim").write_text(json.dumps(claim))
    doc = finish(sweep_process(folder))
    assert "seed0-edge-popup-k0.5" in done_here(doc) and not doc["resumed"]
    assert not list(folder.glob("*.claim"))


@pytest.mark.slow
def test_a_sweep_killed_mid_way_leaves_claims_the_next_takes_over(tmp_path):
    folder = tmp_path / "runs"
    p = sweep_process(folder, fresh=True)
    try:
        deadline = time.monotonic() + 300
        while not list(folder.glob("*.claim")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
    left = {c.stem for c in folder.glob("*.claim")}  # the killed sweep's claims, unless it was between runs
    doc = finish(sweep_process(folder))
    assert left <= done_here(doc)
    assert {r["id"] for r in doc["records"]} == done_here(doc) | set(doc["resumed"])
    assert not list(folder.glob("*.claim"))


def claims_of(folder: Path, pid: int) -> set[str]:
    """The runs whose claim names `pid` (a claim being written or removed right now is skipped)."""
    held = set()
    for c in folder.glob("*.claim"):
        try:
            if json.loads(c.read_text()).get("pid") == pid:
                held.add(c.stem)
        except (OSError, ValueError):
            pass
    return held


@pytest.mark.slow
def test_of_two_sweeps_at_once_the_survivor_takes_over_the_killed_ones_runs(tmp_path):
    """Two sweeps on one folder at the same time, one killed while it holds a run: the other, still running,
    takes that run over once its claimant is dead, exits 0, and every run is done."""
    folder = tmp_path / "runs"
    victim = sweep_process(folder, fresh=True)  # fresh: the claim names this very pid
    survivor = None
    try:
        deadline = time.monotonic() + 300
        held: set[str] = set()
        while not held and victim.poll() is None and time.monotonic() < deadline:
            if claims_of(folder, victim.pid):
                os.kill(victim.pid, signal.SIGSTOP)  # frozen with its claim, so the takeover is certain
                held = claims_of(folder, victim.pid)
                if not held:  # released between the two looks: let it go on to its next run
                    os.kill(victim.pid, signal.SIGCONT)
            time.sleep(0.005)
        assert held, "the sweep to be killed never held a run"
        before = set(os.listdir(folder))
        survivor = sweep_process(folder)
        # at work beside the stopped sweep once the folder changes (or, with every other run done, waiting on it)
        waited = time.monotonic() + 20
        while set(os.listdir(folder)) == before and time.monotonic() < waited:
            time.sleep(0.005)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        doc = finish(survivor)
    finally:
        for p in (victim, survivor):
            if p is not None and p.poll() is None:
                p.kill()
    assert held <= done_here(doc)  # the killed sweep's run, done by the survivor
    assert {r["id"] for r in doc["records"]} == done_here(doc) | set(doc["resumed"])
    assert not list(folder.glob("*.claim"))


def test_a_claim_from_another_host_is_held_while_its_heartbeat_lasts_and_taken_once_it_stops(tmp_path, monkeypatch):
    """A claim whose pid cannot be asked about (another host) is held while its file's mtime is fresh, and taken
    over once the heartbeat has been missing for STALE_S; a live sweep's heartbeat keeps its own claims fresh."""
    from ticketcli.sweep import claims as sweep_claims

    run = "seed0-edge-popup-k0.5"
    path = sweep_claims.claim_path(tmp_path, run)
    path.write_text(json.dumps({"run": run, "pid": 1, "host": "another-host", "started": 0, "token": "theirs"}))
    with sweep_claims.Claims(tmp_path) as mine:
        assert mine.owner(run) is not None and not mine.take(run)  # beating: theirs
        old = time.time() - sweep_claims.STALE_S - 5
        os.utime(path, (old, old))
        assert mine.owner(run) is None and mine.take(run)  # ten heartbeats missed: ours now
        assert json.loads(path.read_text())["token"] == mine.token
    assert not path.exists()  # given back on the way out

    monkeypatch.setattr(sweep_claims, "HEARTBEAT_S", 0.02)
    with sweep_claims.Claims(tmp_path) as mine:
        assert mine.take(run)
        os.utime(path, (old, old))
        deadline = time.monotonic() + 30
        while path.stat().st_mtime < time.time() - sweep_claims.STALE_S and time.monotonic() < deadline:
            time.sleep(0.01)
        assert time.time() - path.stat().st_mtime < sweep_claims.STALE_S  # its heartbeat made it fresh again
