"""Facts the manual and the messages state, checked against the code that decides them: the methods the extract guide
lists, the export error the output guide quotes, each dataset's normalisation in the data reference, positional
arguments named in capitals, a failed download's reason, a factory ticket's import error, and the site build's
banner left out of the CI log."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.methods.registry import METHODS
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, RunSpec

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
runner = CliRunner()


def names_in(text: str) -> list[str]:
    return re.findall(r"`([a-z0-9-]+)`", text)


def test_the_extract_guide_lists_every_method():
    guide = (DOCS / "guide" / "extract.md").read_text()
    (row,) = [line for line in guide.splitlines() if line.startswith("| `--method` |")]
    listed = names_in(row.split("|")[2])
    assert sorted(listed) == METHODS.names(), "the --method row of docs/guide/extract.md"
    assert row.rstrip(" |").endswith(f"({MethodSpec().name})")  # the default
    intro = guide[guide.index("Methods (`--method`") : guide.index("Variants of the score methods")]
    bullets = re.findall(r"^- `([a-z0-9-]+)`", intro, re.M)
    baselines = names_in(intro.split("baselines", 1)[1].split("\n\n")[0])
    assert sorted(set(bullets) | set(baselines)) == METHODS.names(), "the guide's Methods paragraph"
    heading = re.search(r"^## Baselines: `ticket extract --method ([a-z|-]+)`", guide, re.M)
    assert heading and sorted(heading.group(1).split("|")) == sorted(set(METHODS.names()) - set(bullets))


def test_the_output_guide_quotes_the_real_missing_format_error(tmp_path):
    guide = (DOCS / "guide" / "output.md").read_text()
    (quoted,) = re.findall(r"`(error: Missing option '--format'\. [^`]*)`", guide)
    r = runner.invoke(app, ["export", str(tmp_path / "t.safetensors"), "--out", str(tmp_path / "n.safetensors")])
    assert r.exit_code == 2
    assert r.stderr.strip().split(" (hint:")[0] == quoted


def test_the_data_reference_gives_every_datasets_normalisation():
    text = (DOCS / "reference" / "data.md").read_text()
    section = text[text.index("## Normalisation") :].split("\n## ")[0]
    rows = {
        names_in(cells[1])[0]: cells[2:5]
        for line in section.splitlines()
        if line.startswith("| `")
        and not line.startswith("| `--")
        and len(cells := [c.strip() for c in line.split("|")]) >= 5
    }
    assert sorted(rows) == DATASETS.names()
    for name, (raw, mean, std) in rows.items():
        norm = DATASETS.get(name).normalization
        assert norm is not None
        assert raw == norm.raw, name
        assert tuple(float(v) for v in mean.split(",")) == norm.mean, name
        assert tuple(float(v) for v in std.split(",")) == norm.std, name


@pytest.mark.parametrize(
    ("command", "usage", "missing"),
    [
        ("export", "[OPTIONS] TICKET", "TICKET"),
        ("evaluate", "[OPTIONS] TICKETS...", "TICKETS"),
        ("list", "KIND", "KIND"),
    ],
)
def test_positional_arguments_read_in_capitals(command, usage, missing):
    r = runner.invoke(app, [command, "--help"], terminal_width=100)
    assert usage in r.stdout and "{" not in r.stdout.splitlines()[1], r.stdout[:300]
    r = runner.invoke(app, [command])
    assert r.exit_code == 2 and f"Missing argument '{missing}'" in r.stderr


TORCHVISION_FAILURE = (
    "Error downloading train-images-idx3-ubyte.gz:\n"
    "Tried https://ossci-datasets.s3.amazonaws.com/mnist/, got:\n"
    "<urlopen error [Errno -2] Name or service not known>\n"
    "Tried http://yann.lecun.com/exdb/mnist/, got:\n"
    "<urlopen error [Errno -2] Name or service not known>\n"
)


def test_a_failed_mnist_download_says_why(tmp_path, monkeypatch):
    """torchvision's message starts with a line that ends in a colon; the reason is on its last line (what it
    raises offline, verbatim)."""
    torchvision_datasets = pytest.importorskip("torchvision.datasets")

    class Offline:
        def __init__(self, *args, **kwargs):
            raise RuntimeError(TORCHVISION_FAILURE)

    monkeypatch.setattr(torchvision_datasets, "MNIST", Offline)
    spec = DataSpec(name="mnist", search_dirs=(str(tmp_path),), download=True, download_dir=str(tmp_path))
    with pytest.raises(UsageError) as e:
        DATASETS.get("mnist").load(spec)
    assert str(e.value) == (
        "MNIST download failed: Error downloading train-images-idx3-ubyte.gz: Name or service not known"
    )


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError("<urlopen error [Errno 111] Connection refused>"), "Connection refused"),
        (RuntimeError(""), "RuntimeError (no message)"),
        (RuntimeError("File not found or corrupted."), "File not found or corrupted."),
    ],
)
def test_a_download_reason_is_one_nonempty_line(error, reason):
    from ticketcli.data.datasets import download_reason

    assert download_reason(error) == reason


def test_a_factory_tickets_import_error_says_where_its_module_must_be(tmp_path, user_module, monkeypatch):
    """Evaluated where its module cannot be imported, a factory ticket is one line naming the module, with a hint
    saying where it must be."""
    from ticketcli.models.registry import parse_model
    from ticketcli.runs import extract as runs_extract

    spec = RunSpec(
        model=parse_model(f"{user_module}:build_net"),
        init=InitSpec(seed=0),
        data=DataSpec(name="digits", n_extract=64, n_val=32),
        method=MethodSpec(name="random", sparsity=0.5),
        device="cpu",
    )
    ticket = tmp_path / "factory.safetensors"
    runs_extract.extract_ticket(spec, out=ticket)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in (str(tmp_path), "", ".")])
    monkeypatch.delitem(sys.modules, user_module)
    r = runner.invoke(app, ["evaluate", str(ticket), "--trust-model-code", "--device", "cpu", "--quiet"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert f"cannot import {user_module} for model {user_module}:build_net" in r.stderr
    assert f"imports its module wherever it is rebuilt: run from the folder that holds {user_module}" in r.stderr


def test_ci_builds_the_site_without_the_themes_banner():
    """Material for MkDocs prints an end-of-life banner at every build unless NO_MKDOCS_2_WARNING is set (its
    documented switch): CI sets it for the build, so the log holds only the build's own warnings."""
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    build = next(i for i, line in enumerate(lines) if "-m mkdocs build --strict" in line)
    assert any(line.startswith("export NO_MKDOCS_2_WARNING=1") for line in lines[:build])
    pytest.importorskip("material", reason="the site's theme comes with the docs extra (pip install -e '.[docs]')")
    banner = "reaches end of life"
    as_mkdocs = "import sys; sys.argv[0] = '/venv/lib/mkdocs/__main__.py'; import material.templates"
    env = {k: v for k, v in os.environ.items() if k != "NO_MKDOCS_2_WARNING"}
    shown = subprocess.run([sys.executable, "-c", as_mkdocs], env=env, capture_output=True, text=True, timeout=60)
    if banner not in shown.stderr:
        pytest.skip("this release of the theme prints no end-of-life banner: nothing to silence")
    env["NO_MKDOCS_2_WARNING"] = "1"
    quiet = subprocess.run([sys.executable, "-c", as_mkdocs], env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and banner not in quiet.stderr
