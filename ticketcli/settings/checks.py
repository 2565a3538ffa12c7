"""The checks of a run's settings beyond each value's own range (the method's spec and options, --init module against
the model), torch-free, so that extract's resolution (resolve.py) and `inspect --command` (runs/reproduce.py), which
must accept exactly what extract accepts, run the same code."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from ticketcli.errors import UsageError
from ticketcli.methods.registry import METHODS, own_options
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.selection.structure import Structure, pattern_of
from ticketcli.settings.readers import check_method_options
from ticketcli.settings.setting import Table
from ticketcli.specs.ranges import show
from ticketcli.specs.run import MODULE_INIT, InitSpec, MethodSpec, ModelSpec, field_default

T = TypeVar("T")


def build_spec(cls: type[T], table: Table, values: Mapping[str, Any], **fixed: Any) -> T:
    """The one spec builder: spec dataclass `cls` from the `values` of `table`'s settings that declare one of its
    fields, each checked by its own setting (None or absent: not given, the field's default kept), a nested field
    ("optim.lr") replaced in its default; `fixed`: the fields the caller resolves itself (a registry look-up, another
    spec)."""
    kwargs: dict[str, Any] = {}
    for s in table:
        if s.field is None or s.field[0] is not cls or values.get(s.name) is None:
            continue
        value = s.check(values[s.name])
        head, _, rest = s.field[1].partition(".")
        kwargs[head] = replace(kwargs.get(head, field_default(cls, head)), **{rest: value}) if rest else value
    return cls(**(kwargs | fixed))


def method_spec(table: Table, s: dict[str, Any], given: Collection[str] | None, betas: Any) -> MethodSpec:
    """The MethodSpec of checked settings `s`: two betas (`betas`: the value as given, for the message), no option
    the method does not read among `given` (None: none that differs from its default), its own options' check."""
    if len(s["betas"]) != 2:
        raise UsageError(f"--betas must be two numbers in [0, 1), got {show(betas)}")
    every = build_spec(MethodSpec, table, s, options={o.name: s[o.name] for o in own_options()})
    check_method_options(every, given, table)
    info = METHODS.get(every.name)
    own = {o.name: s[o.name] for o in info.options}
    info.check(own)
    return shaped(replace(every, options=own), given)


def shaped(method: MethodSpec, given: Collection[str] | None) -> MethodSpec:
    """--structure and --block (selection/structure.py) checked and written canonically. N:M fixes the sparsity:
    the spec takes 1 - N/M, and a --sparsity that says otherwise (given, or with `given` None one that differs
    from its default), --layer-densities and --aug-density are refused; blocks read --sparsity as the fraction of
    blocks dropped."""
    pattern = pattern_of(method.options)
    if pattern is None:
        return method
    key = "structure" if isinstance(pattern, Structure) else "block"
    method = replace(method, options={**method.options, key: pattern.text()})
    if not isinstance(pattern, Structure):
        return method
    flag = f"--structure {pattern.text()}"
    was_given = "sparsity" in given if given is not None else method.sparsity != MethodSpec.sparsity
    if was_given and abs(method.sparsity - pattern.sparsity) > 1e-9:
        raise UsageError(
            f"{flag} keeps {pattern.n} of every {pattern.m} weights, the sparsity {pattern.sparsity:g}; "
            f"--sparsity {method.sparsity:g} contradicts it",
            hint="drop --sparsity: the structure sets it",
        )
    if method.layer_densities is not None:
        raise UsageError(f"{flag} keeps the same density in every layer; drop --layer-densities")
    if method.options.get("aug_density") is not None:
        raise UsageError(f"{flag} fixes every run's count, so there is no augmented density; drop --aug-density")
    return replace(method, sparsity=pattern.sparsity)


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
