"""Every default is written once, in the spec dataclasses: for every option of every command, the default its help
shows ("Default: X."), the option's own value and the config-file default (specs.EXTRACT_DEFAULTS) all equal the
dataclass field the option stands for. The table below says which field that is, independently of the code."""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import MISSING, fields
from inspect import signature
from pathlib import Path
from typing import Any

import pytest
import typer

from ticketcli.cli.app import app
from ticketcli.data.registry import DATASETS
from ticketcli.drift.spec import ControlSpec, DriftSpec, Features, RelufySpec
from ticketcli.export import request as export_request
from ticketcli.methods.registry import own_options
from ticketcli.models.budget import MEMORY_SHARE
from ticketcli.runtime import world
from ticketcli.settings.run import EXTRACT_DEFAULTS
from ticketcli.specs.bench import BenchSpec
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelPolicy, ModelSpec, RunSpec
from ticketcli.specs.text import TextSpec
from ticketcli.specs.weak import WeakSpec

DESCRIBED = "described"  # the option's value is None and its help describes what happens (e.g. "no plot")

# Options whose default is not a MethodSpec field of the same name; MethodSpec's own options are looked up by name.
SETTINGS: dict[str, Any] = {
    "method": (MethodSpec, "name"),
    "seed": (InitSpec, "seed"),
    "init": (InitSpec, "scheme"),
    "init_k": (InitSpec, "k"),
    "bias": (ModelSpec, "bias"),
    "dataset": (DataSpec, "name"),
    "n_extract": (DataSpec, "n_extract"),
    "n_val": (DataSpec, "n_val"),
    "download": (DataSpec, "download"),
    "weights": (RunSpec, "weights"),
    "device": (RunSpec, "device"),
    "max_params": (RunSpec, "max_params"),
    "max_memory": (RunSpec, "max_memory"),  # None: half the machine's physical memory (budget.MEMORY_SHARE)
    "model": DESCRIBED,  # the paper's MLP sized to the dataset
    "match_sparsity": (MethodSpec, "matched_to"),
    "text": DESCRIBED,  # --dataset text: the fortunes files
}
# The settings of the config file no spec field holds, with their defaults.
UNSPECCED = {
    "model": None,
    "data_dir": None,
    "match_sparsity": None,
    "match_sparsity_per_layer": False,
    "threads": None,
    "text": None,  # resolved with the model (settings/lm.py): the file's absolute path
}
# --threads (every command that computes): not given keeps torch's own count (sweep-k: one per run); help says so
TICKET_READER = {
    "max_params": (ModelPolicy, "max_params"),
    "max_memory": (ModelPolicy, "max_memory"),
    "device": (RunSpec, "device"),
    "threads": DESCRIBED,
}
TEXT_READER = {**TICKET_READER, "text": DESCRIBED}  # a text ticket's own text (drift's --text is its own)
SOURCES: dict[str, dict[str, Any]] = {
    "extract": {
        **SETTINGS,
        "checkpoint_every": DESCRIBED,
        "out": ("own", None),  # a command-line-only option: the help shows its own value
        "threads": DESCRIBED,
        "rendezvous_timeout": ("const", world.RENDEZVOUS_TIMEOUT_S),
        "log_to": DESCRIBED,  # no tracking
    },
    "sweep-k": {
        **SETTINGS,
        "layerwise": ("sweep.plan", "PAPER_LAYERWISE"),
        "band": ("sweep.summary", "PAPER_BAND"),
        "densities": ("sweep.plan", "PAPER_DENSITIES"),
        "seeds": ("own", None),  # sweep-k's own options: the help shows the option's value
        "workers": ("own", None),
        "threads": DESCRIBED,
        "executor": ("own", None),
        "ray_address": DESCRIBED,
        "plot": DESCRIBED,
        "log_to": DESCRIBED,
    },
    "train-weak": {
        **TEXT_READER,
        "epochs": (WeakSpec, "epochs"),
        "lr": (WeakSpec, "optim.lr"),
        "batch_size": (WeakSpec, "batch_size"),
        "precision": (WeakSpec, "precision"),
        "rendezvous_timeout": ("const", world.RENDEZVOUS_TIMEOUT_S),
        "out": DESCRIBED,
        "plot": DESCRIBED,
        "log_to": DESCRIBED,
    },
    "drift": {
        **TICKET_READER,
        **{f: (DriftSpec, f) for f in ("activation", "clip", "inputs", "loss", "batch_size", "steps", "log_every")},
        **{f: (DriftSpec, f) for f in ("probe_size", "zero_threshold", "seeds", "device")},
        "optimizer": (DriftSpec, "optim.name"),
        "lr": (DriftSpec, "optim.lr"),
        "momentum": (DriftSpec, "optim.momentum"),
        "dataset": (DataSpec, "name"),
        "model": DESCRIBED,
        "act_sparsity": DESCRIBED,  # no control
        "act_target": (ControlSpec, "target"),
        "freeze_stats_after": DESCRIBED,  # never
        "relufy_epochs": (RelufySpec, "epochs"),
        "workers": (Features, "workers"),
        "log_to": DESCRIBED,
        "checkpoint_every": DESCRIBED,  # every --log-every steps
    },
    "evaluate": TEXT_READER,
    "bench": {
        **TEXT_READER,
        **{f: (BenchSpec, f) for f in ("repeats", "clock")},
        **{f: DESCRIBED for f in ("batch", "forms", "plot")},
    },
    "export": {**TEXT_READER, "layout": ("const", signature(export_request.check_format).parameters["layout"].default)},
    "inspect": {"plot": DESCRIBED},  # no plot unless asked
    "compare": {"plot": DESCRIBED},
    "list": {},
}
CONFIG_COMMANDS = ("extract", "sweep-k")  # the commands that read --config TOML files
COMMANDS = typer.main.get_command(app).commands


