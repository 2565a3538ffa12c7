"""Every command's tables at 80 columns, the width of a CI log: no `…`, no table line wider than 80, and every name,
hash and number that the command's --json holds and its text shows is shown whole (a value the text starts to
show is there whole: never cut, never folded over two lines). The commands come from the app, so a new command
must be added here; each command's folder form too (`inspect DIR`, `evaluate DIR`). The progress bar at an
80-column terminal is checked in test_progress_80 (a real pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.report.console import pct

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100"]
TINY = [*DATA, "--model", "mlp:64-16-10", "--epochs", "1", "--batch-size", "64"]
WIDTH = 80
# each command's tables at 80 columns; {a} {b} are tickets of two methods and seeds in {f}, a long folder; {d} a
# fresh folder
ARGS = {
    "extract": ["extract", *TINY, "--method", "augmented", "--out", "{d}/augmented-seed-0.safetensors"],
    "evaluate": ["evaluate", "{a}"],
    "evaluate DIR": ["evaluate", "{f}"],
    "inspect": ["inspect", "{a}"],
    "inspect DIR": ["inspect", "{f}"],
    "inspect DIR --aggregate": ["inspect", "{f}", "--aggregate"],
    "evaluate DIR --aggregate": ["evaluate", "{f}", "--aggregate"],
    "compare": ["compare", "{a}", "{b}"],
    "compare many": ["compare", "{a}", "{b}", "{a}"],
    "compare --aggregate": ["compare", "{a}", "{b}", "--aggregate"],
    "export": ["export", "{a}", "--format", "csr", "--out", "{d}/csr.safetensors"],
    "train-weak": ["train-weak", "{a}", "--epochs", "1", "--batch-size", "64"],
    "drift": ["drift", "--ticket", "{a}", "--steps", "2", "--log-every", "1", "--batch-size", "64"],
    "list": ["list", "settings"],
    "bench": ["bench", "{a}", "--batch", "1,8", "--repeats", "3", "--threads", "1", "--forms", "sparse,bsr"],
    "bench DIR": ["bench", "{f}", "--batch", "1", "--repeats", "3", "--threads", "1", "--forms", "sparse"],
    "sweep-k": ["sweep-k", *TINY, "--seeds", "0", "--densities", "0.5", "--layerwise", "0", "--device", "cpu"],
}
LONG_FOLDER = "experiments-on-digits-with-a-rather-long-folder-name"


@pytest.fixture(scope="module")
def tickets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("t") / LONG_FOLDER
    folder.mkdir()
    made = {}
    for key, method, seed in (("a", "augmented", 0), ("b", "edge-popup", 1)):
        out = folder / f"{method}-seed-{seed}.safetensors"
        r = runner.invoke(
            app, ["extract", *TINY, "--method", method, "--seed", str(seed), "--out", str(out), "--quiet"]
        )
        assert r.exit_code == 0, r.output
        made[key] = out
    return {**made, "f": folder}


SHOWN = ("ticket", "model", "method", "name", "weights_sha256", "integrity", "out", "dataset")  # keys of names
FRACTIONS = ("accuracy", "test_accuracy", "achieved_sparsity", "requested_sparsity", "achieved", "requested")


def words(doc: object, key: str = "") -> list[str]:
    """The names and hashes of a --json document that its tables show: the strings under SHOWN's keys (a path as
    its folder and its name, which a table may show apart)."""
    if isinstance(doc, dict):
        return [w for k, v in doc.items() for w in words(v, k)]
    if isinstance(doc, list):
        return [w for v in doc for w in words(v, key)]
    if isinstance(doc, str) and key in SHOWN and doc and " " not in doc:
        return [doc, str(Path(doc).parent), Path(doc).name] if "/" in doc else [doc]
    return []


def fractions(doc: object, key: str = "") -> list[float]:
    """The accuracies and sparsities of a --json document (the percentages its tables show)."""
    if isinstance(doc, dict):
        return [x for k, v in doc.items() for x in fractions(v, k)]
    if isinstance(doc, list):
        return [x for v in doc for x in fractions(v, key)]
    if isinstance(doc, float) and key in FRACTIONS:
        return [doc]
    return []


def whole(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w.%/-]){re.escape(word)}(?![\w.%/-])", text) is not None


TIMES = re.compile(r"\d+\.\d|\d+:\d\d:\d\d|\d+s")  # wall times, which differ from run to run
MEASURED = re.compile(r"[\d.]+(e[+-]?\d+)?(x|k/s|M/s|/s)?")  # bench's timings, speed-ups and throughputs: remeasured


def tokens(text: str, measured: bool = False) -> set[str]:
    """The words of a command's text: split at spaces and table rules, outer punctuation stripped (`measured`:
    numbers remeasured at every run left out too)."""
    if measured:  # bench's verdict follows the timings: one run may find a form fastest, the next within noise
        text = "\n".join(line for line in text.splitlines() if not line.startswith("verdict:"))
    found = {w.strip(",;:()[]") for w in re.split(r"[\s│┃━─┏┓┗┛┡┩┣┫╇┳┻┼╋└┘┌┐├┤┬┴]+", text)}
    return {w for w in found if w and not TIMES.fullmatch(w) and not (measured and MEASURED.fullmatch(w))}


def check(narrow: str, wide: str, doc: object, measured: bool = False) -> None:
    """At 80 columns: no `…`, table lines within 80 columns, every word the command shows unconstrained (at 1000
    columns) shown whole, and so every name, hash and percentage of its --json document that it shows."""
    assert "…" not in narrow, narrow
    for line in narrow.splitlines():  # a table line fits; only a `label: value` line or a sentence may be longer
        assert len(line) <= WIDTH or not any(c in line for c in "┃│━─"), narrow
    for word in sorted(tokens(wide, measured) - tokens(narrow, measured)):
        assert whole(word, narrow), f"{word!r} is not shown whole at {WIDTH} columns:\n{narrow}"
    shown = [w for w in words(doc) if whole(w, wide)] + [pct(x) for x in fractions(doc) if whole(pct(x), wide)]
    assert shown, wide
    for word in shown:
        assert whole(word, narrow), f"{word!r} is not shown whole at {WIDTH} columns:\n{narrow}"


def command_names() -> list[str]:
    return sorted(c.name or c.callback.__name__ for c in app.registered_commands if c.callback is not None)


def test_every_command_is_covered():
    assert sorted({args[0] for args in ARGS.values()}) == command_names()


SLOW = ("extract", "train-weak", "drift", "sweep-k")  # they train: seconds each, three runs per test


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(ARGS)])
def test_tables_at_80_columns_cut_nothing(name, tickets, tmp_path):
    args = [a.format(d=tmp_path, **tickets) for a in ARGS[name]]
    args += ["--force"] if "--out" in args else []
    text = {}
    for width in (WIDTH, 1000):
        r = runner.invoke(app, [*args, "--quiet"], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        text[width] = r.stdout
    j = runner.invoke(app, [*args, "--quiet", "--json"])
    assert j.exit_code == 0, j.output
    check(text[WIDTH], text[1000], json.loads(j.stdout), measured=name.startswith("bench"))
    if name in ("inspect DIR", "evaluate DIR", "compare many"):  # every ticket's name shown
        for t in (tickets["a"], tickets["b"]):
            assert whole(t.name, text[WIDTH]) or whole(str(t), text[WIDTH]), text[WIDTH]


def test_inspect_dir_names_every_column_whole(tickets):
    r = runner.invoke(app, ["inspect", str(tickets["f"])], env={"COLUMNS": str(WIDTH)})
    for header in ("ticket", "method", "model", "seed", "asked", "achieved", "test", "bytes", "integrity"):
        assert whole(header, r.stdout), r.stdout
    for value in ("augmented", "edge-popup", "mlp:64-16-10", str(tickets["f"])):
        assert whole(value, r.stdout), r.stdout


def in_terminal(args: list[str], columns: int) -> str:
    """What a command writes to an 80-column pseudo-terminal (stdout and stderr), escapes and redraws removed."""
    primary, secondary = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TERM")}
    env["TERM"] = "xterm-256color"
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ticketcli", *args], stdin=secondary, stdout=secondary, stderr=secondary, env=env
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # the terminal's other side closed: the command ended
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(primary)
    text = b"".join(chunks).decode("utf-8", "replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    return "\n".join(part for line in text.split("\n") for part in line.split("\r"))


@pytest.mark.parametrize("columns", [80, pytest.param(60, marks=pytest.mark.slow)])
def test_progress_bar_and_tables_in_a_terminal_cut_nothing(columns, tmp_path):
    out = tmp_path / "t.safetensors"
    text = in_terminal(["extract", *TINY, "--epochs", "3", "--threads", "1", "--out", str(out)], columns)
    assert "…" not in text, text
    assert re.search(r"\d:\d\d:\d\d", text), text  # the times, whole
    assert whole("sparsity", text) and re.search(r"\d+\.\d\d%", text), text
    for line in text.splitlines():  # the bar's rows and the tables fit; a title or a sentence may wrap
        assert len(line) <= columns or not any(c in line for c in "┃│━─"), text


def test_compare_shows_both_fingerprints_whole(tickets):
    a, b = str(tickets["a"]), str(tickets["b"])
    r = runner.invoke(app, ["compare", a, b], env={"COLUMNS": str(WIDTH)})
    doc = json.loads(runner.invoke(app, ["compare", a, b, "--json"]).stdout)
    for t in doc["tickets"]:
        assert whole(t["weights_sha256"], r.stdout), r.stdout
