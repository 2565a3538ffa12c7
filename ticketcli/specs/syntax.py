"""The syntax of a model spec string ("mlp:784-256-256-256-10+bias", "vit:p4-d64-l4-h4@3x32x32-10",
"pkg.module:function"): the patterns and checks every spec shares (length, geometry, suffixes, depth), needing
nothing of the package but its errors. A family's own ':' arguments are its grammar, declared with the family
(models/<family>_family.py); models.registry.parse_model decides with the registry which form a string is."""

from __future__ import annotations

import re
from typing import Any

from ticketcli.errors import UsageError

MAX_SPEC_CHARS = 1000  # a model spec longer than this is refused (the longest real ones are under 100)
MAX_SPEC_DIGITS = 9  # every number in a built-in spec is below 10^9 (int() of a 5000-digit string raises)
MAX_BLOCKS = 10_000  # layers or blocks of a built-in model (one Python module each): far beyond any trained one
SPEC_NORMS = ("batch", "layer", "rms")  # "+norm=..." (the mlp takes it; models/mlp.py maps them to modules)

# The two forms of a spec string. Which one a "name:args" string is (the built-in vit:p4-..., or the function p4
# of a module vit) is the models registry's call: models.parse_model matches both and asks it.
GEOMETRY = r"(?:@([0-9]+)x([0-9]+)x([0-9]+)-([0-9]+))?"  # optional "@CxHxW-K"
FACTORY_SPEC = re.compile(  # groups: 1 "pkg.module:function", 2-5 geometry
    r"((?:[A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*)" + GEOMETRY
)
BUILTIN_SPEC = re.compile(  # groups: 1 name (may hold dashes: gpt-nano), 2 ':' arguments, 3-6 geometry, 7 suffixes
    r"([a-z][a-z0-9_]*(?:-[a-z][a-z0-9_]*)*)(?::([0-9A-Za-z]+(?:-[0-9A-Za-z]+)*))?"
    + GEOMETRY
    + r"((?:\+[a-z]+(?:=[a-z]+)?)*)"
)
SPEC_HINT = (
    "expected e.g. mlp:784-256-256-256-10, mlp:64-128-10+bias, mlp:784-256-256-10+res+norm=layer, "
    "lenet300, conv6, vgg:64-64-M-128-128-M-256-256-M, resnet20, wrn:16-4, vit:p4-d64-l4-h4, "
    "conv6@3x32x32-10 or my_pkg.my_module:build_net"
)


def spec_text(text: str) -> str:
    """The spec string, stripped; refused before any pattern runs on it when too long or holding a huge number."""
    t = str(text).strip()
    if len(t) > MAX_SPEC_CHARS:
        raise UsageError(f"model spec of {len(t)} characters is too long (at most {MAX_SPEC_CHARS})")
    if re.search(f"[0-9]{{{MAX_SPEC_DIGITS + 1}}}", t):
        raise UsageError(
            f"invalid model spec {clip(t)!r}: numbers in a model spec have at most {MAX_SPEC_DIGITS} digits"
        )
    return t


def suffixes(text: str, raw: str) -> dict[str, Any]:
    """ "+res+norm=layer+bias" in any order, each at most once -> {"res", "norm", "bias"}."""
    out: dict[str, Any] = {"res": False, "norm": None, "bias": False}
    seen: set[str] = set()
    for item in raw.split("+")[1:]:
        key, _, value = item.partition("=")
        if key in seen:
            raise UsageError(f"invalid model spec {text!r}: +{key} given twice")
        seen.add(key)
        if key == "norm" and value in SPEC_NORMS:
            out["norm"] = value
        elif key in ("res", "bias") and not value:
            out[key] = True
        else:
            raise UsageError(
                f"invalid model spec {text!r}: unknown suffix +{item}",
                hint=f"suffixes: +res, +norm={'|'.join(SPEC_NORMS)}, +bias",
            )
    return out


def geometry(text: str, groups: tuple[str | None, ...]) -> tuple[tuple[int, int, int] | None, int | None]:
    """The "@CxHxW-K" groups (C, H, W, K) as (shape, classes), both None when absent."""
    c, h, w, k = groups
    if c is None or h is None or w is None or k is None:  # the pattern matches all four or none
        return None, None
    shape, classes = (int(c), int(h), int(w)), int(k)
    if min(shape) <= 0 or classes <= 0:
        raise UsageError(f"invalid model spec {text!r}: input shape and classes must be positive")
    return shape, classes


def check_depth(text: str, depth: int, what: str) -> None:
    """Refuse a depth no built-in model is meant to have, before anything builds one module per block."""
    if depth > MAX_BLOCKS:
        raise UsageError(
            f"invalid model spec {clip(text)!r}: {depth:,} {what}, "
            f"more than the {MAX_BLOCKS:,} a built-in model may have"
        )


def clip(text: str, n: int = 80) -> str:
    """At most n characters of a user's text, for an error line."""
    return text if len(text) <= n else text[: n - 3] + "..."