def field_default(cls: type, path: str) -> Any:
    """The default of a dataclass field, following dots into nested dataclass defaults ("optim.lr")."""
    name, _, rest = path.partition(".")
    f = next(f for f in fields(cls) if f.name == name)
    value = f.default_factory() if f.default_factory is not MISSING else f.default
    for part in rest.split(".") if rest else ():
        value = getattr(value, part)
    return value


def source(command: str, option: str) -> Any:
    """Where the option's default lives: (dataclass, field), ("sweep.<module>", constant), ("own", None), DESCRIBED
    or None."""
    table = SOURCES[command]
    if option in table:
        return table[option]
    if command in CONFIG_COMMANDS and option in {f.name for f in fields(MethodSpec)}:
        return (MethodSpec, option)
    if command in CONFIG_COMMANDS and option in {o.name for o in own_options()}:  # a method's own: its declaration
        return ("const", next(o.default for o in own_options() if o.name == option))
    return None


def expected(src: Any, param: Any) -> Any:
    kind, name = src
    if kind in ("sweep.plan", "sweep.summary"):
        return getattr(importlib.import_module(f"ticketcli.{kind}"), name)
    if kind == "own":
        return param.default
    if kind == "const":
        return name
    return field_default(kind, name)


def shown(help_text: str | None) -> str | None:
    m = re.search(r" Default: (.*)\.$", help_text or "")
    return None if m is None else m.group(1)


def parse_like(text: str, like: Any) -> Any:
    """The help's default text as a value of the type of `like` (the dataclass default)."""
    if isinstance(like, Path):
        return Path(text)
    if isinstance(like, bool):
        return {"no bias": False, "bias": True}.get(text, text)
    if isinstance(like, tuple):
        parts = re.split(r"[,-]", text.removeprefix("the paper's "))  # "0.9,0.999", "0.85-0.95", "the paper's 0.01,..."
        return tuple(type(like[0])(p) for p in parts)
    if isinstance(like, (int, float)):
        return type(like)(text)
    return text


def split_sizes(text: str) -> dict[str, int]:
    """'5000 (cifar10, mnist), 1000 (digits)' -> {"cifar10": 5000, "mnist": 5000, "digits": 1000}."""
    return {n: int(size) for size, names in re.findall(r"(\d+) \(([^)]*)\)", text) for n in names.split(", ")}


CASES = [(c, p) for c in sorted(COMMANDS) for p in COMMANDS[c].params if p.name != "help"]


