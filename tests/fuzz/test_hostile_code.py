"""No code runs because of a ticket: a ticket that names a model factory (`pkg.module:function`) -- a module whose
import leaves a marker, or a standard-library trick such as sys:exit, os:abort, signal:pause, builtins:exec -- is
refused by every reader (evaluate, train-weak, export, drift --ticket) with exit 2 and one line naming the module
and how to opt in, before anything is imported or called; inspect and extract --match-sparsity never import. With
the opt-in (--trust-model-code, or --model naming the same factory) a real factory works, and a built-in function
or a factory's sys.exit() still cannot turn a failed gate into exit 0."""

from __future__ import annotations

import code
import json
import os
import pdb
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from harness import run_ok
from hostile import assert_clean, child, cli, snapshot

from ticketcli.runs import extract as runs_extract
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import ModelRecord

MARKER_SOURCE = """
import pathlib
pathlib.Path(__file__).with_name(pathlib.Path(__file__).stem + ".imported").write_text("imported")
from torch import nn
def build_net():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
"""
TRICKS = [
    "{mod}:build_net",
    "sys:exit",
    "os:abort",
    "os:_exit",
    "signal:pause",
    "builtins:exec",
    "builtins:breakpoint",
    "builtins:input",
    "this:s",
    "subprocess:call",
    "pdb:set_trace",
    "code:interact",
    "os:system",
]
READERS = {  # reader -> its command for a ticket, and where export writes
    "evaluate": lambda t, out: ["evaluate", t, "--device", "cpu", "--json"],
    "train-weak": lambda t, out: ["train-weak", t, "--epochs", "1", "--device", "cpu", "--quiet", "--json"],
    "export": lambda t, out: ["export", t, "--format", "masks", "--out", out, "--json"],
    "drift": lambda t, out: ["drift", "--ticket", t, "--steps", "1", "--device", "cpu", "--quiet", "--json"],
}
RUNNABLE = ["evaluate", "train-weak", "export"]  # drift takes built-in models only, so no factory ticket runs there
GATE = ["--device", "cpu", "--min-accuracy", "0.99"]  # a gate the ticket fails: exit 1, or 2 when refused


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A folder on sys.path holding a marker-writing factory module and a real ticket extracted from it."""
    d = tmp_path_factory.mktemp("hostile-code")
    mod = f"marker_{d.name.replace('-', '_')}"
    (d / f"{mod}.py").write_text(MARKER_SOURCE)
    for name, body in (
        ("exit_on_import", "import sys\nsys.exit(0)\n"),
        ("exit_on_call", "import sys\ndef build_net():\n    sys.exit(0)\n"),
    ):
        (d / f"{mod}_{name}.py").write_text(body)
    sys.path.insert(0, str(d))
    spec = build_extract_spec(
        merge_settings(
            {
                "method": "random",
                "dataset": "digits",
                "model": f"{mod}:build_net",
                "n_extract": 64,
                "n_val": 32,
                "sparsity": 0.5,
            },
            None,
        )
    )
    runs_extract.extract_ticket(spec, out=d / "factory.safetensors")
    yield d, mod
    sys.path.remove(str(d))


@pytest.fixture(autouse=True)
def fresh_module(lab):
    """Each case starts with the factory module not imported and no marker: an import would leave one."""
    d, mod = lab
    for name in [m for m in sys.modules if m.startswith(mod)] + ["this"]:
        sys.modules.pop(name, None)
    (d / f"{mod}.imported").unlink(missing_ok=True)
    yield


@pytest.fixture
def tripwires(monkeypatch):
    """The dangerous standard functions, replaced by recorders: a regression calls one and the test says so
    (instead of the test process aborting, pausing or exiting)."""
    calls: list[str] = []

    def wire(owner, name):
        def tripped(*args, **kwargs):
            calls.append(f"{getattr(owner, '__name__', owner)}.{name}")
            raise RuntimeError(f"tripwire {name}")

        monkeypatch.setattr(owner, name, tripped)

    for owner, name in (
        (os, "abort"),
        (os, "_exit"),
        (os, "system"),
        (signal, "pause"),
        (subprocess, "call"),
        (pdb, "set_trace"),
        (code, "interact"),
        (sys, "breakpointhook"),
    ):
        wire(owner, name)
    return calls


def ticket_naming(lab, factory: str, tmp_path: Path) -> Path:
    """The real factory ticket with its model replaced by `factory` (written by the real writer)."""
    d, mod = lab
    tk = ticket_io.load(d / "factory.safetensors")
    named = factory.format(mod=mod)
    tk.model = ModelRecord.of({**tk.model.to_json(), "spec": named, "factory": named})
    out = tmp_path / "named.safetensors"
    ticket_io.save(tk, out)
    return out


def marker(lab) -> Path:
    d, mod = lab
    return d / f"{mod}.imported"


@pytest.mark.parametrize("trick", TRICKS)
@pytest.mark.parametrize("reader", list(READERS))
def test_a_ticket_alone_never_imports_or_calls(lab, tmp_path, tripwires, reader, trick):
    path = ticket_naming(lab, trick, tmp_path)
    out = tmp_path / "export.safetensors"
    run = cli(*READERS[reader](str(path), str(out)))
    module = trick.format(mod=lab[1]).partition(":")[0]
    assert_clean(
        run,
        2,
        contains=f"would import and run module {module!r}",
        markers=(marker(lab),),
        unchanged=snapshot(out),
        folder=tmp_path,
    )
    assert "--trust-model-code" in run.stderr and "this" not in sys.modules and "Beautiful is" not in run.stdout
    assert tripwires == []


@pytest.mark.parametrize("opt_in", ["--trust-model-code", "--model"])
@pytest.mark.parametrize("reader", RUNNABLE)
def test_opting_in_runs_the_factory(lab, tmp_path, reader, opt_in):
    """The opt-in works, and the marker proves these tests would see an import."""
    d, mod = lab
    flags = [opt_in] if opt_in == "--trust-model-code" else [opt_in, f"{mod}:build_net"]
    run = run_ok(*READERS[reader](str(d / "factory.safetensors"), str(tmp_path / "m.safetensors")), *flags)
    assert marker(lab).exists() and json.loads(run.stdout)


@pytest.mark.parametrize("opt_in", ["--trust-model-code", "--model"])
def test_drift_never_imports_a_factory_even_with_opt_in(lab, opt_in):
    d, mod = lab
    flags = [opt_in] if opt_in == "--trust-model-code" else [opt_in, f"{mod}:build_net"]
    run = cli(*READERS["drift"](str(d / "factory.safetensors"), ""), *flags)
    assert_clean(run, 2, contains="drift measures models with activation sites", markers=(marker(lab),))


@pytest.mark.parametrize(
    "given,needle",
    [
        ("{mod}_other:build_net", "is not this ticket's model"),
        ("{mod}:other", "is not this ticket's model"),
        ("mlp:64-10", "is not this ticket's model"),
        ("mlp:1x", "invalid model spec"),
    ],
)
@pytest.mark.parametrize("reader", [*RUNNABLE, "drift"])
def test_model_flag_must_name_the_tickets_own_factory(lab, tmp_path, reader, given, needle):
    d, mod = lab
    out = tmp_path / "export.safetensors"
    run = cli(*READERS[reader](str(d / "factory.safetensors"), str(out)), "--model", given.format(mod=mod))
    assert_clean(run, 2, contains=needle, markers=(marker(lab),), unchanged=snapshot(out), folder=tmp_path)


def test_sys_exit_cannot_pass_a_failing_gate(lab, tmp_path, tripwires):
    """Before: a ticket naming sys:exit turned `evaluate --min-accuracy` into exit 0. Now it is refused."""
    run = cli("evaluate", str(ticket_naming(lab, "sys:exit", tmp_path)), *GATE)
    assert_clean(run, 2, contains="would import and run module 'sys'")


# Python's own modules, torch and ticket's own libraries, every kind of callable: the opt-in trusts none of them
FOREIGN = [
    *(t for t in TRICKS if not t.startswith("{mod}")),
    "http.server:test",
    "antigravity:x",  # acts when imported: refused by name, before the import
    "idlelib.idle:x",
    "xml.dom.minidom:parseString",
    "torch.nn:Linear",
    "torch.utils.bottleneck.__main__:main",
    "ticketcli.cli.app:main",
    "__main__:main",
    "numpy:zeros",
    "typer:run",
]


@pytest.mark.parametrize("trick", FOREIGN)
def test_opt_in_refuses_the_standard_library_and_torch(lab, tmp_path, tripwires, trick):
    """--trust-model-code trusts the user's module, not the standard library (code:interact would read Python from
    stdin, http.server:test would serve the folder), torch or ticket itself: refused by module name, before any
    import, whatever the callable (function, class, built-in), and a failing gate stays a failure."""
    module = trick.partition(":")[0]
    fresh = module not in sys.modules
    run = cli("evaluate", str(ticket_naming(lab, trick, tmp_path)), *GATE, "--trust-model-code")
    assert_clean(run, 2, contains="not a model factory of your own")
    assert tripwires == [] and (not fresh or module not in sys.modules)  # not even imported


@pytest.mark.parametrize(
    "reexport",
    [
        "from pdb import Pdb as build_net",
        "from textwrap import dedent as build_net",
        "from torch.nn import Flatten as build_net",
    ],
)
def test_a_user_module_re_exporting_a_foreign_callable_is_refused(lab, tmp_path, tripwires, reexport):
    """The rule follows where the callable was defined, not only the module named: `from code import interact as
    build_net` in the user's module is still code.interact (harmless stand-ins here: a regression must not run
    a debugger)."""
    d, mod = lab
    name = f"{mod}_reexport_{len(reexport)}"
    (d / f"{name}.py").write_text(reexport + "\n")
    run = cli("evaluate", str(ticket_naming(lab, f"{name}:build_net", tmp_path)), *GATE, "--trust-model-code")
    assert_clean(run, 2, contains="not a model factory of your own")
    assert tripwires == []


def test_a_model_flag_naming_the_standard_library_is_refused(tmp_path, tripwires):
    """The same rule for --model on extract: the flag is an opt-in too, and trusts only the user's module."""
    run = cli("extract", "--model", "code:interact", "--dataset", "digits", "--out", str(tmp_path / "t.safetensors"))
    assert_clean(run, 2, contains="not a model factory of your own", folder=tmp_path)
    assert tripwires == [] and not (tmp_path / "t.safetensors").exists()


