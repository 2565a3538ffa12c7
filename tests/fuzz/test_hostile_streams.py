"""A missing stdout or stderr (`>&-`, `2>&-`: the fd really closed, so Python starts with sys.stdout or sys.stderr
set to None) is the closed-pipe case for every command, `--version` and `--help`: never an internal error (70).
Writing to the missing stream ends the run quietly with 141; what went to files (a ticket, --out, --plot,
--out-dir) is complete, and nothing is half-written; a run that writes nothing to it keeps its own exit code.

All the cases run in one child: a driver that imports torch and the workflows once, then forks one real process
per case (two at a time), closes its fds as the shell would, leaves sys.stdout or sys.stderr None as Python does
for a closed fd, and runs the console script's entry point; one torch import, not one per case, keeps it fast."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile import QUICK_SWEEP, Run, assert_clean, child

from ticketcli.ticketfile import ticket as ticket_io

FAST = ["--dataset", "digits", "--model", "mlp:64-13-10", "--n-extract", "100", "--n-val", "50", "--device", "cpu"]


def is_ticket(path: Path) -> bool:
    ticket_io.load(path)  # raises on a partial or broken file
    return True


def is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


# each command once, as quiet as it can be (--quiet: nothing on stderr when it succeeds), with the files it writes
# and what makes each of them complete
Case = tuple[list[str], dict[str, Callable[[Path], bool]]]
COMMANDS: dict[str, Callable[[str], Case]] = {
    "extract": lambda t: (
        ["extract", "--method", "random", *FAST, "--quiet", "--out", "{d}/x.safetensors"],
        {"x.safetensors": is_ticket},
    ),
    "evaluate": lambda t: (["evaluate", t, "--device", "cpu"], {}),
    "inspect": lambda t: (["inspect", t, "--json"], {}),
    "compare": lambda t: (["compare", t, t], {}),
    "export": lambda t: (
        ["export", t, "--format", "masks", "--out", "{d}/m.safetensors"],
        {"m.safetensors": Path.is_file},
    ),
    "train-weak": lambda t: (
        ["train-weak", t, "--epochs", "1", "--quiet", "--device", "cpu", "--plot", "{d}/w.png"],
        {"w.png": is_png},
    ),
    "drift": lambda t: (
        ["drift", "--dataset", "digits", "--model", "mlp:64-16-10", "--steps", "2", "--quiet", "--plot", "{d}/d.png"],
        {"d.png": is_png},
    ),
    "sweep-k": lambda t: ([*QUICK_SWEEP, "--out-dir", "{d}/sweep", "--plot", "{d}/s.png"], {"s.png": is_png}),
    "list": lambda t: (["list", "methods"], {}),
    "--version": lambda t: (["--version"], {}),
    "--help": lambda t: (["extract", "--help"], {}),
    "an error": lambda t: (["inspect", "{d}/missing.safetensors"], {}),
}
STREAMS = {"stdout": (1,), "stderr": (2,), "both": (1, 2)}

DRIVER = """
import json, os, sys
import torch  # noqa: F401 - imported once, before the forks
import torch._dynamo  # noqa: F401 - a torch optimiser's first use imports it: seconds in every training case
from ticketcli.cli import app, entry  # noqa: F401
from ticketcli.drift import run as _d  # noqa: F401
from ticketcli.export import run as _e  # noqa: F401
from ticketcli.report import plots as _p  # noqa: F401
from ticketcli.runs import evaluate as _v, extract as _x  # noqa: F401
from ticketcli.sweep import run as _s  # noqa: F401
from ticketcli.weak import run as _w  # noqa: F401

results, running = {}, {}


def reap():
    pid, status = os.wait()
    results[running.pop(pid)] = os.waitstatus_to_exitcode(status)


for case in json.load(open(sys.argv[1])):
    if len(running) >= 2:  # two cases at a time
        reap()
    pid = os.fork()
    if pid == 0:
        os.chdir(case["cwd"])
        for fd, name in ((1, "out"), (2, "err")):
            capture = os.open(case[name], os.O_WRONLY | os.O_CREAT)
            os.dup2(capture, fd)
            os.close(capture)
        for fd in case["closed"]:
            os.close(fd)
            setattr(sys, {1: "stdout", 2: "stderr"}[fd], None)  # what Python starts with for a closed fd
        sys.argv = ["ticket", *case["args"]]
        code = 0
        try:
            entry.main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            code = 1
        for stream in (sys.stdout, sys.stderr):  # the interpreter's last flush: a failure there is its exit 120
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:
                code = 120
        os._exit(code)
    running[pid] = case["id"]
while running:
    reap()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def runs(ticket, tmp_path_factory):
    """Every command with each stream missing: {(command, closed): (run, folder)}, run by one driver child."""
    root = tmp_path_factory.mktemp("streams")
    cases, folders = [], {}
    for command, build in COMMANDS.items():
        args, _ = build(str(ticket))
        for closed, fds in STREAMS.items():
            folder = root / f"{command.strip('-').replace(' ', '-')}-{closed}"
            folder.mkdir()
            folders[command, closed] = folder
            cases.append(
                {
                    "id": f"{command}/{closed}",
                    "args": [a.replace("{d}", str(folder)) for a in args],
                    "closed": list(fds),
                    "cwd": str(folder),
                    "out": str(root / f"{folder.name}.out"),
                    "err": str(root / f"{folder.name}.err"),
                }
            )
    (root / "cases.json").write_text(json.dumps(cases))
    (root / "driver.py").write_text(DRIVER)
    driver = child(str(root / "cases.json"), program=(str(root / "driver.py"),), timeout=900)
    assert driver.exit_code == 0, driver.stderr[-3000:]
    codes = json.loads(driver.stdout)
    out = {}
    for case in cases:
        command, closed = case["id"].split("/")
        run = Run(codes[case["id"]], read(case["out"]), read(case["err"]), 0.0, 0, child=True)
        out[command, closed] = (run, folders[command, closed])
    return out


def read(path: str) -> str:
    return Path(path).read_text(errors="replace") if os.path.exists(path) else ""


@pytest.mark.parametrize("closed", STREAMS)
@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "an error"])
@pytest.mark.slow
def test_a_missing_stream_is_a_closed_pipe_for_every_command(command, closed, runs):
    run, folder = runs[command, closed]
    if closed == "stderr":  # the results are written, nothing goes to stderr: the run's own success
        assert run.exit_code == 0 and run.stdout.strip(), (run.exit_code, run.stdout[-500:])
        if command == "inspect":
            json.loads(run.stdout)
    else:  # the results find stdout gone: 141, and not a word (stderr, when open, stays empty)
        assert_clean(run, 141, prefix=None)
    _, outputs = COMMANDS[command]("")
    for name, complete in outputs.items():  # written before the results were printed, and complete
        assert complete(folder / name), name
    leftovers = [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]
    assert not leftovers, leftovers
    if command == "sweep-k":
        assert any((folder / "sweep").rglob("*.safetensors"))


@pytest.mark.parametrize("closed", STREAMS)
@pytest.mark.slow
def test_an_error_with_a_missing_stream_is_never_an_internal_error(closed, runs):
    """The error line goes to stderr: with stderr missing, that is the closed-pipe case (141); with only stdout
    missing, the error is the run's own (2, one line)."""
    run, _ = runs["an error", closed]
    if closed == "stdout":
        assert_clean(run, 2, contains="no such file")
    else:
        assert run.exit_code == 141 and run.stdout == "", (run.exit_code, run.stdout)
