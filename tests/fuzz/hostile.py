"""The one check every hostile-input case ends with: the documented exit code, exactly one `error:` line on stderr,
no traceback, bounded peak memory, no marker file (no code ran) and no leftover or clobbered file.

Cases run in-process through Typer's CliRunner where they can (fast; peak memory by tracemalloc) and as a real
`python -m ticketcli` child where the process itself matters (signals, closed pipes, imports at start-up; peak
memory as the child's own maximum resident set, from wait4).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import typer.testing
from helpers import checkout_pythonpath
from typer.testing import CliRunner
from warm import client as warm_client

REPO = Path(__file__).resolve().parents[2]
MEASURED = Path(__file__).with_name("measured.py")  # runs the child so that its peak RSS is its own
IN_PROCESS_PEAK = 64 << 20  # Python-level allocations of one rejected input; a declared size would blow past this
CHILD_PEAK = 1536 << 20  # resident peak of a whole child (python + torch is ~0.4-0.6 GiB before any work)


@dataclass
class Run:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float
    peak_bytes: int  # tracemalloc peak (in-process) or the child's max RSS (subprocess)
    child: bool = False
    exception: BaseException | None = field(default=None, repr=False)


# a sweep-k of a few seconds on digits (one seed, one density, one layerwise run per method), for the families
# that hand sweep-k hostile --out-dir folders
QUICK_SWEEP = [
    "sweep-k",
    "--dataset",
    "digits",
    "--model",
    "mlp:64-13-10",
    "--seeds",
    "0",
    "--densities",
    "0.5",
    "--layerwise",
    "0",
    "--epochs",
    "1",
    "--n-extract",
    "100",
    "--n-val",
    "50",
    "--quiet",
]


def cli(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> Run:
    """`ticket ARGS` in this process, with its Python allocations traced."""
    from ticketcli.cli.app import app

    runner = CliRunner()
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with _command_built_once():
            result = runner.invoke(app, list(args), env=env, input=input)
    finally:
        seconds = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    exc = result.exception if not isinstance(result.exception, SystemExit) else None
    return Run(result.exit_code, result.stdout, result.stderr, seconds, peak, exception=exc)


_COMMANDS: dict[int, object] = {}


@contextmanager
def _command_built_once() -> Iterator[None]:
    """Typer's CliRunner rebuilds the click command on every invoke (~0.3 s, most of an in-process case, more
    under tracemalloc); reuse one per app. Without that private hook (another Typer) cases are only slower."""
    build = getattr(typer.testing, "_get_command", None)
    if build is None:
        yield
        return
    typer.testing._get_command = lambda app: _COMMANDS.get(id(app)) or _COMMANDS.setdefault(id(app), build(app))
    try:
        yield
    finally:
        typer.testing._get_command = build


def _closed_pipe() -> int:
    """The writing end of a pipe whose reader is already gone: every write to it fails with EPIPE."""
    r, w = os.pipe()
    os.close(r)
    return w


def child(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 120,
    stdin: int | None = subprocess.DEVNULL,
    signal_after: tuple[float, int] | None = None,
    closed_stdout: bool = False,
    closed_stderr: bool = False,
    stdout_file: str | None = None,
    stderr_file: str | None = None,
    closed_fds: tuple[int, ...] = (),
    program: tuple[str, ...] = ("-m", "ticketcli"),
    warm: bool = False,
) -> Run:
    """`python -m ticketcli ARGS` as a child process; `signal_after=(seconds, signum)` sends it a signal;
    `closed_stdout`/`closed_stderr` give it a pipe whose reader has gone (`| head -1` after the first line);
    `stdout_file`/`stderr_file` send a stream to a file such as /dev/full; `closed_fds` starts it with those fds
    really closed (`>&-`, `2>&-`: Python then has no sys.stdout, sys.stderr); `program` replaces `-m ticketcli`
    (a driver script that patches the CLI before running it); `warm` runs it as a fork server's child
    (tests/warm.py: seconds faster, for cases about what a command does once running) whose peak memory is not
    measured (0)."""
    full_env = {**os.environ, "PYTHONPATH": checkout_pythonpath(dict(os.environ)), **(env or {})}
    if "TICKET_DEBUG" not in (env or {}):
        full_env.pop("TICKET_DEBUG", None)  # a developer's shell must not change what the case sees
    python = warm_client(full_env) if warm else [sys.executable]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        pipes = {"stdout": _closed_pipe() if closed_stdout else out, "stderr": _closed_pipe() if closed_stderr else err}
        for name, path in (("stdout", stdout_file), ("stderr", stderr_file)):
            if path is not None:
                pipes[name] = os.open(path, os.O_WRONLY)
        peak_r, peak_w = os.pipe()
        try:
            p = subprocess.Popen(
                [sys.executable, "-S", "-E", str(MEASURED), str(peak_w), *python, *program, *args],
                stdin=stdin,
                env=full_env,
                cwd=cwd,
                pass_fds=(peak_w,),
                preexec_fn=(lambda: [os.close(fd) for fd in closed_fds])
                if closed_fds
                else None,  # after the pipes are in place
                **pipes,
            )
        finally:
            os.close(peak_w)
            for end in pipes.values():
                if isinstance(end, int):
                    os.close(end)
        sent = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.perf_counter() - t0
            if signal_after is not None and not sent and elapsed >= signal_after[0]:
                os.kill(p.pid, signal_after[1])
                sent = True
            if elapsed > timeout:
                p.kill()  # and the command with it
                os.wait4(p.pid, 0)
                os.close(peak_r)
                raise AssertionError(f"ticket {' '.join(args)} did not end within {timeout} s")
            time.sleep(0.005)
        p.returncode = code = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - t0
        with os.fdopen(peak_r, "rb") as reported:
            peak_kib = int(reported.read() or usage.ru_maxrss)  # none if measured.py itself was killed
        if warm:
            peak_kib = 0  # the client's, not the command's
        out.seek(0)
        err.seek(0)
        return Run(
            code,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            seconds,
            peak_kib * 1024,
            child=True,
        )


def snapshot(*paths: Path) -> dict[Path, str | None]:
    """Content digests of files (None: absent), to prove afterwards that nothing was clobbered."""
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None for p in paths}


def assert_clean(
    run: Run,
    code: int = 2,
    *,
    contains: str | None = None,
    markers: tuple[Path, ...] = (),
    unchanged: dict[Path, str | None] | None = None,
    folder: Path | None = None,
    peak: int | None = None,
    prefix: str | None = "error:",
) -> None:
    """The documented exit code, one `error:` line (and nothing else on stderr), no traceback, no marker file,
    nothing clobbered, no temp file left in `folder`, memory under the bound. `prefix` is what the one line
    starts with (`internal error:` for exit 70); `prefix=None` asserts that stderr stays empty (a closed pipe)."""
    if run.exception is not None:
        raise run.exception  # a crash inside the CliRunner: show its traceback
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.exit_code == code, (run.exit_code, run.stderr[-2000:])
    assert "Traceback" not in run.stderr + run.stdout, run.stderr[-2000:]
    if prefix is None:
        assert not lines, run.stderr[-2000:]
    else:
        assert len(lines) == 1 and lines[0].startswith(prefix), run.stderr[-2000:]
    if contains is not None:
        assert contains in lines[0], lines[0]
    for m in markers:
        assert not m.exists(), f"marker {m} exists: code ran"
    if unchanged is not None:
        assert snapshot(*unchanged) == unchanged, "a file was created, changed or removed"
    if folder is not None:
        leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
        assert not leftovers, leftovers
    limit = peak if peak is not None else (CHILD_PEAK if run.child else IN_PROCESS_PEAK)
    assert run.peak_bytes < limit, (run.peak_bytes, limit)