@pytest.mark.parametrize("which", ["exit_on_import", "exit_on_call"])
def test_a_factory_calling_sys_exit_is_an_error_not_exit_0(lab, tmp_path, which):
    run = cli("evaluate", str(ticket_naming(lab, f"{{mod}}_{which}:build_net", tmp_path)), *GATE, "--trust-model-code")
    assert_clean(run, 2, contains="SystemExit")


@pytest.mark.parametrize("args", [["inspect"], ["inspect", "--json"]])
def test_inspect_never_imports(lab, args):
    d, _ = lab
    run_ok(*args, str(d / "factory.safetensors"))
    assert not marker(lab).exists()


def test_match_sparsity_never_imports(lab, tmp_path):
    d, _ = lab
    run = run_ok(
        "extract",
        "--method",
        "random",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-10",
        "--n-extract",
        "64",
        "--n-val",
        "32",
        "--match-sparsity",
        str(d / "factory.safetensors"),
        "--out",
        str(tmp_path / "m.safetensors"),
        "--quiet",
        "--json",
    )
    assert not marker(lab).exists()
    assert json.loads(run.stdout)["sparsity"]["requested"] == pytest.approx(0.5, abs=0.02)


# ---- real processes: what the in-process tripwires stand in for ---------------------------------------------


@pytest.mark.parametrize("trick", ["os:abort", "signal:pause", "code:interact", "pdb:set_trace"])
@pytest.mark.slow
def test_standard_library_tricks_with_opt_in_in_a_real_process(lab, tmp_path, trick):
    """The real os.abort / signal.pause / code.interact / pdb.set_trace (no tripwires): refused as the standard
    library's even when the user opts in, with stdin open (an interactive console would wait on it)."""
    path = ticket_naming(lab, trick, tmp_path)
    run = child("evaluate", str(path), "--device", "cpu", "--trust-model-code", timeout=90, stdin=subprocess.PIPE)
    assert_clean(run, 2, contains="not a model factory of your own")


@pytest.mark.slow
def test_a_module_beside_the_ticket_is_not_imported(lab, tmp_path):
    """The realistic share: a ticket and a .py file in one folder, `python -m ticketcli evaluate` run inside it
    (the current directory is on sys.path): the module is not imported."""
    d, mod = lab
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "evil_model.py").write_text(textwrap.dedent(MARKER_SOURCE))
    tk = ticket_io.load(d / "factory.safetensors")
    tk.model = ModelRecord.of({**tk.model.to_json(), "spec": "evil_model:build_net", "factory": "evil_model:build_net"})
    ticket_io.save(tk, shared / "t.safetensors")
    run = child("evaluate", "t.safetensors", "--device", "cpu", cwd=shared, timeout=90)
    assert_clean(run, 2, contains="would import and run module 'evil_model'", markers=(shared / "evil_model.imported",))