@pytest.mark.parametrize("command,param", CASES, ids=[f"{c}--{p.name}" for c, p in CASES])
def test_help_default_is_the_spec_default(command, param):
    text, src = shown(param.help), source(command, param.name)
    if src is None:
        assert text is None, f"`ticket {command} --{param.name}` shows a default: add where it lives to SOURCES"
        return
    if src == DESCRIBED:
        assert param.default is None and text, f"--{param.name}: None, with a help that says what happens"
        return
    want = expected(src, param)
    default = param.default
    if isinstance(default, str) and not isinstance(want, str):  # sweep-k's --band "0.85-0.95"
        default = parse_like(default, want)
    assert default in (None, want), "an option either falls back to the spec (None) or holds its default"
    if command in CONFIG_COMMANDS and param.name in EXTRACT_DEFAULTS:
        assert EXTRACT_DEFAULTS[param.name] == want, "the config file's default is the dataclass default"
    if text is None:
        assert param.is_flag or want is None, f"--{param.name} shows no default"
    elif want is None and param.name == "max_memory":  # resolved at run time from the machine
        assert text == "half of the machine's physical memory" and MEMORY_SHARE == 0.5
    elif want is None:
        assert param.name in ("n_extract", "n_val")  # the dataset's own split size
        assert split_sizes(text) == {n: getattr(DATASETS.get(n), param.name) for n in DATASETS.names()}
    else:
        assert parse_like(text, want) == want


def test_every_config_key_defaults_to_its_spec_field():
    """specs.EXTRACT_DEFAULTS is the dataclass defaults (plus the four settings no spec field holds)."""
    for key, value in EXTRACT_DEFAULTS.items():
        src = source("extract", key)
        if key in UNSPECCED:
            assert value == UNSPECCED[key], key
        else:
            assert src is not None and src != DESCRIBED, f"config key {key} has no spec field in SOURCES"
            assert value == expected(src, None), key


def test_the_table_sees_every_shown_default():
    """The parametrised test above really reads help texts (a renamed helper would otherwise pass vacuously)."""
    with_default = [(c, p.name) for c, p in CASES if shown(p.help) is not None]
    assert ("extract", "sparsity") in with_default and ("train-weak", "epochs") in with_default
    assert len(with_default) >= 70


# ---------------------------------------------------------------- each drift and train-weak default is written once
# The fields whose defaults `ticket drift` (with --act-sparsity, --relufy, --tradeoff) and `ticket train-weak` use,
# each with the names a setting for it goes by. Each literal stands in its dataclass field and nowhere else: not as
# a fallback for a setting of its name (`s.get("activation") or "relu"`, `0.7 if target is None else target`, `if
# workers is None: return 1`), not as a module constant or dict entry named like a default or like its setting
# (`ACT_TARGET_DEFAULT = 0.7`, `DRIFT_DEFAULTS = {...}`, `WEAK_EPOCHS = 40`), not in a hand-written help text
# ("Default: 512.").
DRIFT_FIELDS: list[tuple[type, str, tuple[str, ...]]] = [
    *((DriftSpec, f, (f,)) for f in ("inputs", "loss", "activation", "clip", "batch_size", "steps", "log_every")),
    *((DriftSpec, f, (f,)) for f in ("probe_size", "zero_threshold", "seeds", "device")),
    (DriftSpec, "optim.name", ("optimizer", "optim")),
    (DriftSpec, "optim.lr", ("lr",)),
    (DriftSpec, "optim.momentum", ("momentum",)),
    (DataSpec, "name", ("dataset",)),
    (ControlSpec, "target", ("target",)),
    (ControlSpec, "ema", ("ema",)),
    (RelufySpec, "epochs", ("epochs",)),
    (Features, "workers", ("workers",)),
    (TextSpec, "val_fraction", ("val_fraction",)),
]
WEAK_FIELDS: list[tuple[type, str, tuple[str, ...]]] = [
    (WeakSpec, "epochs", ("epochs",)),
    (WeakSpec, "batch_size", ("batch_size",)),
    (WeakSpec, "optim.lr", ("lr",)),
    (WeakSpec, "precision", ("precision",)),
]
PACKAGE = Path(__file__).resolve().parent.parent / "ticketcli"
SCANNED = {  # every module that builds, runs or shows the command's spec (the registries are torch-free, no copies)
    "drift": (
        DRIFT_FIELDS,
        [
            *sorted((PACKAGE / "drift").glob("*.py")),
            *sorted((PACKAGE / "cli").glob("drift*.py")),
            PACKAGE / "specs/text.py",
            PACKAGE / "data/text.py",
        ],
    ),
    "train-weak": (
        WEAK_FIELDS,
        [
            *sorted((PACKAGE / "weak").glob("*.py")),
            PACKAGE / "specs/weak.py",
            PACKAGE / "settings/weak.py",
            PACKAGE / "cli/train_weak.py",
        ],
    ),
}


