"""The error path and what reaches the terminal: an unexpected exception is one `internal error:` line and exit 70
(the traceback only with TICKET_DEBUG=1); text from a ticket, a path or an option is printed literally (Rich
markup is text, control characters are escaped) in tables and error lines alike; --json is strict JSON (NaN and
Infinity become null); a closed stdout or stderr ends quietly with exit 141."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hostile import assert_clean, child, cli

from ticketcli.drift import run as drift_core
from ticketcli.export import run as export_core
from ticketcli.report import console
from ticketcli.report import tables as report_tables
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import inspect as runs_inspect
from ticketcli.sweep import run as sweep_run
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.weak import run as weak

INTERNAL = "rerun with TICKET_DEBUG=1 for the traceback"
HOSTILE_TEXT = "[bold red]x[/oops] :smile: \x1b[2J\x1b]0;pwned\x07 \r\b\x9b31m \u202eevil"  # markup, emoji, controls
RAW_CONTROLS = ("\x1b", "\x07", "\r", "\b", "\x9b", "\u202e")


def rewritten(src: Path, dst: Path, **fields) -> Path:
    """The ticket at `src` with some metadata fields replaced, written by the real writer."""
    tk = ticket_io.load(src)
    for key, value in fields.items():  # each a JSON object, made into the field's record as the reader makes it
        setattr(tk, key, type(getattr(tk, key)).of(value))
    ticket_io.save(tk, dst, overwrite=True)
    return dst


def raise_(exc: BaseException):
    def boom(*args, **kwargs):
        raise exc

    return boom


# ---- internal errors: exit 70, one line ------------------------------------------------------------------------


def command_args(command: str, ticket: Path, tmp: Path) -> list[str]:
    """Options that get each command past parsing and into its core function."""
    return {
        "inspect": ["inspect", str(ticket)],
        "evaluate": ["evaluate", str(ticket), "--device", "cpu"],
        "export": ["export", str(ticket), "--format", "masks", "--out", str(tmp / "x.safetensors")],
        "extract": [
            "extract",
            "--method",
            "random",
            "--dataset",
            "digits",
            "--model",
            "mlp:64-13-10",
            "--out",
            str(tmp / "x.safetensors"),
            "--quiet",
            "--device",
            "cpu",
        ],
        "train-weak": ["train-weak", str(ticket), "--device", "cpu", "--quiet"],
        "drift": ["drift", "--dataset", "digits", "--model", "mlp:64-16-10", "--steps", "2", "--quiet"],
        "sweep-k": ["sweep-k", "--dataset", "digits", "--seeds", "0", "--epochs", "1", "--quiet"],
    }[command]


CORE = {
    "inspect": (runs_inspect, "inspect_ticket"),
    "evaluate": (runs_evaluate, "evaluate_ticket"),
    "export": (export_core, "export_ticket"),
    "extract": (runs_extract, "extract_ticket"),
    "train-weak": (weak, "train_weak"),
    "drift": (drift_core, "run_drift"),
    "sweep-k": (sweep_run, "sweep_k"),
}


@pytest.mark.parametrize("command", list(CORE))
def test_a_bug_in_any_command_is_one_internal_error_line_and_exit_70(command, ticket, tmp_path, monkeypatch):
    module, name = CORE[command]
    monkeypatch.setattr(module, name, raise_(RuntimeError("boom from a test")))
    run = cli(*command_args(command, ticket, tmp_path), env={"TICKET_DEBUG": ""})
    assert_clean(run, 70, prefix="internal error:", folder=tmp_path)
    assert run.stderr.strip() == f"internal error: RuntimeError: boom from a test; {INTERNAL}"


@pytest.mark.parametrize(
    "exc, shown",
    [
        (KeyError("layers.9.weight"), "KeyError: 'layers.9.weight'"),
        (ZeroDivisionError(), "ZeroDivisionError;"),  # no message: the type alone
        (MemoryError(), "MemoryError;"),
        (EOFError("ran out of input"), "EOFError: ran out of input"),  # Typer turns EOFError into its Abort
        (OSError(5, "Input/output error"), "OSError: [Errno 5] Input/output error"),
        (BrokenPipeError(32, "a worker's pipe"), "BrokenPipeError"),  # not our stdout: a bug, not `| head`
        (RuntimeError("first line\x1b[2J\nsecond line"), "RuntimeError: first line\\x1b[2J;"),
    ],
)
def test_every_kind_of_unexpected_exception_is_one_line(exc, shown, ticket, monkeypatch):
    monkeypatch.setattr(runs_inspect, "inspect_ticket", raise_(exc))
    run = cli("inspect", str(ticket), env={"TICKET_DEBUG": ""})
    assert_clean(run, 70, prefix="internal error:", contains=shown)
    assert INTERNAL in run.stderr and "\x1b" not in run.stderr


def test_a_bug_while_printing_the_table_is_an_internal_error_too(ticket, monkeypatch):
    monkeypatch.setattr(report_tables, "inspect_table", raise_(TypeError("unsupported format string")))
    assert_clean(
        cli("inspect", str(ticket), env={"TICKET_DEBUG": ""}),
        70,
        prefix="internal error:",
        contains="TypeError: unsupported format string",
    )


@pytest.mark.parametrize("debug", ["1", "yes"])
def test_ticket_debug_adds_the_traceback(debug, ticket, monkeypatch):
    monkeypatch.setattr(runs_inspect, "inspect_ticket", raise_(RuntimeError("boom from a test")))
    run = cli("inspect", str(ticket), env={"TICKET_DEBUG": debug})
    assert run.exit_code == 70 and run.exception is None
    assert "Traceback (most recent call last)" in run.stderr and "boom from a test" in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last == "internal error: RuntimeError: boom from a test; the traceback is above"


def test_ticket_debug_0_is_off(ticket, monkeypatch):
    monkeypatch.setattr(runs_inspect, "inspect_ticket", raise_(RuntimeError("boom")))
    assert_clean(cli("inspect", str(ticket), env={"TICKET_DEBUG": "0"}), 70, prefix="internal error:")


def test_no_arguments_print_the_help_once(tmp_path):
    run = cli()
    assert run.exit_code == 2 and run.stdout.count("Usage:") == 1 and "Traceback" not in run.stderr


# ---- literal text: markup and control characters ---------------------------------------------------------------


@pytest.mark.parametrize(
    "args, shown",
    [
        (
            ["extract", "--model", "[bold red]mlp[/oops]", "--dataset", "digits", "--out", "{tmp}/x.safetensors"],
            "[bold red]mlp[/oops]",
        ),
        (["inspect", "{tmp}/[/oops][bold]missing.safetensors"], "[/oops][bold]missing.safetensors"),
        (["evaluate", "{tmp}/[link=https:example.com]t[/link].safetensors"], "[link=https:example.com]t[/link]"),
    ],
)
def test_markup_in_options_and_paths_is_printed_as_text(args, shown, tmp_path):
    run = cli(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert_clean(run, 2, contains=shown)


@pytest.mark.parametrize(
    "char, escaped",
    [
        ("\x1b", "\\x1b"),
        ("\r", "\\x0d"),
        ("\b", "\\x08"),
        ("\x07", "\\x07"),
        ("\x7f", "\\x7f"),
        ("\x9b", "\\x9b"),
        ("\u202e", "\\u202e"),
        ("\x0c", "\\x0c"),
    ],
)
def test_control_characters_in_an_error_line_are_escaped(char, escaped, tmp_path):
    run = cli("inspect", str(tmp_path / f"a{char}[31mb.safetensors"))
    assert_clean(run, 2, contains=f"a{escaped}[31mb")
    assert char not in run.stderr


def test_a_newline_in_a_path_keeps_the_error_on_one_line(tmp_path):
    assert_clean(cli("inspect", str(tmp_path / "a\nerror: forged line.safetensors")), 2, contains="forged line")


def _assert_literal(text: str) -> None:
    assert "[bold red]x[/oops]" in text and ":smile:" in text and "\\x1b[2J" in text and "\\u202e" in text
    assert not any(c in text for c in RAW_CONTROLS), repr(text)


def test_ticket_metadata_is_printed_literally_by_inspect(ticket, tmp_path):
    path = rewritten(ticket, tmp_path / "weird.safetensors", created_by={"ticketcli": HOSTILE_TEXT})
    run = cli("inspect", str(path), env={"COLUMNS": "400"})
    assert run.exit_code == 0 and run.exception is None, run.stderr
    _assert_literal(run.stdout)


@pytest.mark.parametrize("command", ["inspect", "evaluate", "export"])
def test_a_path_with_markup_and_escapes_is_printed_literally(command, ticket, tmp_path):
    path = tmp_path / f"t{HOSTILE_TEXT.replace('/', '|')}.safetensors"
    path.write_bytes(ticket.read_bytes())
    args = {
        "inspect": ["inspect", str(path)],
        "evaluate": ["evaluate", str(path), "--device", "cpu"],
        "export": ["export", str(path), "--format", "masks", "--out", str(path) + ".out"],
    }[command]  # names --out
    run = cli(*args, env={"COLUMNS": "1000"})
    assert run.exit_code == 0 and run.exception is None, run.stderr
    assert "[bold red]x[|oops]" in run.stdout and "\\x1b[2J" in run.stdout
    assert not any(c in run.stdout + run.stderr for c in RAW_CONTROLS), repr(run.stdout)


def test_literal_keeps_ordinary_text():
    text = "drift / σ₀ → 90.00% [1/3] tab\tend"
    assert console.literal(text) == "drift / σ₀ → 90.00% [1/3] tab\\x09end"


# ---- strict JSON -------------------------------------------------------------------------------------------------


def _refuse(constant: str):
    raise AssertionError(f"{constant} is not JSON")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("command", ["inspect", "evaluate"])
def test_json_output_is_strict_when_a_ticket_holds_non_finite_metrics(command, value, ticket, tmp_path):
    """A stored loss may be non-finite (a diverged network); accuracies are refused by the reader when they are."""
    tk = ticket_io.load(ticket)
    stored = tk.metrics.to_json()
    metrics = {**stored, "test": {**stored["test"], "loss": value}}
    path = rewritten(ticket, tmp_path / "nan.safetensors", metrics=metrics)
    assert ("NaN" if math.isnan(value) else "Infinity") in path.read_bytes().decode("latin-1")  # as json writes it
    run = cli(command, str(path), "--json", *(["--device", "cpu"] if command == "evaluate" else []))
    assert run.exit_code == 0 and run.exception is None, run.stderr
    doc = json.loads(run.stdout, parse_constant=_refuse)
    if command == "inspect":
        assert doc["metrics"]["test"]["loss"] is None
    else:  # evaluate re-measures the loss (finite) and reports the stored accuracy untouched
        stored = doc["stored"]["metrics"]["test"]["accuracy"]
        assert math.isfinite(doc["metrics"]["test"]["loss"]) and stored == tk.metrics.test.accuracy


def test_the_table_of_a_ticket_with_non_finite_metrics_prints(ticket, tmp_path):
    tk = ticket_io.load(ticket)
    stored = tk.metrics.to_json()
    path = rewritten(
        ticket, tmp_path / "nan.safetensors", metrics={**stored, "test": {**stored["test"], "loss": math.nan}}
    )
    run = cli("inspect", str(path))
    assert run.exit_code == 0 and run.exception is None and "Traceback" not in run.stderr, run.stderr


def test_print_json_replaces_non_finite_numbers_everywhere(capsys):
    console.print_json({"a": [1.0, math.nan, {"b": -math.inf}], "c": (math.inf,), "d": "NaN", "e": 2})
    doc = json.loads(capsys.readouterr().out, parse_constant=_refuse)
    assert doc == {"a": [1.0, None, {"b": None}], "c": [None], "d": "NaN", "e": 2}


# ---- closed stdout / stderr (real child processes and pipes) ---------------------------------------------------


@pytest.mark.parametrize(
    "args", [["inspect", "{ticket}"], ["extract", "--help"], ["--version"]], ids=["inspect-table", "help", "version"]
)  # Rich's writes, Typer's help, a plain write
@pytest.mark.slow
def test_a_closed_stdout_ends_quietly_with_141(args, ticket):
    run = child(*(a.replace("{ticket}", str(ticket)) for a in args), closed_stdout=True)
    assert_clean(run, 141, prefix=None)


def test_a_closed_stderr_ends_quietly_with_141(tmp_path):
    run = child("inspect", str(tmp_path / "missing.safetensors"), closed_stderr=True)
    assert run.exit_code == 141 and run.stdout == "", (run.exit_code, run.stdout)
