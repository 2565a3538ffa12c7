"""A claim's word is checked, never taken: a `.claim` in a shared --out-dir whose fields a sweep does not write (a
pid this host cannot have, wrong types, a run of another name), whose start or heartbeat time is in the future, or
that is a symlink or not a regular file is no live claim, and the sweep takes the run over; honest claims are held
as before (a live pid here, a fresh heartbeat from another host). The wait for another process's lock on the
folder is bounded (exit 2, one line naming the holder), and while a sweep waits (on a claim or the lock) it says
so on stderr, soon and then every so often, naming what it waits for and how to take it over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostile import QUICK_SWEEP as SWEEP
from hostile import assert_clean, cli

from ticketcli.sweep import claims as sweep_claims
from ticketcli.sweep import outputs as sweep_outputs

RUN = "seed0-random"
HERE = socket.gethostname()


def honest(**fields: object) -> dict[str, object]:
    """A claim as a sweep writes it (another host's, unless `host` says), with `fields` changed."""
    return {"run": RUN, "pid": 4242, "host": "another-host", "started": time.time() - 5, "token": "theirs", **fields}


def put(folder: Path, doc: object, mtime: float | None = None) -> Path:
    path = sweep_claims.claim_path(folder, RUN)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def taken_over(folder: Path, path: Path) -> None:
    """No live claim on RUN: this sweep's own now, what was there replaced (never followed)."""
    with sweep_claims.Claims(folder) as mine:
        assert mine.owner(RUN) is None
        assert mine.take(RUN)
        assert not path.is_symlink() and json.loads(path.read_text())["token"] == mine.token
    assert not os.path.lexists(path)


@pytest.fixture
def sleeper():
    """A live process of this host that is not a sweep's (its pid is a plausible, live claimant)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p
    p.kill()
    p.wait()


def gone_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except OSError:
        return 1 << 22


# ---- honest claims are held, as before ----


def test_honest_claims_are_held(tmp_path, sleeper):
    with sweep_claims.Claims(tmp_path) as mine:
        put(tmp_path, honest())  # another host, heartbeat fresh
        assert mine.owner(RUN) is not None and not mine.take(RUN)
        put(tmp_path, honest(host=HERE, pid=sleeper.pid, started=time.time()))  # this host, pid alive
        assert mine.owner(RUN) is not None and not mine.take(RUN)
        put(tmp_path, honest(started=0))  # started long ago, still beating
        assert mine.owner(RUN) is not None


# ---- what a claim says is validated ----


@pytest.mark.parametrize(
    "pid",
    [1, 0, -1, -4242, "pid_max+1", "pid_max*8", 2**31, 2**63, "gone"],
)
def test_a_pid_this_host_cannot_have_or_that_is_not_alive_is_no_claim(tmp_path, pid):
    pid = {"pid_max+1": pid_max() + 1, "pid_max*8": pid_max() * 8, "gone": gone_pid()}.get(pid, pid)
    taken_over(tmp_path, put(tmp_path, honest(host=HERE, pid=pid)))


@pytest.mark.parametrize(
    "fields",
    [
        {"pid": "4242"},
        {"pid": 4242.0},
        {"pid": True},
        {"pid": None},
        {"pid": 0},
        {"pid": -7},
        {"pid": 2**64},
        {"host": ""},
        {"host": 7},
        {"host": "h" * 300},
        {"token": ""},
        {"token": ["x"]},
        {"token": "t" * 500},
        {"run": "seed0-fixed"},
        {"run": None},
        {"started": "0"},
        {"started": -1},
        {"started": True},
        {"started": "future"},
        {"started": 4102444800},  # 2100-01-01
        {"extra": 1},
    ],
)
def test_fields_a_sweep_does_not_write_are_no_claim(tmp_path, fields):
    doc = honest(**fields)
    if fields.get("started") == "future":
        doc["started"] = time.time() + 3600
    taken_over(tmp_path, put(tmp_path, doc))


@pytest.mark.parametrize("missing", ["run", "pid", "host", "started", "token"])
def test_a_claim_missing_a_field_is_no_claim(tmp_path, missing):
    doc = honest()
    del doc[missing]
    taken_over(tmp_path, put(tmp_path, doc))


@pytest.mark.parametrize(
    "text",
    ["[]", "null", "4242", '"claim"', "{", "", '{"run": NaN}', "\x00" * 10, pytest.param("{} " * 3000, id="too-big")],
)
def test_what_is_not_a_json_claim_is_no_claim(tmp_path, text):
    taken_over(tmp_path, put(tmp_path, text))


def test_a_nan_start_is_no_claim(tmp_path):
    text = '{"run": "seed0-random", "pid": 4242, "host": "another-host", "started": NaN, "token": "theirs"}'
    taken_over(tmp_path, put(tmp_path, text))


@pytest.mark.parametrize("before", [0, 3600, 86400 * 30])
def test_a_live_pid_that_started_after_its_claim_is_no_claim(tmp_path, sleeper, before):
    """A live process of this host born after the claim's start did not write it (a reused or a named pid)."""
    if not Path(f"/proc/{sleeper.pid}/stat").exists():
        pytest.skip("the system does not say when a process started")
    taken_over(tmp_path, put(tmp_path, honest(host=HERE, pid=sleeper.pid, started=before and time.time() - before)))


# ---- a time in the future is stale ----


@pytest.mark.parametrize("ahead", [60, 3600, 86400 * 365, 86400 * 365 * 80])
@pytest.mark.parametrize("host", ["another-host", "here"])
def test_a_heartbeat_in_the_future_is_stale(tmp_path, sleeper, ahead, host):
    doc = honest() if host == "another-host" else honest(host=HERE, pid=sleeper.pid)
    taken_over(tmp_path, put(tmp_path, doc, mtime=time.time() + ahead))


@pytest.mark.parametrize("ahead", [60, 86400 * 365 * 80])
def test_a_start_in_the_future_is_stale(tmp_path, ahead):
    taken_over(tmp_path, put(tmp_path, honest(started=time.time() + ahead)))


# ---- a symlinked (or not regular) claim is refused, never followed ----


@pytest.mark.parametrize("target", ["fresh-claim", "dangling", "folder", "fifo", "self", "dev-null"])
def test_a_claim_that_is_a_symlink_is_not_followed(tmp_path, target):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "sw"
    folder.mkdir()
    path = sweep_claims.claim_path(folder, RUN)
    real = elsewhere / "claim.json"
    if target == "fresh-claim":
        real.write_text(json.dumps(honest()))  # a live claim of another host, fresh: held if it were followed
    elif target == "folder":
        real = elsewhere
    elif target == "fifo":
        os.mkfifo(real)
    elif target == "self":
        real = path
    elif target == "dev-null":
        real = Path(os.devnull)
    before = real.read_text() if target == "fresh-claim" else None
    os.symlink(real, path)
    taken_over(folder, path)
    if before is not None:
        assert real.read_text() == before  # the link's target is left alone


def test_a_claim_that_is_a_fifo_is_no_claim(tmp_path):
    path = sweep_claims.claim_path(tmp_path, RUN)
    os.mkfifo(path)
    taken_over(tmp_path, path)


def test_the_heartbeat_never_touches_what_a_link_points_at(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_claims, "HEARTBEAT_S", 0.02)
    theirs = tmp_path / "theirs"
    theirs.write_text("x")
    old = time.time() - 10_000
    os.utime(theirs, (old, old))
    with sweep_claims.Claims(tmp_path) as mine:
        assert mine.take(RUN)
        path = sweep_claims.claim_path(tmp_path, RUN)
        path.unlink()
        os.symlink(theirs, path)  # our claim swapped for a link while we hold the run
        time.sleep(0.2)
    assert theirs.stat().st_mtime == pytest.approx(old, abs=1)
    path.unlink(missing_ok=True)


# ---- sweep-k itself: runs forged claims' runs itself, announces its waits, bounds the lock wait ----


@pytest.mark.slow
@pytest.mark.parametrize("forged", ["future-mtime", "pid-past-range", "symlink"])
def test_sweep_k_runs_a_forged_claims_run_itself(tmp_path, forged):
    folder = tmp_path / "sw"
    folder.mkdir()
    if forged == "future-mtime":
        put(folder, honest(pid=4242, host="elsewhere", started=0), mtime=time.time() + 86400 * 30)
    elif forged == "pid-past-range":
        put(folder, honest(host=HERE, pid=2**40))  # past any pid_max (and C's pid_t)
    else:
        (tmp_path / "fresh").write_text(json.dumps(honest()))
        os.symlink(tmp_path / "fresh", sweep_claims.claim_path(folder, RUN))
    t0 = time.monotonic()
    run = cli(*SWEEP, "--out-dir", str(folder), "--json")
    assert run.exit_code == 0 and not run.stderr.strip(), run.stderr[-2000:]
    assert time.monotonic() - t0 < 120
    doc = json.loads(run.stdout)
    assert RUN in {r["id"] for r in doc["records"]} and not doc["resumed"]
    assert not list(folder.glob("*.claim"))


@pytest.mark.slow
def test_a_sweep_waiting_on_a_claim_says_what_it_waits_for_until_it_takes_it_over(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_claims, "STALE_S", 2.0)
    monkeypatch.setattr(sweep_outputs, "NOTE_FIRST_S", 0.1)
    monkeypatch.setattr(sweep_outputs, "NOTE_EVERY_S", 0.5)
    folder = tmp_path / "sw"
    folder.mkdir()
    path = put(folder, honest(pid=31337, host="far-away"))
    # The other sweep beats until this one has said once what it waits for, then dies: its claim goes stale 2 s
    # after that first note, however long this sweep took to start (seconds on a loaded machine), so the notes
    # every 0.5 s in between always come.
    noted = threading.Event()
    tick = sweep_outputs.Waiting.tick

    def tick_and_tell(self, line):
        tick(self, line)
        if self._next > self.since + sweep_outputs.NOTE_FIRST_S:
            noted.set()

    monkeypatch.setattr(sweep_outputs.Waiting, "tick", tick_and_tell)

    def beat():
        while not noted.wait(0.2):
            os.utime(path)

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    try:
        run = cli(*SWEEP, "--out-dir", str(folder), "--json")
    finally:
        noted.set()
        beating.join()
    assert run.exit_code == 0, run.stderr[-2000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) >= 2, run.stderr  # the first soon, then every NOTE_EVERY_S
    for line in lines:
        assert line.startswith("sweep-k: waiting") and RUN in line and str(path) in line, line
        assert "pid 31337 on far-away" in line and f"remove {path}" in line, line
    doc = json.loads(run.stdout)
    assert RUN in {r["id"] for r in doc["records"]} and not doc["resumed"]


@pytest.fixture
def locked(tmp_path):
    """--out-dir whose lock another process holds (and keeps)."""
    folder = tmp_path / "sw"
    folder.mkdir()
    code = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX)"
    command = [sys.executable, "-c", code + "; print(1, flush=True); time.sleep(120)", str(folder)]
    holder = subprocess.Popen(command, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"1"
    yield folder, holder
    holder.kill()
    holder.wait()


@pytest.mark.parametrize("bound", [0.3, 1.0])
def test_the_wait_for_the_folders_lock_is_bounded(locked, monkeypatch, bound):
    folder, holder = locked
    monkeypatch.setattr(sweep_outputs, "LOCK_WAIT_S", bound)
    monkeypatch.setattr(sweep_outputs, "NOTE_FIRST_S", 60.0)
    t0 = time.monotonic()
    run = cli(*SWEEP, "--out-dir", str(folder))
    assert time.monotonic() - t0 < bound + 20
    assert_clean(run, 2, contains=f"locked by pid {holder.pid}", folder=folder)
    assert "another --out-dir" in run.stderr
    assert os.listdir(folder) == []


def test_a_sweep_waiting_for_the_lock_says_so_then_gives_up(locked, monkeypatch):
    folder, holder = locked
    monkeypatch.setattr(sweep_outputs, "LOCK_WAIT_S", 1.2)
    monkeypatch.setattr(sweep_outputs, "NOTE_FIRST_S", 0.1)
    monkeypatch.setattr(sweep_outputs, "NOTE_EVERY_S", 0.4)
    run = cli(*SWEEP, "--out-dir", str(folder))
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.exit_code == 2 and "Traceback" not in run.stderr, run.stderr
    waits, last = lines[:-1], lines[-1]
    assert len(waits) >= 2, run.stderr
    for line in waits:
        assert line.startswith("sweep-k: waiting") and str(folder) in line and f"pid {holder.pid}" in line, line
        assert "stop that process, or use another --out-dir" in line, line
    assert last.startswith("error:") and f"locked by pid {holder.pid}" in last, last
