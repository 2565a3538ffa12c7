"""The environment is input too: torchrun variables left in a shell, absurd COLUMNS/LINES, a non-UTF-8 stdout, a
full stdout or stderr, an unbuffered stdout whose reader leaves mid-write, and paths (arguments, options,
$TICKET_DATA, $XDG_CACHE_HOME) that no system call could take. Each ends with its documented exit code and one
line, or the output it promised; the rendezvous cases use a short --rendezvous-timeout and stay fast."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from hostile import REPO, assert_clean, child, cli
from typer.main import get_command
from typer.testing import CliRunner

from ticketcli.cli.app import DATA_PARALLEL_COMMANDS, app
from ticketcli.report.console import ResultsStream

EXTRACT = ["extract", "--method", "random", "--dataset", "digits", "--model", "mlp:64-13-10", "--n-extract", "100"]
EXTRACT += ["--n-val", "50", "--device", "cpu", "--quiet"]
NO_TORCHRUN = {k: "" for k in ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def without_torchrun_vars() -> dict[str, str]:
    """The test process's environment without anything torchrun (or a developer's shell) may have left."""
    drop = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


# ---- torchrun variables --------------------------------------------------------------------------------------

# (case id, environment, words of the one line): every malformed or inconsistent torchrun environment
BAD_WORLDS = [
    ("world-size-huge", {"WORLD_SIZE": "1000000000"}, "WORLD_SIZE='1000000000' is not an integer in [1, 1024]"),
    ("world-size-zero", {"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    ("world-size-space", {"WORLD_SIZE": " 2"}, "WORLD_SIZE=' 2'"),
    ("world-size-plus", {"WORLD_SIZE": "+2"}, "WORLD_SIZE='+2'"),
    ("world-size-underscore", {"WORLD_SIZE": "1_0"}, "WORLD_SIZE='1_0'"),
    ("world-size-arabic-digit", {"WORLD_SIZE": "\u0662"}, "WORLD_SIZE="),
    ("world-size-5000-digits", {"WORLD_SIZE": "9" * 5000}, "WORLD_SIZE='9999"),
    ("rank-negative", {"WORLD_SIZE": "2", "RANK": "-1"}, "RANK='-1'"),
    ("rank-too-big", {"WORLD_SIZE": "2", "RANK": "2"}, "inconsistent torchrun environment"),
    ("local-rank-too-big", {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "2"}, "inconsistent"),
    ("local-world-too-big", {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "3"}, "inconsistent"),
    ("no-master", {"WORLD_SIZE": "2", "RANK": "0"}, "MASTER_ADDR and MASTER_PORT not set"),
    ("no-port", {"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1"}, "MASTER_PORT not set"),
    ("port-zero", {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}, "MASTER_PORT='0'"),
    ("port-huge", {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "65536"}, "MASTER_PORT='65536'"),
    ("addr-spaces", {"WORLD_SIZE": "2", "MASTER_ADDR": "a host", "MASTER_PORT": "29500"}, "MASTER_ADDR='a host'"),
    ("addr-escape", {"WORLD_SIZE": "2", "MASTER_ADDR": "\x1b[2J", "MASTER_PORT": "29500"}, "not a host name"),
]


@pytest.mark.parametrize("env, needle", [c[1:] for c in BAD_WORLDS], ids=[c[0] for c in BAD_WORLDS])
def test_a_bad_torchrun_environment_is_one_line_before_anything_starts(env, needle, tmp_path):
    out = tmp_path / "t.safetensors"
    run = cli(*EXTRACT, "--out", str(out), env={**NO_TORCHRUN, **env})
    assert_clean(run, 2, contains=needle, folder=tmp_path)
    assert not out.exists()


@pytest.mark.parametrize("seconds", ["0", "-1", "nan", "1e9"])
def test_the_rendezvous_timeout_is_ranged(seconds, tmp_path):
    assert_clean(cli(*EXTRACT, "--out", str(tmp_path / "t.safetensors"), "--rendezvous-timeout", seconds), 2)


def test_a_rank_without_a_rank_0_still_says_why_it_failed(ticket):
    """WORLD_SIZE=2 RANK=1 left in a shell: no rank 0 exists to report the shared error, so rank 1 does."""
    run = cli("evaluate", str(ticket), env={**NO_TORCHRUN, "WORLD_SIZE": "2", "RANK": "1"})
    assert_clean(run, 2, contains="(rank 1) `ticket evaluate` does not run under torchrun (WORLD_SIZE=2 RANK=1 are")


SINGLE_PROCESS = [c for c in get_command(app).commands if c not in DATA_PARALLEL_COMMANDS]  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", SINGLE_PROCESS)
def test_a_command_torchrun_does_not_run_names_the_variables_that_made_it_think_so(command, monkeypatch):
    """Variables an earlier job left in a shell make any command look like a torchrun rank: the one line names them
    (values quoted where they are not plain numbers) and says to unset them, before the command reads anything."""
    stale = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "node\n17", "MASTER_PORT": "29500"}
    for k in ("LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in stale.items():
        monkeypatch.setenv(k, v)
    r = CliRunner().invoke(app, [command, "no-such-argument"])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and line.startswith(f"error: `ticket {command}` does not run under torchrun"), line
    assert "(WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR='node\\n17' MASTER_PORT=29500 are set)" in line, line
    assert "unset WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT to run one process" in line, line


def test_a_rank_started_by_torchrun_leaves_shared_errors_to_rank_0(ticket):
    """Started by torchrun's agent (TORCHELASTIC_RUN_ID), rank 0 exists and says the same: rank 1 keeps quiet."""
    run = cli("evaluate", str(ticket), env={"WORLD_SIZE": "2", "RANK": "1", "TORCHELASTIC_RUN_ID": "job"})
    assert_clean(run, 2, prefix=None)


