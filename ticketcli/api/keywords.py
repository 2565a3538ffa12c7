"""The Python API speaks in keywords, not flags: an unknown keyword of an API call names the closest one (a flag's
spelling such as `--epochs` or `n-extract`, or a command-line name such as `dataset`, mapped to its keyword), and
every error a call raises names `epochs=` where the command line's message names `--epochs` (and, where a call's
keyword has another name than the flag, that keyword: `--force` is `overwrite=True`, `--out` a call's `out=` or
`path=`, as the call declares). A keyword annotated
bool, int or float takes only a value of that type (a bool is no int, 'no' and 0 are no bool): one UsageError naming
the keyword, before the call does anything."""

from __future__ import annotations

import difflib
import functools
import inspect
import re
from collections.abc import Callable, Collection, Mapping
from typing import ParamSpec, TypeVar

from ticketcli.errors import TicketCliError, UsageError
from ticketcli.specs.ranges import show

P = ParamSpec("P")
R = TypeVar("R")

# a command-line option whose API keyword has another name: --dataset is extract's `data`, as Ticket's calls name it
CLI_NAMES = {"dataset": "data"}
EMPTY: Mapping[str, str] = {}
# a flag, and the word after it (its value, where the message gives one)
_FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(?: ([^\s;,:()'\"`-][^\s;,:()'\"`]*))?")


def keyword_of(name: str, keywords: Collection[str], aliases: Mapping[str, str] = EMPTY) -> str | None:
    """The keyword a flag or command-line spelling means (`--epochs`, `n-extract`, `dataset`; `--force` where
    `aliases` maps it to `overwrite`), or None."""
    key = name.lstrip("-").replace("-", "_")
    key = aliases.get(key, CLI_NAMES.get(key, key))
    return key if key in keywords else None


def in_keywords(
    text: str,
    keywords: Collection[str],
    aliases: Mapping[str, str] = EMPTY,
    on: Collection[str] = (),
    valued: Collection[str] = (),
) -> str:
    """`text` with each flag that is one of `keywords` written as the keyword: `--n-extract` -> `n_extract=`;
    a flag `aliases` maps to a keyword of `on` (a switch: `--force` -> `overwrite`) as `overwrite=True`, and one
    that maps to a keyword of `valued` with the word after it as its value (`--format onnx` -> `fmt='onnx'`). A
    command line quoted in backticks (`ticket export ... --out x.pt`) is left as it is: it is run as written."""

    def one(m: re.Match[str]) -> str:
        key = keyword_of(m.group(1), keywords, aliases)
        after = "" if m.group(2) is None else " " + m.group(2)
        if key is None:
            return m.group(0)
        aliased = m.group(1).replace("-", "_") in aliases
        if aliased and key in on:
            return f"{key}=True{after}"
        if aliased and key in valued and m.group(2) is not None:
            value = m.group(2).rstrip(".")  # a sentence's full stop is not part of the value
            return f"{key}={value!r}" + m.group(2)[len(value) :]
        return f"{key}={after}"

    parts = text.split("`")  # the odd parts are quoted
    return "`".join(p if i % 2 and p.startswith("ticket ") else _FLAG.sub(one, p) for i, p in enumerate(parts))


def unknown_keyword(name: str, keywords: Collection[str], call: str, aliases: Mapping[str, str] = EMPTY) -> UsageError:
    """The error for a keyword `call` does not take: the keyword it spells, else the closest one, then all."""
    meant = keyword_of(name, keywords, aliases)
    if meant is None:
        spelled = name.lstrip("-").replace("-", "_")
        names = {**CLI_NAMES, **aliases}
        close = difflib.get_close_matches(spelled, [*keywords, *names], n=1, cutoff=0.6)
        meant = names.get(close[0], close[0]) if close else None
    listed = f"keywords: {', '.join(sorted(keywords))}"
    return UsageError(
        f"unknown keyword {name!r} for {call}()", hint=f"did you mean {meant}=? {listed}" if meant else listed
    )


def _accepts(annotation: object) -> Callable[[object], bool] | None:
    """What an annotation (a string: the modules use `from __future__ import annotations`) lets through when it
    names bool, int or float (with None and a callable where it names them too); None: not checked here."""
    parts = {p.strip() for p in str(annotation).split("|")}
    none, call = "None" in parts, "Progress" in parts

    def other(v: object) -> bool:
        return (none and v is None) or (call and callable(v))

    if "bool" in parts:
        return lambda v: isinstance(v, bool) or other(v)
    if "int" in parts or "float" in parts:
        kinds = (int, float) if "float" in parts else (int,)
        return lambda v: (isinstance(v, kinds) and not isinstance(v, bool)) or other(v)
    return None


_NAMES = {"bool": "True or False", "int": "an integer", "float": "a number"}


def check_types(sig: inspect.Signature, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    """Refuse an argument of the wrong type for a bool, int or float parameter of `sig` (one UsageError naming it)."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as e:  # a missing or doubled argument: Python's own words, as a UsageError
        raise UsageError(str(e)) from None
    for name, value in bound.arguments.items():
        param = sig.parameters[name]
        accepts = _accepts(param.annotation)
        if accepts is None or param.kind is param.VAR_KEYWORD or param.kind is param.VAR_POSITIONAL or accepts(value):
            continue
        text = str(param.annotation)
        kind = next(v for k, v in _NAMES.items() if k in text)
        extra = " or None" if "None" in text else " or a callable" if "Progress" in text else ""
        raise UsageError(f"{name}= must be {kind}{extra}, got {show(value)}")


def speaks_keywords(
    call: str,
    options: Callable[[], Collection[str]] = tuple,
    aliases: Mapping[str, str] = EMPTY,
    valued: Collection[str] = (),
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate an API function (`call`: its name as a user writes it) so that it speaks in keywords: an unknown
    keyword is one UsageError with the closest keyword, a bool/int/float keyword of another type one UsageError
    naming it (check_types), and any TicketCliError it raises names keywords, not flags.
    `options`: the keywords its **options take beyond its named parameters (read when it is called); `aliases`:
    the command-line names of its keywords that are spelled otherwise (`{"force": "overwrite", "out": "path"}`);
    an aliased switch reads `overwrite=True` in its messages, and an aliased keyword of `valued` takes the word after
    the flag as its value (`--format onnx` -> `fmt='onnx'`)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        sig = inspect.signature(fn)
        params = sig.parameters.values()
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        named = frozenset(p.name for p in params if p.kind in kinds) - {"self"}
        switches = frozenset(p.name for p in params if str(p.annotation) == "bool")

        @functools.wraps(fn)
        def speaking(*args: P.args, **kwargs: P.kwargs) -> R:
            keywords = named | frozenset(options())
            for name in kwargs:
                if name not in keywords:
                    raise unknown_keyword(name, keywords, call, aliases)
            check_types(sig, args, kwargs)
            try:
                return fn(*args, **kwargs)
            except TicketCliError as e:  # the same exception, worded for a caller of `call`
                e.args = (in_keywords(str(e), keywords, aliases, switches, valued), *e.args[1:])
                e.hint = None if e.hint is None else in_keywords(e.hint, keywords, aliases, switches, valued)
                raise

        return speaking

    return wrap
