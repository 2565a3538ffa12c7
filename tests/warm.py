"""Warm `python` processes for tests: children of a fork server (tests/docserver.py) that imported torch,
torch._dynamo and ticketcli once, instead of fresh interpreters that spend seconds of CPU each on
those imports before the command starts. A warm child is a real process with the client's arguments, working
directory, environment, file descriptors and umask; the client forwards signals to it and ends as it ended.

Use one where the test's subject is what a command does once it runs (a signal mid-training, a resume, two runs
racing): `client(env)` is the command line that stands for `python` in `env`. Keep a fresh process where start-up
itself is the subject (imports, a signal during start-up, variables read at start-up: a client whose start-up
variables differ from its server's execs a fresh one anyway), where the command's own peak memory or pid is
checked (a warm child's memory includes the server's pages and its pid is not the client's), and for SIGSTOP,
which a client cannot forward."""

from __future__ import annotations

import atexit
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from docserver import startup_env

SERVER = Path(__file__).with_name("docserver.py")
SERVER_START = 300.0  # seconds for the fork server to import torch and ticketcli on a loaded machine


class ForkServer:
    """docserver.py's server for this test process, on a socket in a fresh temporary directory, started in the
    environment `env(directory)` when first needed and stopped by `stop` (or when this process ends)."""

    def __init__(self, env: Callable[[Path], dict[str, str]]) -> None:
        self.env = env
        self.dir = Path(tempfile.mkdtemp(prefix="ticket-fork-"))  # short: a socket's path has ~100 bytes at most
        self.socket = self.dir / "server.sock"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ForkServer:
        if self.proc is None:
            log = (self.dir / "server.log").open("w")
            self.proc = subprocess.Popen(
                [sys.executable, str(SERVER), "serve", str(self.socket)],
                env=self.env(self.dir),
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            ready = select.select([self.proc.stdout], [], [], SERVER_START)[0]
            if not ready or self.proc.stdout is None or self.proc.stdout.readline() != "ready\n":
                self.stop()
                raise RuntimeError(f"the fork server did not start: {(self.dir / 'server.log').read_text()}")
        return self

    def client(self) -> list[str]:
        """The command line that stands for `python` (followed by `-m MODULE`, `-c CODE` or `SCRIPT` and its
        arguments) as this server's child."""
        self.start()
        return [sys.executable, "-S", "-E", str(SERVER), "client", str(self.socket)]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_SERVERS: dict[tuple[tuple[str, str], ...], ForkServer] = {}


def server(env: dict[str, str]) -> ForkServer:
    """This test process's fork server for `env`'s start-up variables (one per distinct set, started on first
    use, stopped when the process exits)."""
    key = tuple(sorted(startup_env(env).items()))
    if key not in _SERVERS:
        _SERVERS[key] = ForkServer(lambda _dir: dict(env))
        atexit.register(_SERVERS[key].stop)
    return _SERVERS[key].start()


def client(env: dict[str, str]) -> list[str]:
    """The command line that stands for `python` in `env`, as a child of `server(env)`."""
    return server(env).client()
