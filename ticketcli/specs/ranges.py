"""What a run setting may be: a kind (integer, number, boolean, text, list of numbers) and an interval, checked the
same way whether the value came from a flag or a config file. Each setting declares its range once, in its
`Setting` (ticketcli/settings/)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ticketcli.errors import UsageError

MAX_TEXT = 4096  # characters of a text setting (a path, a model spec, a device name)
MAX_NUMBERS = 4096  # entries of a list setting (--layer-densities: one per layer)


def _num(x: float | None) -> str:
    if isinstance(x, int) and x >= 1 << 32 and x & (x - 1) == 0:
        return f"2^{x.bit_length() - 1}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def show(value: Any) -> str:
    """A short, one-line rendering of a rejected value (a config value may be a huge or deeply nested thing)."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (list, tuple, dict)) for v in value):
        return "a nested array"
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"an array of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Range:
    kind: str  # "int", "float", "bool", "text", "choice", "size", "numbers" (a list or comma-separated text of floats)
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself excluded
    hi_open: bool = False  # hi itself excluded
    choices: tuple[str, ...] = ()  # "choice": the texts it may be

    def interval(self) -> str:
        return ("(" if self.lo_open else "[") + f"{_num(self.lo)}, {_num(self.hi)}" + (")" if self.hi_open else "]")

    def describe(self) -> str:
        """For help texts and the README, e.g. 'an integer in [1, 100000]'."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind in ("bool", "text"):
            return "true or false" if self.kind == "bool" else f"text of at most {MAX_TEXT} characters"
        if self.kind == "size":
            return f"a size in bytes (or with K, M, G, T: 512M, 8G) in [{_size(self.lo)}, {_size(self.hi)}]"
        noun = {"int": "an integer", "float": "a number", "numbers": "numbers, each"}[self.kind]
        return f"{noun} in {self.interval()}"

    def contains(self, v: float) -> bool:
        lo_ok = self.lo is None or (v > self.lo if self.lo_open else v >= self.lo)
        hi_ok = self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)
        return lo_ok and hi_ok  # False for NaN

    def check(self, value: Any, what: str) -> Any:
        """The value, normalised (int, float, bool, str or a tuple of floats), or a one-line UsageError."""
        return getattr(self, "_" + self.kind)(value, what)

    def _int(self, value: Any, what: str) -> int:
        # as the flags: --epochs 3.0 is 3 (Typer parses it so), 3.5 is refused; text is refused (TOML has numbers)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{what} must be an integer, got {show(value)}")
        if not self.contains(value):
            hi = ("< " if self.hi_open else "<= ") + _num(self.hi)
            raise UsageError(f"{what} must be >= {_num(self.lo)} and {hi}, got {show(value)}")
        return int(value)

    def _float(self, value: Any, what: str) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UsageError(f"{what} must be a number, got {show(value)}")
        try:
            v = float(value)
        except OverflowError:  # an integer beyond any float (TOML allows 10**400)
            v = math.inf
        if not (math.isfinite(v) and self.contains(v)):
            raise UsageError(f"{what} must lie in {self.interval()}, got {show(value)}")
        return v

    def _bool(self, value: Any, what: str) -> bool:
        if not isinstance(value, bool):  # "false" is a non-empty string: it must not read as true
            raise UsageError(f"{what} must be true or false, got {show(value)}")
        return value

    def _text(self, value: Any, what: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_TEXT or "\0" in value:
            raise UsageError(f"{what} must be text (at most {MAX_TEXT} characters, no NUL), got {show(value)}")
        return value

    def _choice(self, value: Any, what: str) -> str:
        if value not in self.choices:
            raise UsageError(f"{what} must be one of {', '.join(self.choices)}, got {show(value)}")
        return str(value)

    def _size(self, value: Any, what: str) -> int:
        # an integer of bytes, or text: a number with an optional binary unit K, M, G or T (8G = 8 * 2^30 bytes)
        given = value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and len(value) <= 40:
            m = SIZE_TEXT.fullmatch(value.strip())
            if m:
                number, unit = float(m.group(1)), (m.group(2) or "").upper()
                value = int(number * (1 << (10 * " KMGT".index(unit or " "))))
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"{what} must be a size such as 512M, 8G or a number of bytes, got {show(given)}")
        if not self.contains(value):
            raise UsageError(f"{what} must lie in [{_size(self.lo)}, {_size(self.hi)}], got {show(given)}")
        return value

    def _numbers(self, value: Any, what: str) -> tuple[float, ...]:
        if isinstance(value, str) and len(value) <= MAX_TEXT:
            try:
                items: list[Any] = [float(t) for t in value.split(",") if t.strip()]
            except ValueError:
                raise UsageError(f"{what} must be comma-separated numbers, got {show(value)}") from None
        elif isinstance(value, (list, tuple)) and len(value) <= MAX_NUMBERS:
            items = list(value)
        else:
            raise UsageError(f"{what} must be comma-separated numbers or an array of numbers, got {show(value)}")
        if not items:
            raise UsageError(f"{what} is empty")
        entry = Range("float", self.lo, self.hi, self.lo_open, self.hi_open)
        return tuple(entry._float(v, f"{what} entries") for v in items)


@dataclass(frozen=True)
class Worded(Range):
    """A number range whose refusal keeps its command's own words: '{what} {words}, got {value}' (a gate's
    'must lie in [0, 1] (a fraction)', a count's 'must be >= 1 epoch')."""

    words: str = ""
    described: str = ""  # what `ticket list settings` says it may be

    def describe(self) -> str:
        return self.described

    def check(self, value: Any, what: str) -> Any:
        if not self.contains(value):  # NaN too
            raise UsageError(f"{what} {self.words}, got {value}")
        return value


AUTO = "auto"


@dataclass(frozen=True)
class OrAuto(Range):
    """An integer range that also takes the word `auto` (the run chooses; checked as None, which is the default)."""

    def describe(self) -> str:
        return f"{AUTO} or {super().describe()}"

    def check(self, value: Any, what: str) -> Any:
        if value is None or value == AUTO:
            return None
        if isinstance(value, str):  # the flag's text: a whole number, else refused as text is
            value = int(value) if value.strip().isdigit() and len(value) <= 12 else value
            if isinstance(value, str):
                raise UsageError(f"{what} must be {AUTO} or an integer, got {show(value)}")
        return self._int(value, what)


def INT(lo: int, hi: int, *, hi_open: bool = False) -> Range:
    return Range("int", lo, hi, hi_open=hi_open)


def FLOAT(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Range:
    return Range("float", lo, hi, lo_open, hi_open)


def SIZE(lo: int, hi: int) -> Range:
    return Range("size", lo, hi)


SIZE_TEXT = re.compile(r"([0-9]{1,15}(?:\.[0-9]{1,6})?)\s*([KMGTkmgt])?(?:i?[Bb])?")


def _size(n: float | None) -> str:
    """A byte count as a size: 1M, 1024T."""
    n = int(n or 0)
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def NUMBERS(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Range:
    return Range("numbers", lo, hi, lo_open, hi_open)


def CHOICE(*choices: str) -> Range:
    return Range("choice", choices=choices)


BOOL, TEXT = Range("bool"), Range("text")
