"""How deep a JSON or TOML text nests its arrays and objects (tables), read from the brackets outside strings and
comments, before the text is parsed: json.loads and tomllib recurse once per level, bounded only by the
interpreter's recursion limit, which differs from process to process (a library may raise it; a raised one let a
30,000-deep inline table take 48 s). A reader refuses a text past its own limit first, so what a hostile file gets
never depends on that. Linear time, no recursion, and a few copies of the text at most."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_JSON_DEPTH = 32  # what the project's own JSON files nest (run settings 4, a study's states 5) is far below this

_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_TOML_MARKS = re.compile(r"""[\[\]{}"'#]""")


class TooDeep(ValueError):
    """Arrays and objects nested deeper than the reader allows, found in the text before json.loads runs: the
    decoder's own limit is the interpreter's recursion limit, which differs from process to process (a library
    may raise it, and a decoder allowed a million levels overflows the C stack on a 300,000-deep text), so what a
    hostile file gets must not depend on it."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"nested more than {limit} levels deep")
        self.limit = limit


def shallow_json(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """json.loads of a text read from a file, refused (TooDeep, a ValueError) before parsing when it nests more
    than `max_depth` deep; every reader of a JSON file or field goes through this or ticketfile.meta.strict_json."""
    check_depth(text, max_depth)
    return json.loads(text)


def check_depth(text: str | bytes, max_depth: int) -> None:
    """Raise TooDeep when a JSON text nests arrays and objects more than `max_depth` deep (before parsing it)."""
    if json_nesting(text) > max_depth:
        raise TooDeep(max_depth)


def json_nesting(text: str | bytes) -> int:
    """How many arrays and objects a JSON text nests at its deepest (`[]` 1, `[[1], {}]` 2). No regular expression
    runs over whole strings: sre's backtracking state would grow with each string's length."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")  # byte for byte: every bracket, quote and backslash stays where it was
    unescaped = text.replace("\\\\", "").replace('\\"', "")  # an escaped quote ends no string
    outside = _NOT_BRACKETS.sub("", "".join(unescaped.split('"')[0::2]))
    return max(accumulate(map(_STEP.__getitem__, outside)), default=0)


def toml_nesting(text: str, limit: int) -> int:
    """How many arrays and inline tables a TOML text nests at its deepest, counting a table header's brackets too
    (`[a]` 1, `[[a]]` 2, `a = [{b = 1}]` 2), outside basic, literal and multi-line strings and comments; it stops
    counting past `limit` (returns limit + 1), so a hostile text costs one pass at most."""
    depth = deepest = 0
    i = 0
    while (m := _TOML_MARKS.search(text, i)) is not None:
        c, j = m.group(), m.start()
        if c == "#":
            end = text.find("\n", j)
        elif c in "\"'":
            end = _string_end(text, j, c)
        else:
            depth += 1 if c in "[{" else -1
            deepest = max(deepest, depth)
            if deepest > limit:
                return limit + 1
            end = j
        if end < 0:  # an unterminated string or a last comment: nothing after it nests
            break
        i = end + 1
    return deepest


def _string_end(text: str, start: int, quote: str) -> int:
    """The index of the last quote of the string opening at `start` (-1: unterminated). Basic strings ("...",
    \"\"\"...\"\"\") end at a quote no backslash escapes; literal ones ('...', '''...''') at the next quote."""
    delim = quote * 3 if text.startswith(quote * 3, start) else quote
    i = start + len(delim)
    while True:
        end = text.find(delim, i)
        if end < 0:
            return -1
        if quote == '"':
            k = end - 1
            while text[k] == "\\":  # the run of backslashes before it (the opening quote stops it)
                k -= 1
            if (end - 1 - k) % 2:  # an escaped quote: the string goes on
                i = end + 1
                continue
        if len(delim) == 3:  # up to two more quotes belong to the string (TOML allows them before the delimiter)
            while text.startswith(quote, end + 3):
                end += 1
        return end + len(delim) - 1
