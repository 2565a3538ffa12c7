"""The site's command-line reference (ticketcli/cli/reference.py, generated when the site is built) against what the
program itself says: every option of every command that `ticket COMMAND --help` lists is in that command's section
of the reference, with the default --help states, and the reference names no flag --help does not."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.cli.reference import cli_reference

runner = CliRunner()
WIDE = {"COLUMNS": "2000"}  # one option per line, nothing wrapped
COMMANDS = sorted(typer.main.get_command(app).commands)  # walked from the app, not from the reference
ROW = re.compile(r"^│\s+(?:\*\s+)?(--[\w-]+)(?:\s+(--no-[\w-]+))?(.*?)│\s*$")
DEFAULT = re.compile(r"Default: (.*?)\.(?: One of: .*)?\s*$")


def help_options(*args: str) -> dict[str, str]:
    """Flag -> the rest of its --help row, for every option `ticket ARGS --help` shows."""
    r = runner.invoke(app, [*args, "--help"], env=WIDE)
    assert r.exit_code == 0, r.output
    out = {}
    for line in r.stdout.splitlines():
        m = ROW.match(line.strip())
        if m and m[1] != "--help":
            out[m[1]] = " ".join(m[3].split())
    return out


def section(reference: str, command: str | None) -> str:
    """The part of the reference under `## \\`ticket COMMAND\\`` (None: the app's own options)."""
    title = f"## `ticket {command}`" if command else "## `ticket`"
    start = reference.index(title + "\n")
    end = reference.find("\n## ", start + 1)
    return reference[start : end if end > 0 else None]


def rows(text: str) -> dict[str, str]:
    """Flag -> its table row, for each option row of a reference section."""
    return {m[1]: m[0] for m in re.finditer(r"^\| `(--[\w-]+)`.*$", text, flags=re.M)}


@pytest.fixture(scope="module")
def reference() -> str:
    return cli_reference()


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_every_option_of_help_is_in_the_reference_with_its_default(command, reference):
    shown = help_options(*([command] if command else []))
    assert shown, "the help parser found no option: the test would pass on anything"
    documented = rows(section(reference, command))
    missing = sorted(set(shown) - set(documented))
    assert missing == [], f"ticket {command or ''} --help lists {missing}, the reference does not"
    extra = sorted(set(documented) - set(shown))
    assert extra == [], f"the reference lists {extra}, ticket {command or ''} --help does not"
    for flag, help_row in shown.items():
        m = DEFAULT.search(help_row)
        if m:
            assert f"`{m[1]}`" in documented[flag], (flag, m[1], documented[flag])
        if "[required]" in help_row:
            assert "`required`" in documented[flag], flag


def test_the_reference_reads_the_declarations(reference):
    """Range, readers and config key come from the Setting, which --help does not show in those words."""
    extract = rows(section(reference, "extract"))
    assert "an integer in [1, 64]" in extract["--aux-width"] and "augmented, iterated" in extract["--aux-width"]
    assert "`aux_width`" in extract["--aux-width"]
    assert "`--bias` / `--no-bias`" in section(reference, "extract")


def test_the_checks_can_fail():
    """The parsers find what they should: a row with a default and a choice list, and a reference table row."""
    m = ROW.match("│ --sparsity <float> Requested sparsity. Default: 0.9. One of: a, b. │")
    assert m and m[1] == "--sparsity" and DEFAULT.search(" ".join(m[3].split()))[1] == "0.9"
    assert rows("| `--seed` | integer | `0` |\n| argument |") == {"--seed": "| `--seed` | integer | `0` |"}


def test_the_reference_tables_have_two_columns(reference):
    """Seven columns clipped their descriptions in a 1280-pixel browser window: each table is the option and what
    it does, its default, range, readers and config key written after its help."""
    table_rows = [line for line in reference.splitlines() if line.startswith("|")]
    assert table_rows and all(len(re.findall(r"(?<!\\)\|", line)) == 3 for line in table_rows)
    assert "*default* `0.9`" in rows(section(reference, "extract"))["--sparsity"]