def _literal(node: ast.AST) -> Any:
    """The value of a literal (a constant, or a tuple of constants), else a marker that equals nothing."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _literal


def _same(value: Any, default: Any) -> bool:
    """value is default (1 and 1.0 alike; True is not 1)."""
    return not isinstance(value, bool) and not isinstance(default, bool) and value == default


def default_copies(source: str, defaults: list[tuple[Any, tuple[str, ...]]]) -> list[tuple[int, str]]:
    """(line, what) for every place in `source` that writes one of `defaults` (value, names of its setting) as a
    default a second time."""

    def fallback(setting: ast.AST, value: ast.AST) -> bool:
        """`value` stands in for `setting` when that is not given: a copy if it is the default of a setting named
        in the code of `setting`."""
        code, v = ast.unparse(setting), _literal(value)
        return any(_same(v, d) and any(n in code for n in names) for d, names in defaults)

    shown = {show(d) for d, _ in defaults}
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    module_level = {id(stmt) for stmt in tree.body}  # constants; a class body's fields are the defaults themselves
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            if any(fallback(left, node.values[-1]) for left in node.values[:-1]):
                found.append((node.lineno, f"fallback `{ast.unparse(node)}`"))
        elif isinstance(node, ast.IfExp) and (tested := _none_test(node.test)) is not None:
            setting, is_none = tested
            if fallback(setting, node.body if is_none else node.orelse):
                found.append((node.lineno, f"fallback `{ast.unparse(node)}`"))
        elif isinstance(node, ast.If) and (tested := _none_test(node.test)) is not None and tested[1]:
            for stmt in node.body:
                if isinstance(stmt, ast.Return) and stmt.value is not None and fallback(tested[0], stmt.value):
                    found.append((stmt.lineno, f"fallback `return {ast.unparse(stmt.value)}`"))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and id(node) in module_level:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = " ".join(ast.unparse(t) for t in targets)
            values = node.value.values if isinstance(node.value, ast.Dict) else [node.value]
            for v in values:
                if any(_same(_literal(v), d) and _named(names, setting) for d, setting in defaults):
                    found.append((node.lineno, f"constant {names}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in re.finditer(r"Default: (.+?)\.(?:\s|$)", node.value):
                if m.group(1) in shown:
                    found.append((node.lineno, f"help text {m.group(0).strip()!r}"))
    return sorted(found)


def _named(constant: str, setting: tuple[str, ...]) -> bool:
    """A constant's name says it holds a default, or the default of this setting."""
    return any(n in constant.lower() for n in ("default", *setting))


def _none_test(test: ast.AST) -> tuple[ast.AST, bool] | None:
    """(x, True) for `x is None`, (x, False) for `x is not None`, else None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)):
        if isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
            return test.left, isinstance(test.ops[0], ast.Is)
    return None


def show(value: Any) -> str:
    from ticketcli.settings.setting import show as render

    return render(value)


@pytest.mark.parametrize("command", sorted(SCANNED))
def test_defaults_are_written_once(command):
    table, modules = SCANNED[command]
    defaults = [(field_default(cls, path), names) for cls, path, names in table]
    copies = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in modules
        for line, what in default_copies(path.read_text(encoding="utf-8"), defaults)
    ]
    assert copies == [], "write each default once, as its spec field, and read it from there:\n" + "\n".join(copies)


def test_the_default_scan_finds_each_kind_of_copy():
    """The scan above can fail: each way a default used to be written twice is found (lines 2 to 11), and the same
    values used for something else are not (lines 12 to 16)."""
    source = """
loss = s.get("loss") or "cross-entropy"
target = 0.7 if target is None else target
def workers(workers):
    if workers is None:
        return 1
ACT_TARGET_DEFAULT = 0.7
DRIFT_DEFAULTS = {"clip": 50.0, "batch_size": 512}
WEAK_BATCH_SIZE = 512
help = f"Minibatch size. Default: 512."
m = momentum if momentum is not None else 0.0
CHUNK = 512
names = ("relu", "gelu", "cross-entropy")
classes = int(model.classes or 0)
total = 1 if ticket is not None else len(seeds)
n = s.get("steps") or 512
"""
    defaults = [(512, ("batch_size",)), (50.0, ("clip",)), ("cross-entropy", ("loss",)), (0.7, ("target",))]
    defaults += [(1, ("workers",)), (0.0, ("momentum",)), (500, ("steps",))]
    assert [line for line, _ in default_copies(source, defaults)] == [2, 3, 6, 7, 8, 8, 9, 10, 11]
