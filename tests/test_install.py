"""install.sh, the README's install: its arguments and the phases it would run (--dry-run, which runs nothing and
needs no network). `bash install.sh` itself was run for real once for the sizes the README and docs/guide/install.md
give; a real install takes minutes and gigabytes, too much for the suite."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "install.sh"


def install(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=60
    )


def commands(out: str) -> list[str]:
    return [line[2:] for line in out.splitlines() if line.startswith("+ ")]


def test_dry_run_installs_torch_and_ticket_into_the_venv_and_nothing_else(tmp_path):
    venv = tmp_path / "env"
    done = install("--dry-run", "--venv", str(venv), "--no-data")
    assert done.returncode == 0, done.stderr
    run = commands(done.stdout)
    assert run[0].endswith(f"-m venv {venv}")
    pip = [c for c in run if " -m pip install " in c]
    assert all(c.startswith(f"{venv}/bin/python -m pip install") for c in pip)  # never the global pip
    assert "torch==2.14.1 torchvision==0.29.1" in pip[0]
    assert pip[1].endswith(f"-e {REPO}")  # the package alone: no extra
    assert len(pip) == 2 and not venv.exists()  # a dry run creates nothing
    assert done.stdout.rstrip().splitlines()[-2:] == [
        f"ticket is {venv}/bin/ticket",
        f"put it on PATH with: source {venv}/bin/activate",
    ]


def test_extras_only_on_request_and_the_torch_index_where_given(tmp_path):
    done = install(
        "--dry-run", "--venv", str(tmp_path / "e"), "--extras", "onnx,track", "--torch-index", "https://x/cpu"
    )
    assert done.returncode == 0, done.stderr
    pip = [c for c in commands(done.stdout) if " -m pip install " in c]
    assert "--index-url https://x/cpu torch==2.14.1" in pip[0]
    assert pip[-1].endswith(f"-e {REPO}[onnx,track]") and len(pip) == 3


def test_an_active_environment_is_used(tmp_path):
    active = tmp_path / "active"
    done = install("--dry-run", env={"VIRTUAL_ENV": str(active)})
    assert done.returncode == 0, done.stderr
    assert commands(done.stdout)[0].endswith(f"-m venv {active}")  # dry run: it does not exist yet
    assert "the environment is active: ticket is on PATH" in done.stdout


def test_a_relative_venv_is_named_by_its_full_path(tmp_path):
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--venv", "rel"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and f"ticket is {tmp_path}/rel/bin/ticket" in done.stdout, done.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--extras", "onnx,nope"], "unknown extra 'nope'"),
        (["--extras", "onnx,,track"], "holds an empty name"),
        (["--bogus"], "unknown option --bogus"),
        (["--venv"], "--venv needs a folder"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args, needle, tmp_path):
    done = install("--dry-run", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("install.sh: error:") and needle in done.stderr


def test_help_lists_every_option():
    done = install("--help")
    assert done.returncode == 0
    for option in ("--venv", "--extras", "--torch-index", "--python", "--no-data", "--dry-run"):
        assert option in done.stdout