@pytest.mark.parametrize("rank", ["0", "1"])
@pytest.mark.slow
def test_a_lone_process_gives_up_the_rendezvous_at_the_timeout(rank, tmp_path):
    """Nobody else joins: rank 0 (hosting the store) and rank 1 (connecting) give up after --rendezvous-timeout
    with one line, not after torch's 30 minutes, and without torch's C++ connection logs."""
    env = {"WORLD_SIZE": "2", "RANK": rank, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    run = child(*EXTRACT, "--out", str(tmp_path / "t.safetensors"), "--rendezvous-timeout", "1", env=env, timeout=90)
    prefix = "" if rank == "0" else "(rank 1) "
    assert_clean(run, 2, contains=f"{prefix}no one else joined the torchrun job", folder=tmp_path)


class _SilentListener:
    """Something else listening at a stale MASTER_PORT: it accepts connections and never says a word (an old job's
    hung store, an unrelated service), so torch's store handshake would wait for an answer forever."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        try:
            while True:
                conn = self.server.accept()[0]
                self.held.append(conn)
                self.answer(conn)
        except OSError:
            return  # closed

    def answer(self, conn: socket.socket) -> None:
        """Say nothing (a subclass answers)."""

    def close(self) -> None:
        self.server.close()
        for c in self.held:
            c.close()


class _TalkingListener(_SilentListener):
    """Something at a stale MASTER_PORT that speaks another protocol: a web server or a proxy answering each
    request with an HTTP error. torch's store handshake then fails and retries, logging a C++ stack each time."""

    def answer(self, conn: socket.socket) -> None:
        def reply() -> None:
            try:
                while conn.recv(4096):
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            except OSError:
                return

        threading.Thread(target=reply, daemon=True).start()


# TEST-NET-1 (RFC 5737): never routed, so a connection there fails, hangs or meets whatever a sandbox's network
# puts there (a proxy answering HTTP, here), and each of those must end the same way
UNROUTED = "192.0.2.1"
UNRESOLVABLE = "node-17.invalid"  # .invalid never resolves (RFC 2606): an old job's host name, gone from the DNS
LISTENERS = {"silent": _SilentListener, "talking": _TalkingListener}


@pytest.mark.parametrize(
    "rank, listener",
    [
        ("0", "nobody"),
        ("1", "nobody"),
        ("1", "silent"),
        ("1", "talking"),
        ("0", "talking"),
        ("0", "unrouted"),
        ("0", "unresolvable"),
    ],
)
@pytest.mark.slow
def test_a_stale_torchrun_environment_ends_at_the_timeout_naming_the_variables(rank, listener, tmp_path):
    """Every torchrun variable left in a shell by an earlier job: whatever waits or answers (the store's listener,
    a port that never answers, one that answers in another protocol, a MASTER_ADDR that is not this machine and
    leads nowhere or does not resolve, the other ranks) gives up at --rendezvous-timeout with exit 2 and one line
    naming the variables to unset: none of torch's C++ logs, and no abort when its store code returns after the
    give-up. The child's timeout is the failure: it must return."""
    other = LISTENERS[listener]() if listener in LISTENERS else None
    port = other.port if other else free_port()
    addr = {"unrouted": UNROUTED, "unresolvable": UNRESOLVABLE}.get(listener, "127.0.0.1")
    env = {**NO_TORCHRUN, "MASTER_ADDR": addr, "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    env |= {"RANK": rank, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": "2"}
    try:
        out = str(tmp_path / "t.safetensors")
        run = child(*EXTRACT, "--out", out, "--rendezvous-timeout", "2", env=env, timeout=90)
    finally:
        if other:
            other.close()
    assert_clean(run, 2, contains="the torchrun job at", folder=tmp_path)
    line = run.stderr.strip()
    for name in (f"MASTER_ADDR={addr}", f"MASTER_PORT={port}", "WORLD_SIZE=2", f"RANK={rank}", "LOCAL_RANK="):
        assert name in line, line


@pytest.mark.parametrize("sig", [signal.SIGINT], ids=lambda s: s.name)  # SIGTERM takes the same path
@pytest.mark.slow
def test_a_signal_ends_a_waiting_rendezvous(sig, tmp_path):
    """Rank 0 waits for a rank 1 that never comes (the default timeout): once its store listens, a signal ends
    the wait at once with 128 + the signal and one line."""
    port = free_port()
    env = {
        **without_torchrun_vars(),
        "PYTHONPATH": str(REPO),
        "WORLD_SIZE": "2",
        "RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    p = subprocess.Popen(
        [sys.executable, "-m", "ticketcli", *EXTRACT, "--out", str(tmp_path / "t.safetensors")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and p.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break  # the store listens: rank 0 is inside the rendezvous
            except OSError:
                time.sleep(0.1)
        assert p.poll() is None, p.communicate()[1].decode()
        p.send_signal(sig)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    lines = err.decode().strip().splitlines()
    assert p.returncode == 128 + sig, (p.returncode, lines)
    assert len(lines) == 1 and lines[0].startswith(f"error: interrupted by {sig.name}"), lines


# ---- output streams --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", ["0", "1", "-5", "abc", "99999999999", ""])
def test_absurd_columns_still_print_the_table(columns, ticket):
    run = cli("inspect", str(ticket), env={"COLUMNS": columns, "LINES": columns})
    assert_clean(run, 0, prefix=None)
    normal = cli("inspect", str(ticket), env={"COLUMNS": "80"}).stdout
    densities = [w for w in normal.split() if w.endswith("%")]
    assert len(densities) >= 4 and all(d in run.stdout for d in densities)  # every row is there, however narrow


def test_columns_zero_still_prints_evaluate(ticket):
    run = cli("evaluate", str(ticket), "--device", "cpu", env={"COLUMNS": "0"})
    assert_clean(run, 0, prefix=None)
    assert "reproduces the stored accuracy exactly" in run.stdout and run.stdout.count("%") >= 5


@pytest.mark.parametrize("encoding", ["ascii", "latin-1", "cp1252"])
@pytest.mark.slow
def test_a_non_utf8_stdout_escapes_instead_of_failing(encoding, ticket, tmp_path):
    run = child("inspect", str(ticket), env={"PYTHONIOENCODING": encoding, "COLUMNS": "60"})
    assert_clean(run, 0, prefix=None)
    assert "layers.0.weight" in run.stdout
    bad = tmp_path / "caf\u00e9\u2026.safetensors"  # the error line quotes a non-ASCII path
    assert_clean(child("inspect", str(bad), env={"PYTHONIOENCODING": encoding}), 2, contains="caf")


@pytest.mark.parametrize("args", [["inspect", "{t}"], ["inspect", "{t}", "--json"], ["evaluate", "{t}", "--json"]])
@pytest.mark.slow
def test_a_full_stdout_is_one_line_and_exit_2(args, ticket):
    run = child(*(a.format(t=ticket) for a in args), stdout_file="/dev/full")
    assert_clean(run, 2, contains="cannot write the results to stdout: No space left on device")


@pytest.mark.slow
def test_a_full_stderr_keeps_the_exit_code(tmp_path):
    """2>/dev/full: the error line cannot be written, the exit code is still the error's (2, not 1 or 120)."""
    assert child("inspect", str(tmp_path / "missing.safetensors"), stderr_file="/dev/full").exit_code == 2


def test_an_unbuffered_stdout_does_not_drop_a_partial_write():
    """python -u / PYTHONUNBUFFERED: the text layer writes to the raw file and drops what a partial write left
    over (a reader that leaves mid-write), so the run would end 0 with its output cut. ResultsStream writes every
    byte or raises the pipe error (exit 141)."""
    r, w = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(w, "w"), encoding="utf-8", write_through=True)  # what -u makes stdout

    def read_one_byte_and_leave() -> None:
        os.read(r, 1)
        os.close(r)

    reader = threading.Thread(target=read_one_byte_and_leave)
    reader.start()
    with pytest.raises(BrokenPipeError):
        ResultsStream(stream).write("x" * (1 << 20))  # more than a pipe holds
    reader.join()
    stream.close()


def test_an_unbuffered_stdout_writes_everything():
    """The oracle: through a pipe that is read to the end, every byte arrives once, in order."""
    r, w = os.pipe()
    stream = io.TextIOWrapper(io.FileIO(w, "w"), encoding="utf-8", write_through=True)
    text = "".join(f"{i}\u2026\n" for i in range(100_000))
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(io.FileIO(r, "r").readall()))
    reader.start()
    assert ResultsStream(stream).write(text) == len(text)
    stream.close()
    reader.join()
    assert got.decode("utf-8") == text


# ---- paths no system call could take ------------------------------------------------------------------------

LONG = "a/" * 2500  # 5000 bytes: past PATH_MAX
WIDE = "b" * 300  # one name past NAME_MAX


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["inspect", LONG], {}, "TICKETS a/a/"),
        (["inspect", WIDE], {}, "more than NAME_MAX (255)"),
        (["evaluate", "{t}", "--data-dir", LONG], {}, "--data-dir a/a/"),
        (["export", "{t}", "--format", "masks", "--out", WIDE], {}, "--out bbb"),
        (["evaluate", "{t}"], {"TICKET_DATA": LONG}, "$TICKET_DATA a/a/"),
        (["evaluate", "{t}"], {"XDG_CACHE_HOME": WIDE}, "$XDG_CACHE_HOME bbb"),
    ],
    ids=["ticket-long", "ticket-wide-name", "data-dir", "out-wide-name", "TICKET_DATA", "XDG_CACHE_HOME"],
)
def test_impossible_paths_are_one_line(args, env, needle, ticket, tmp_path):
    run = cli(*(a.format(t=ticket) for a in args), env=env)
    assert_clean(run, 2, contains=needle, folder=tmp_path)
    assert len(run.stderr) < 500  # the path is shortened in the line, not printed whole


def test_a_nul_byte_in_a_config_path_is_one_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('data_dir = "x\\u0000y"\n')
    run = cli(*EXTRACT, "--config", str(config), "--out", str(tmp_path / "t.safetensors"))
    assert_clean(run, 2, folder=tmp_path)
