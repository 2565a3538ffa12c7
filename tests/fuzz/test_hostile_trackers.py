"""What a --log-to store says is untrusted: a destination is absent, an existing store of its tracker, or refused with
one line and exit 2 before any work. An MLflow store (a folder's meta.yaml files, a SQLite file's `experiments` and
`runs` tables) whose experiment `ticket` or any run keeps its artifacts anywhere but a local path inside the store is
refused, and no connection is made to the address it names; a file that is not an MLflow store (empty, another
program's database, any bytes) and a FIFO, a device or a socket are refused, --force or not, and left unchanged.
The trackers' waits are bounded and announced, and no MLflow writer process outlives the command."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hostile import assert_clean, cli, snapshot

from ticketcli.settings.track import parse_destination
from ticketcli.track import base as track
from ticketcli.track import mlflow_process
from ticketcli.track.info import RunInfo

FAST_EXTRACT = ["--method", "random", "--dataset", "digits", "--model", "mlp:64-13-10", "--n-extract", "100"]
FAST_EXTRACT += ["--n-val", "50", "--quiet", "--device", "cpu"]
RUN = "0123456789abcdef0123456789abcdef"


class Listener:
    """A loopback TCP server counting the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port, self.count, self.stop = self.sock.getsockname()[1], 0, False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.count += 1
            conn.close()

    def close(self) -> int:
        self.stop = True
        self.thread.join(5)
        self.sock.close()
        return self.count


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def elsewhere(tmp_path: Path, port: int) -> list[str]:
    """Artifact locations that are not a local path inside a store under tmp_path/in."""
    return [
        f"http://127.0.0.1:{port}/art",
        f"https://127.0.0.1:{port}/a",
        f"s3://127.0.0.1:{port}/bucket",
        f"file://127.0.0.1:{port}/share",
        (tmp_path / "outside").as_uri(),
        str(tmp_path / "outside" / "art"),
        str(tmp_path / "in" / ".." / "outside"),
        "",
    ]


def sqlite_store(db: Path, experiment: str, run: str) -> None:
    """A SQLite file with MLflow's tables (the columns read here) and one experiment `ticket` with one run."""
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE alembic_version (version_num TEXT)")
    con.execute("CREATE TABLE experiments (experiment_id INTEGER, name TEXT, artifact_location TEXT)")
    con.execute("CREATE TABLE runs (run_uuid TEXT, experiment_id INTEGER, artifact_uri TEXT)")
    con.execute("INSERT INTO experiments VALUES (0, 'Default', ?)", (str(db.parent.parent / "mlruns" / "0"),))
    con.execute("INSERT INTO experiments VALUES (1, 'ticket', ?)", (experiment,))
    con.execute("INSERT INTO runs VALUES (?, 1, ?)", (RUN, run))
    con.commit()
    con.close()


def folder_store(folder: Path, experiment: str, run: str) -> None:
    """An MLflow folder store: the experiment `ticket` (id 7) and one run, as their meta.yaml files say."""
    (folder / ".trash").mkdir(parents=True)
    (folder / "7" / RUN).mkdir(parents=True)
    (folder / "7" / "meta.yaml").write_text(f"artifact_location: '{experiment}'\nexperiment_id: '7'\nname: ticket\n")
    (folder / "7" / RUN / "meta.yaml").write_text(f"artifact_uri: '{run}'\nexperiment_id: '7'\nrun_id: {RUN}\n")


def extract(tmp_path: Path, *log_to: str, force: bool = False):
    args = ["extract", *FAST_EXTRACT, "--out", str(tmp_path / "t.safetensors")]
    for d in log_to:
        args += ["--log-to", d]
    return cli(*args, *(["--force"] if force else []))


@pytest.mark.parametrize("kind", ["sqlite", "folder"])
@pytest.mark.parametrize("where", ["experiment", "run"])
def test_a_store_that_keeps_artifacts_elsewhere_is_refused_without_a_connection(kind, where, tmp_path, listener):
    inside = tmp_path / "in"
    inside.mkdir()
    for i, bad in enumerate(elsewhere(tmp_path, listener.port)):
        local = (inside / f"s{i}" / "art").as_uri()
        experiment, run = (bad, local) if where == "experiment" else (local, bad)
        if kind == "sqlite":
            store = inside / f"m{i}.db"
            sqlite_store(store, experiment, run)
            dest = f"mlflow:sqlite:///{store}"
        else:
            store = inside / f"store{i}"
            folder_store(store, experiment, run)
            dest = f"mlflow:{store}"
        before = snapshot(*sorted(p for p in store.rglob("*") if p.is_file()), *([store] if store.is_file() else []))
        r = extract(tmp_path / "in", dest)
        assert_clean(r, contains="not inside the store", unchanged=before)
        assert r.seconds < 10 and not (tmp_path / "in" / "t.safetensors").exists()
    assert listener.close() == 0


def test_a_store_whose_artifacts_stay_inside_it_is_accepted(tmp_path):
    """The check is not a blanket refusal: the same stores with local locations inside them pass it (before any
    work, without opening MLflow)."""
    for kind in ("sqlite", "folder"):
        art = (tmp_path / kind / "art").as_uri()
        if kind == "sqlite":
            (tmp_path / kind).mkdir()
            sqlite_store(tmp_path / kind / "m.db", art, str(tmp_path / kind / "art" / RUN))
            dest = f"mlflow:sqlite:///{tmp_path / kind / 'm.db'}"
        else:
            folder_store(tmp_path / kind, art, art + "/" + RUN)
            dest = f"mlflow:{tmp_path / kind}"
        assert track.check([dest]) == (parse_destination(dest),)


