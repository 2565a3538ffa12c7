"""Every table the CLI prints keeps its numbers and names whole in a narrow terminal: no `…`, no word cut, no line
wider than the terminal except a stacked `label: value` line (which the terminal wraps without losing it). The
mechanism (report/fit.py, called by the console's print) is checked on random tables; the commands' own tables
(inspect, evaluate, export, bench, drift's per-layer statistics, sweep-k, list) at 80 and 60 columns."""

from __future__ import annotations

import io
import json
import random
import re

import pytest
from rich.table import Table
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.report.console import LiteralConsole

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--batch-size", "64"]


def render(table: Table, width: int) -> str:
    out = io.StringIO()
    LiteralConsole(file=out, width=width, soft_wrap=True, color_system=None).print(table)
    return out.getvalue()


def whole(word: str, text: str) -> bool:
    return re.search(rf"(?<![^\s│┃]){re.escape(word)}(?![^\s│┃:,])", text) is not None


def random_word(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return f"{rng.uniform(-1, 1) * 10 ** rng.randint(-12, 3):+.3g}"
    if kind == 1:
        return f"{rng.uniform(0, 100):.2f}%"
    if kind == 2:
        return ".".join(rng.choice(["layers", "blocks", "attn", "weight", "0", "12"]) for _ in range(rng.randint(1, 5)))
    return "x" * rng.randint(1, 70)


@pytest.mark.parametrize("seed", range(40))
def test_a_random_table_loses_no_word_at_any_width(seed):
    rng = random.Random(seed)
    table = Table(title=f"table {seed}")
    n_cols = rng.randint(1, 12)
    headers = [" ".join(random_word(rng)[:12] for _ in range(rng.randint(1, 3))) for _ in range(n_cols)]
    for h in headers:
        table.add_column(h, justify=rng.choice(["left", "right"]))
    cells = [
        [" ".join(random_word(rng) for _ in range(rng.randint(1, 3))) for _ in range(n_cols)]
        for _ in range(rng.randint(1, 6))
    ]
    for row in cells:
        table.add_row(*row)
    width = rng.randint(40, 160)
    out = render(table, width)
    assert "…" not in out
    for text in [*headers, *(c for row in cells for c in row)]:
        for word in text.split():
            assert whole(word, out), f"{word!r} is not whole at width {width}:\n{out}"
    for line in out.splitlines():  # a table line fits; only a stacked `label: value` line may be longer
        assert len(line) <= width or not any(c in line for c in "┃│━─"), out


def test_a_table_that_fits_is_printed_as_rich_prints_it():
    table = Table(title="t")
    table.add_column("a")
    table.add_column("b", justify="right")
    table.add_row("layers.0", "+0.00123")
    from rich.console import Console

    plain = io.StringIO()
    Console(file=plain, width=80, soft_wrap=True, color_system=None).print(table)
    assert render(table, 80) == plain.getvalue()


def test_many_columns_of_numbers_are_wrapped_into_parts_with_the_labels_again():
    table = Table(title="per layer")
    table.add_column("statistic")
    names = [f"blocks.{i}.attn.weight" for i in range(10)]
    for name in names:
        table.add_column(name, justify="right")
    table.add_row("W mean", *(f"{-1.5e-5 * (i + 1):+.3g}" for i in range(10)))
    table.add_row("drift / σ₀", *(f"{0.0012 * i:+.4f}" for i in range(10)))
    out = render(table, 80)
    assert "…" not in out and "(part 1 of" in out
    assert out.count("W mean") > 1  # the row labels in every part
    assert all(whole(n, out) for n in names)
    assert all(len(line) <= 80 for line in out.splitlines())


@pytest.fixture(scope="module")
def ticket(tmp_path_factory):
    out = tmp_path_factory.mktemp("t") / "t.safetensors"
    args = ["extract", *DATA, "--model", "mlp:64-16-10", "--epochs", "1", "--out", str(out), "--quiet"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return out


def values(doc: object) -> list[str]:
    """The scalar strings and integers of a --json document (names, hashes, counts)."""
    if isinstance(doc, dict):
        return [v for x in doc.values() for v in values(x)]
    if isinstance(doc, list):
        return [v for x in doc for v in values(x)]
    if isinstance(doc, str) and doc and " " not in doc and len(doc) < 100:
        return [doc]
    return []


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.parametrize(
    "args",
    [
        ["inspect", "{t}"],
        ["evaluate", "{t}"],
        ["export", "{t}", "--format", "csr", "--out", "{d}/c.safetensors", "--force"],
        ["list", "settings"],
        ["list", "models"],
        ["bench", "{t}", "--batch", "1,8,64", "--repeats", "3", "--forms", "sparse,bsr,2:4"],
        ["bench", "{t}", "{t2}", "--batch", "1,8,64", "--repeats", "3", "--forms", "sparse"],
    ],
    ids=lambda a: "-".join(a[:2]) if isinstance(a, list) else a,
)
def test_command_tables_cut_nothing(args, width, ticket, tmp_path):
    if "{t2}" in args:  # a second ticket (a copy), for the one-row-each table
        (tmp_path / "copy.safetensors").write_bytes(ticket.read_bytes())
    args = [a.format(t=ticket, d=tmp_path, t2=tmp_path / "copy.safetensors") for a in args]
    r = runner.invoke(app, [*args, "--quiet"], env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout
    if args[0] == "inspect":  # every name and hash the ticket records is shown whole
        doc = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
        for name in {doc["weights_sha256"], *(m["name"] for m in doc["layers"])}:
            assert whole(name, r.stdout), f"{name} is not whole:\n{r.stdout}"


@pytest.mark.parametrize("width", [80, 60])
@pytest.mark.slow
def test_drift_statistics_of_a_deep_model_cut_nothing(width):
    model = "mlp:64-" + "-".join(["16"] * 9) + "-10"  # ten layers: ten columns of numbers
    args = ["drift", "--model", model, "--dataset", "digits", "--batch-size", "64", "--steps", "1", "--log-every", "1"]
    r = runner.invoke(app, [*args, "--quiet"], env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout
    assert all(whole(f"layers.{i}", r.stdout) for i in range(10)), r.stdout
    for line in r.stdout.splitlines():
        assert len(line) <= width or not any(c in line for c in "┃│━─"), r.stdout
