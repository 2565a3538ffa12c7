"""Start-up stays fast without timing anything: the commands that compute nothing (version, help, inspect, a bad
file refused, `ticket list`) must run without importing torch, which alone takes seconds. Each case runs the real
`python -m ticketcli` in a child and reports whether torch got imported (benchmarks/startup.py measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app

REPO = Path(__file__).resolve().parent.parent
# Runs `python -m ticketcli ARGS` in this child, then says on the last stderr line which heavy modules it imported.
RUNNER = """
import runpy, sys
sys.argv = ["ticket", *sys.argv[1:]]
try:
    runpy.run_module("ticketcli", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stdout.flush()
loaded = sorted(m for m in ("torch", "numpy", "typer") if m in sys.modules)
print("LOADED " + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def run(*args: str, cache: str | None = None) -> tuple[int, str, set[str]]:
    """(exit code, stdout, the heavy modules the run imported); `cache`: the user cache folder (no dataset there)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    env.pop("TICKET_DEBUG", None)
    env.pop("TICKET_DATA", None)
    if cache is not None:
        env["XDG_CACHE_HOME"] = cache
    done = subprocess.run([sys.executable, "-c", RUNNER, *args], env=env, capture_output=True, text=True, timeout=300)
    word, _, loaded = done.stderr.strip().splitlines()[-1].partition(" ")
    assert word == "LOADED", done.stderr[-2000:]
    return done.returncode, done.stdout, set(filter(None, loaded.split(",")))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real ticket (tiny MLP on digits) and a file that is not one."""
    folder = tmp_path_factory.mktemp("startup")
    ticket = folder / "t.safetensors"
    r = CliRunner().invoke(
        app,
        ["extract", "--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1", "--quiet", "--out", str(ticket)],
    )
    assert r.exit_code == 0, r.output
    garbage = folder / "garbage.safetensors"
    garbage.write_bytes(b"\x07" * 64)
    empty = folder / "empty"
    empty.mkdir()
    paths = {"ticket": str(ticket), "garbage": str(garbage), "missing": str(folder / "missing.safetensors")}
    return {**paths, "folder": str(folder), "empty": str(empty)}


# Every command module is imported by any of these (one app); -h of the largest ones renders their choices too.
WITHOUT_TORCH = {
    "version": (["--version"], 0),
    "help": (["--help"], 0),
    "extract-h": (["extract", "-h"], 0),
    "drift-h": (["drift", "-h"], 0),
    "inspect": (["inspect", "{ticket}"], 0),
    "inspect-json": (["inspect", "{ticket}", "--json"], 0),
    "inspect-garbage": (["inspect", "{garbage}"], 2),
    "inspect-folder": (["inspect", "{folder}", "--csv"], 1),  # the garbage file in it fails validation: exit 1
    "inspect-command": (["inspect", "{ticket}", "--command", "--toml"], 0),
    "evaluate-no-tickets": (["evaluate", "{empty}"], 2),
    "compare": (["compare", "{ticket}", "{ticket}"], 0),
    "compare-json": (["compare", "{ticket}", "{ticket}", "{ticket}", "--json"], 0),
    "compare-garbage": (["compare", "{ticket}", "{garbage}"], 2),
    "evaluate-garbage": (["evaluate", "{garbage}"], 2),
    "evaluate-missing": (["evaluate", "{missing}"], 2),
    "evaluate-bad-flag": (["evaluate", "{ticket}", "--min-accuracy", "7"], 2),
    "unknown-method": (["extract", "--method", "nope"], 2),
    # refusals of a command that would compute: before torch, not after it (and before any work)
    "extract-combination": (["extract", "--method", "snip", "--epochs", "5", "--out", "{folder}/x.safetensors"], 2),
    "extract-range": (["extract", "--sparsity", "1.5", "--out", "{folder}/x.safetensors"], 2),
    "extract-threads": (["extract", "--threads", "0", "--out", "{folder}/x.safetensors"], 2),
    "extract-out-exists": (["extract", "--dataset", "digits", "--out", "{ticket}"], 2),
    "extract-not-a-ticket-name": (["extract", "--dataset", "digits", "--out", "{folder}/x.pt"], 2),
    "export-out-exists": (["export", "{ticket}", "--format", "masked", "--out", "{ticket}"], 2),
    "export-format-name": (["export", "{ticket}", "--format", "onnx", "--out", "{folder}/m.pt"], 2),
    "train-weak-range": (["train-weak", "{ticket}", "--epochs", "0"], 2),
    "train-weak-out-exists": (["train-weak", "{ticket}", "--out", "{ticket}"], 2),
    "drift-range": (["drift", "--steps", "0"], 2),
    "drift-plot-exists": (["drift", "--dataset", "digits", "--plot", "{ticket}"], 2),
    "sweep-k-range": (["sweep-k", "--workers", "0"], 2),
    "sweep-k-missing-dataset": (["sweep-k", "--dataset", "mnist", "--data-dir", "{empty}"], 2),
    "extract-missing-dataset": (
        ["extract", "--dataset", "mnist", "--data-dir", "{empty}", "--out", "{folder}/m.safetensors"],
        2,
    ),
    "list": (["list", "methods", "--json"], 0),
}


def test_tab_completion_does_not_import_torch():
    """What the shell runs on every <TAB> (`ticket extract --method a<TAB>`) answers from the torch-free registries."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "_TICKET_COMPLETE": "complete_bash"}
    env |= {"COMP_WORDS": "ticket extract --method a", "COMP_CWORD": "3"}
    code = "import sys; from ticketcli.cli.app import app\n"
    code += "try: app(prog_name='ticket')\nfinally: print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    *proposed, torch_loaded = done.stdout.split()
    assert done.returncode == 0 and "augmented" in proposed, done.stderr[-2000:]
    assert torch_loaded == "False"


# one case of each kind (help, a ticket read, a file refused, a listing) in the quick loop, `-m "not slow"`; each
# case is a child process of its own
QUICK_CASES = ("help", "inspect", "evaluate-garbage", "list", "extract-combination", "extract-missing-dataset")


@pytest.mark.parametrize(
    "case", [c if c in QUICK_CASES else pytest.param(c, marks=pytest.mark.slow) for c in WITHOUT_TORCH]
)
def test_commands_that_compute_nothing_do_not_import_torch(case, files):
    args, code = WITHOUT_TORCH[case]
    exit_code, _, loaded = run(*(a.format(**files) for a in args), cache=files["empty"])
    assert exit_code == code
    assert "torch" not in loaded, f"`ticket {' '.join(args)}` imported torch"


def test_version_needs_not_even_typer():
    exit_code, out, loaded = run("--version")
    assert exit_code == 0 and out.startswith("ticketcli ") and loaded.isdisjoint({"torch", "typer", "numpy"})


@pytest.mark.slow
def test_the_runner_sees_torch_when_a_command_computes(files):
    """The check above can fail: evaluating a ticket does import torch, and the runner reports it."""
    exit_code, out, loaded = run("evaluate", files["ticket"], "--json", "--device", "cpu")
    assert exit_code == 0 and "torch" in loaded
    assert json.loads(out)["metrics"]["test"]["accuracy"] >= 0


def test_import_ticketcli_alone_is_torch_free():
    code = (
        "import sys, ticketcli, ticketcli.cli.app, ticketcli.settings.listing, ticketcli.models.registry, "
        "ticketcli.drift.activations, ticketcli.methods.registry, ticketcli.data.registry, ticketcli.models.init; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True)
    assert out.stdout.decode().strip() == "False", out.stderr.decode()[-2000:]


def test_inspect_without_torch_counts_what_the_torch_loader_unpacks(files):
    """inspect counts bits in the packed bytes (numpy); the oracle unpacks every mask into a torch tensor."""
    from ticketcli.runs import inspect as runs_inspect
    from ticketcli.ticketfile import ticket as ticket_io

    result, tk = runs_inspect.inspect_ticket(files["ticket"]), ticket_io.load(files["ticket"])
    assert [row.name for row in result.masks] == list(tk.masks)
    for row, mask in zip(result.masks, tk.masks.values()):
        assert (row.kept, row.total, row.shape) == (int(mask.sum()), mask.numel(), tuple(mask.shape))
    assert result.density == sum(int(m.sum()) for m in tk.masks.values()) / sum(m.numel() for m in tk.masks.values())
    assert result.record.integrity == tk.integrity == "ok"