def not_a_store(path: Path, what: str) -> None:
    if what == "empty":
        path.write_bytes(b"")
    elif what == "bytes":
        path.write_bytes(os.urandom(3000))
    elif what == "text":
        path.write_text("SQLite format 3 is what this note is about\n" * 20)
    else:  # another program's database
        con = sqlite3.connect(path)
        con.execute(f"CREATE TABLE {what} (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute(f"INSERT INTO {what} (body) VALUES ('mine')")
        con.commit()
        con.close()


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("what", ["empty", "bytes", "text", "notes", "experiments"])
def test_a_file_that_is_not_an_mlflow_store_is_never_written_into(what, force, tmp_path):
    db = tmp_path / "notebook.db"
    not_a_store(db, what)
    before = snapshot(db)
    r = extract(tmp_path, f"mlflow:sqlite:///{db}", force=force)
    assert_clean(r, contains="--log-to mlflow:sqlite:///", unchanged=before)
    assert not (tmp_path / "notebook-artifacts").exists()


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_a_folder_that_is_not_a_store_or_a_file_for_a_folder_is_refused(force, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "afile").write_text("mine")
    for dest in ("mlflow:notes", "mlflow:afile", "tensorboard:afile", f"mlflow:file://{tmp_path / 'afile'}"):
        before = snapshot(tmp_path / "notes" / "todo.txt", tmp_path / "afile")
        r = extract(tmp_path, dest.replace("notes", str(tmp_path / "notes")).replace(":afile", f":{tmp_path}/afile"))
        assert_clean(r, unchanged=before)


def special(tmp_path: Path, what: str) -> tuple[Path, object]:
    """A FIFO, a socket or a device at a path (the socket is kept open while the test runs)."""
    if what == "device":
        return Path(os.devnull), None
    path = tmp_path / f"{what}.db"
    if what == "fifo":
        os.mkfifo(path)
        return path, None
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return path, sock


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("what", ["fifo", "socket", "device"])
def test_a_fifo_a_socket_or_a_device_is_refused_without_opening_it(what, force, tmp_path):
    path, keep = special(tmp_path, what)
    try:
        for dest in (f"mlflow:sqlite:///{path}", f"mlflow:{path}", f"tensorboard:{path}"):
            r = extract(tmp_path, dest, force=force)
            assert_clean(r, contains=f"--log-to {dest}")
            assert r.seconds < 10
    finally:
        if keep is not None:
            keep.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("side", ["-wal", "-journal"])
def test_a_store_beside_a_fifo_sqlite_would_open_is_refused(side, tmp_path):
    db = tmp_path / "m.db"
    art = (tmp_path / "m-artifacts").as_uri()
    sqlite_store(db, art, f"{art}/{RUN}")
    os.mkfifo(tmp_path / f"m.db{side}")
    r = extract(tmp_path, f"mlflow:sqlite:///{db}")
    assert_clean(r, contains="not a regular file")
    assert r.seconds < 10


def test_a_symlink_loop_as_a_destination_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for dest in (f"mlflow:sqlite:///{tmp_path / 'a'}", f"mlflow:{tmp_path / 'a'}", f"tensorboard:{tmp_path / 'a'}"):
        assert_clean(extract(tmp_path, dest), contains=f"--log-to {dest}")


@pytest.fixture
def stuck_writer(monkeypatch):
    """A writer process that never opens its store (stuck as if on a FIFO or a dead server), with short waits;
    yields the writer processes started."""
    procs: list[subprocess.Popen[bytes]] = []
    real = mlflow_process.Channel.__init__

    def recording(self):
        real(self)
        procs.append(self.proc)

    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    monkeypatch.setattr(mlflow_process, "writer_command", lambda: sleeper)
    monkeypatch.setattr(mlflow_process.Channel, "__init__", recording)
    monkeypatch.setattr(track, "WAIT_S", 1.5)
    monkeypatch.setattr(track, "WAIT_INTERRUPTED_S", 1.0)
    monkeypatch.setattr(track, "ANNOUNCE_S", 0.5)
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


@pytest.mark.parametrize("end", ["normal", "error", "interrupt"])
def test_no_writer_outlives_the_command_and_every_wait_is_announced(end, stuck_writer, tmp_path):
    warnings: list[str] = []
    dests = [parse_destination(f"mlflow:sqlite:///{tmp_path / 'm.db'}")]
    failure = {"normal": None, "error": RuntimeError("boom"), "interrupt": KeyboardInterrupt()}[end]
    try:
        with track.tracked(dests, lambda: RunInfo("r"), warnings.append) as t:
            assert t is not None
            t.scalars(1, {"x": 1.0})
            if failure is not None:
                raise failure
    except (RuntimeError, KeyboardInterrupt):
        pass
    assert stuck_writer and all(p.poll() is not None for p in stuck_writer), "a writer process outlived the command"
    assert any(w.startswith("--log-to: waiting up to ") for w in warnings), warnings
    assert warnings[-1].startswith("--log-to: the trackers did not finish writing within "), warnings
