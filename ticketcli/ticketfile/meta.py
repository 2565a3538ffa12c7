"""A ticket's metadata, checked before use: bounded JSON (no duplicated keys, no 5000-digit integers, no deep
nesting) and a type and range for every field a reader uses, so that a shared file can only ever be refused with
one line (TicketFileError), never crash a table or seed a generator out of range."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import TicketFileError
from ticketcli.files.nesting import TooDeep, check_depth
from ticketcli.runtime.machine import created_by_problem
from ticketcli.specs.syntax import MAX_SPEC_CHARS

MAX_INT_DIGITS = 20  # 2^64 has 20 digits; json.loads itself would raise a bare ValueError past 4300
MAX_DEPTH = 32  # arrays and objects nested in a metadata value (the writer's deepest, metrics, has 4)
SEED_LIMIT = 2**63  # seeds lie in [0, 2^63): torch generators take them, derive_seed makes 63-bit ones
K_RANGE = (1e-12, 1e12)  # init.k: scaled init bounds gain/sqrt(k * fan_in) stay finite and non-zero
MAX_DIMS = 8  # a mask's shape (Linear: 2, Conv2d: 4)
HEX64 = re.compile(r"[0-9a-f]{64}")


class DuplicateKey(ValueError):
    pass


class TooManyDigits(ValueError):
    pass


def unique_keys(pairs: list[tuple[str, Any]]) -> JsonObject:
    """json object hook: a key given twice is an error, not "the last one wins" (readers would disagree)."""
    out = dict(pairs)
    if len(out) != len(pairs):  # the slow search only for the error message
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKey(k)
            seen.add(k)
    return out


def bounded_int(text: str) -> int:
    """int(text) of at most MAX_INT_DIGITS digits (json.loads's parse_int), else TooManyDigits."""
    if len(text) > MAX_INT_DIGITS and len(text.lstrip("-")) > MAX_INT_DIGITS:  # (a minus sign is no digit)
        raise TooManyDigits(text[:12])
    return int(text)


def strict_json(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads without duplicated keys, integers of more than MAX_INT_DIGITS digits or arrays and objects
    nested more than `max_depth` deep (raises ValueError: TooDeep before any parsing)."""
    check_depth(text, max_depth)
    return json.loads(text, object_pairs_hook=unique_keys, parse_int=bounded_int)


def json_error(e: BaseException) -> str:
    """Why strict_json refused a text, in a few words."""
    if isinstance(e, DuplicateKey):
        return f"has the key {str(e)[:80]!r} twice"
    if isinstance(e, TooManyDigits):
        return f"has an integer of more than {MAX_INT_DIGITS} digits"
    if isinstance(e, TooDeep):
        return f"is {e}"
    if isinstance(e, RecursionError):
        return "is nested too deeply"
    return "is not valid JSON"


def json_field(meta: dict[str, str], key: str, kind: type, path: Path) -> Any:
    """One metadata value, parsed: valid bounded JSON of the given type, nested at most MAX_DEPTH deep."""
    if key not in meta:
        raise TicketFileError(f"{path}: metadata field {key!r} is missing")
    try:
        value = strict_json(meta[key])
    except (ValueError, TypeError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise TicketFileError(f"{path}: metadata field {key!r} {json_error(e)}") from None
    if not isinstance(value, kind):
        raise TicketFileError(f"{path}: metadata field {key!r} should be a JSON {kind.__name__}")
    return value


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _fraction(x: Any) -> bool:
    """A share in [0, 1] (accuracy, sparsity), or absent (None)."""
    return x is None or (_is_number(x) and 0 <= x <= 1)


def _at_least(x: Any, low: float) -> bool:
    """A finite number >= low, or absent (None)."""
    return x is None or (_is_number(x) and low <= x < math.inf)


def check_fields(f: dict[str, dict[str, Any]], checkpoint: dict[str, Any] | None, path: Path) -> None:
    """Every field a reader uses has its type and a sane range; a problem is one TicketFileError line."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise TicketFileError(f"{path}: metadata {what}")

    model = f["model"]
    need(isinstance(model.get("spec"), str), "'model' lacks a 'spec' string")
    need(len(model["spec"]) <= MAX_SPEC_CHARS, f"'model.spec' is longer than {MAX_SPEC_CHARS} characters")
    if "parameters" in model:  # a factory's every parameter (runs/checks.py compares them)
        need(
            isinstance(model["parameters"], dict) and all(_shape(s, minimum=0) for s in model["parameters"].values()),
            "'model.parameters' must map names to lists of non-negative integers",
        )
    if "masked" in model:
        need(
            isinstance(model["masked"], list) and all(isinstance(n, str) for n in model["masked"]),
            "'model.masked' must be a list of names",
        )
    init = f["init"]
    need(isinstance(init.get("scheme"), str), "'init' lacks a 'scheme' string")
    need(is_int(init.get("seed")) and 0 <= init["seed"] < SEED_LIMIT, "'init.seed' must be an integer in [0, 2^63)")
    k = init.get("k")
    need(
        (k is None and init["scheme"] == "module")  # a factory's own weights: no k shaped them
        or isinstance(k, (int, float))
        and _is_number(k)
        and math.isfinite(k)
        and K_RANGE[0] <= k <= K_RANGE[1],
        f"'init.k' must be a number in [{K_RANGE[0]:g}, {K_RANGE[1]:g}]",
    )
    shapes = f["shapes"]
    need(len(shapes) > 0, "'shapes' is empty")
    for name, shape in shapes.items():
        need(_shape(shape, minimum=1), f"'shapes[{name[:80]}]' must be a list of at most {MAX_DIMS} positive integers")
    need(isinstance(f["method"].get("name"), str), "'method' lacks a 'name' string")
    data = f["data"]
    need(isinstance(data.get("dataset"), str), "'data' lacks a 'dataset' string")
    for key in ("n_extract", "n_val"):  # extraction and validation both need examples (accuracy divides by n)
        need(is_int(data.get(key)) and 1 <= data[key] < SEED_LIMIT, f"'data.{key}' must be a positive integer")
    need(
        is_int(data.get("split_seed")) and 0 <= data["split_seed"] < SEED_LIMIT,
        "'data.split_seed' must be an integer in [0, 2^63)",
    )
    _check_reported(f["sparsity"], f["metrics"], need)
    problem = created_by_problem(f["created_by"])
    need(problem is None, problem or "")
    if checkpoint is not None:
        digest = checkpoint.get("sha256")  # optional: the weights fingerprint identifies the weights either way
        need(
            digest is None or (isinstance(digest, str) and HEX64.fullmatch(digest) is not None),
            "'checkpoint.sha256' must be a sha256 hex digest",
        )
        need(isinstance(checkpoint.get("path", ""), str), "'checkpoint.path' must be a string")


def _shape(shape: Any, *, minimum: int) -> bool:
    return (
        isinstance(shape, list)
        and len(shape) <= MAX_DIMS
        and all(is_int(d) and minimum <= d < SEED_LIMIT for d in shape)
    )


def _check_reported(sparsity: dict[str, Any], metrics: dict[str, Any], need: Callable[[bool, str], None]) -> None:
    """The numbers tables print as percentages or compare: shares in [0, 1], counts non-negative integers."""
    for key in ("requested", "achieved"):
        need(_fraction(sparsity.get(key)), f"'sparsity.{key}' must be a number in [0, 1]")
    need(isinstance(sparsity.get("per_layer", {}), dict), "'sparsity.per_layer' must be an object")
    for split in ("test", "val"):
        m = metrics.get(split, {})
        need(isinstance(m, dict), f"'metrics.{split}' must be an object")
        need(_fraction(m.get("accuracy")), f"'metrics.{split}.accuracy' must be a number in [0, 1]")
        need(m.get("loss") is None or _is_number(m["loss"]), f"'metrics.{split}.loss' must be a number")
        # a language model's (--dataset text): bits per character >= 0, perplexity = 2^bits >= 1
        need(_at_least(m.get("bits_per_char"), 0), f"'metrics.{split}.bits_per_char' must be a number >= 0")
        need(_at_least(m.get("perplexity"), 1), f"'metrics.{split}.perplexity' must be a number >= 1")
        for key in ("correct", "n"):
            need(
                m.get(key) is None or (is_int(m[key]) and m[key] >= 0),
                f"'metrics.{split}.{key}' must be a non-negative integer",
            )
    need(isinstance(metrics.get("device", ""), str), "'metrics.device' must be a string")
