"""Every default is written once, in the spec dataclasses: for every option of every command, the default its help
shows ("Default: X."), the option's own value and the config-file default (specs.EXTRACT_DEFAULTS) all equal the
dataclass field the option stands for. The table below says which field that is, independently of the code."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields
from typing import Any

import pytest
import typer

from ticketcli import sweep, world
from ticketcli.budget import MEMORY_SHARE
from ticketcli.cli import app
from ticketcli.data import DATASETS
from ticketcli.drift import control as drift_control
from ticketcli.drift.options import Features
from ticketcli.drift.relufy import RelufySpec
from ticketcli.drift.spec import DriftSpec
from ticketcli.specs import EXTRACT_DEFAULTS, DataSpec, InitSpec, MethodSpec, ModelPolicy, ModelSpec, RunSpec
from ticketcli.weak import WeakSpec

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
}
# The settings of the config file no spec field holds, with their defaults.
UNSPECCED = {
    "model": None,
    "data_dir": None,
    "match_sparsity": None,
    "match_sparsity_per_layer": False,
    "threads": None,
}
# --threads (every command that computes): not given keeps torch's own count (sweep-k: one per run); help says so
TICKET_READER = {
    "max_params": (ModelPolicy, "max_params"),
    "max_memory": (ModelPolicy, "max_memory"),
    "device": (RunSpec, "device"),
    "threads": DESCRIBED,
}
SOURCES: dict[str, dict[str, Any]] = {
    "extract": {
        **SETTINGS,
        "checkpoint_every": DESCRIBED,
        "threads": DESCRIBED,
        "rendezvous_timeout": ("const", world.RENDEZVOUS_TIMEOUT_S),
    },
    "sweep-k": {
        **SETTINGS,
        "layerwise": ("sweep", "PAPER_LAYERWISE"),
        "band": ("sweep", "PAPER_BAND"),
        "densities": ("sweep", "PAPER_DENSITIES"),
        "seeds": ("own", None),  # sweep-k's own options: the help shows the option's value
        "workers": ("own", None),
        "threads": DESCRIBED,
        "executor": ("own", None),
        "ray_address": DESCRIBED,
        "plot": DESCRIBED,
    },
    "train-weak": {
        **TICKET_READER,
        "epochs": (WeakSpec, "epochs"),
        "lr": (WeakSpec, "optim.lr"),
        "batch_size": (WeakSpec, "batch_size"),
        "precision": (WeakSpec, "precision"),
        "rendezvous_timeout": ("const", world.RENDEZVOUS_TIMEOUT_S),
        "out": DESCRIBED,
        "plot": DESCRIBED,
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
        "act_target": ("const", drift_control.DEFAULT_TARGET),
        "freeze_stats_after": DESCRIBED,  # never
        "relufy_epochs": (RelufySpec, "epochs"),
        "workers": (Features, "workers"),
    },
    "evaluate": TICKET_READER,
    "export": TICKET_READER,
    "inspect": {},
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
    """Where the option's default lives: (dataclass, field), ("sweep", constant), ("own", None), DESCRIBED or None."""
    table = SOURCES[command]
    if option in table:
        return table[option]
    if command in CONFIG_COMMANDS and option in {f.name for f in fields(MethodSpec)}:
        return (MethodSpec, option)
    return None


def expected(src: Any, param: Any) -> Any:
    kind, name = src
    if kind == "sweep":
        return getattr(sweep, name)
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
            assert value == field_default(*src), key


def test_the_table_sees_every_shown_default():
    """The parametrised test above really reads help texts (a renamed helper would otherwise pass vacuously)."""
    with_default = [(c, p.name) for c, p in CASES if shown(p.help) is not None]
    assert ("extract", "sparsity") in with_default and ("train-weak", "epochs") in with_default
    assert len(with_default) >= 70
