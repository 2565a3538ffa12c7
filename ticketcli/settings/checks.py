"""The checks of a run's settings beyond each value's own range (the method's spec and options, --init module against
the model), torch-free, so that extract's resolution (resolve.py) and `inspect --command` (runs/reproduce.py), which
must accept exactly what extract accepts, run the same code."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from ticketcli.errors import UsageError
from ticketcli.methods.registry import METHODS, own_options
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.settings.readers import check_method_options
from ticketcli.settings.setting import Table
from ticketcli.specs.ranges import show
from ticketcli.specs.run import MODULE_INIT, InitSpec, MethodSpec, ModelSpec


def spec_fields(table: Table, cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of spec dataclass `cls` from the checked `values` of `table`'s settings that fill its
    fields (each setting declares its field)."""
    return {s.field[1]: values[s.name] for s in table if s.field is not None and s.field[0] is cls}


def method_spec(table: Table, s: dict[str, Any], given: Collection[str] | None, betas: Any) -> MethodSpec:
    """The MethodSpec of checked settings `s`: two betas (`betas`: the value as given, for the message), no option
    the method does not read among `given` (None: none that differs from its default), movement's schedule < 1."""
    if len(s["betas"]) != 2:
        raise UsageError(f"--betas must be two numbers in [0, 1), got {show(betas)}")
    every = MethodSpec(**spec_fields(table, MethodSpec, s), options={o.name: s[o.name] for o in own_options()})
    check_method_options(every, given, table)
    if s["movement_warmup"] + s["movement_cooldown"] >= 1:
        raise UsageError("--movement-warmup + --movement-cooldown must be < 1")
    return replace(every, options={o.name: s[o.name] for o in METHODS.get(every.name).options})


def check_module_init(init: InitSpec, model: ModelSpec, given: Collection[str]) -> None:
    """--init module keeps a user factory's own weights: a built-in model has none, and no k shapes them."""
    if init.scheme != MODULE_INIT:
        return
    if model.arch != "user":
        raise UsageError(
            f"--init {MODULE_INIT} keeps the weights a model factory (pkg.module:function) created; "
            f"the built-in model {model.to_string()} draws its weights from a scheme",
            hint=f"use --init {' or '.join(n for n in INIT_SCHEMES.names() if n != MODULE_INIT)}",
        )
    if "init_k" in given:
        raise UsageError(f"--init-k scales a drawn init; --init {MODULE_INIT} keeps the factory's weights")
