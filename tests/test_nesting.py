"""The JSON nesting read from a text before it is parsed (files/nesting.py `json_nesting`): the depth every reader of a
ticket, a safetensors header or a sweep-k note checks first, so that what json.loads may recurse into never depends
on the interpreter's recursion limit. An oracle: the depth of the parsed value, on random JSON whose strings are
full of brackets, quotes and backslashes."""

from __future__ import annotations

import json
import random
import tracemalloc

import pytest

from ticketcli.files.nesting import TooDeep, toml_nesting
from ticketcli.files.nesting import json_nesting as nesting
from ticketcli.ticketfile.meta import MAX_DEPTH, strict_json

TRICKY = ["[", "]]", "{", '"', "\\", '\\"[', "\\\\", "x", ""]


def value(rng: random.Random, depth: int = 0) -> object:
    r = rng.random()
    if depth > 8 or r < 0.3:
        return rng.choice([1, -2.5, None, True, "".join(rng.choices(TRICKY, k=rng.randint(0, 4)))])
    if r < 0.65:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {"".join(rng.choices(TRICKY, k=2)): value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def depth(v: object) -> int:
    if isinstance(v, dict):
        return 1 + max((depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((depth(x) for x in v), default=0)
    return 0


@pytest.mark.parametrize("seed", range(4))
def test_nesting_is_the_parsed_depth(seed):
    rng = random.Random(seed)
    for _ in range(500):
        v = value(rng)
        text = json.dumps(v, ensure_ascii=rng.random() < 0.5)
        assert nesting(text) == nesting(text.encode()) == depth(v), text


def test_strict_json_refuses_past_the_limit_before_parsing():
    assert strict_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(TooDeep):
        strict_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(TooDeep):
        strict_json(b"[" * 1_000_000)  # not even JSON: refused by its depth, in linear time
    assert strict_json(json.dumps("[" * 100_000)) == "[" * 100_000  # brackets in a string are text


def test_nesting_needs_a_few_copies_of_the_text_at_most():
    text = json.dumps({"s": "\\" * 300_000, "t": '"[' * 300_000, "u": [[1, 2]] * 50_000})
    tracemalloc.start()
    try:
        assert nesting(text) == 3
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * len(text), (peak, len(text))


def toml_depth(v: object) -> int:
    return depth(v) - 1  # the document's own table is no nesting


@pytest.mark.parametrize("seed", range(3))
def test_toml_nesting_is_the_parsed_depth(seed):
    """Random arrays and inline tables under keys, with strings of every kind and comments full of brackets."""
    import tomllib

    rng = random.Random(seed)
    line = ['"[{\\"#"', "'[{#'", '"\\\\"', '""']  # strings on one line (inline tables and comments take no other)
    lines = [*line, '"""a\n]"""', "'''[\n{'''"]

    def toml_value(d: int, inline: bool = False) -> str:
        r = rng.random()
        if d > 6 or r < 0.3:
            return rng.choice(["1", "2.5", "true", *(line if inline else lines)])
        if r < 0.65:
            return "[" + ", ".join(toml_value(d + 1, inline) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ", ".join(f"k{i} = {toml_value(d + 1, True)}" for i in range(rng.randint(0, 3))) + "}"

    for _ in range(300):
        keys = range(rng.randint(1, 3))
        text = "\n".join(f"key{i} = {toml_value(0)} # ]]{{ {rng.choice(line)}" for i in keys)
        assert toml_nesting(text, 100) == toml_depth(tomllib.loads(text)), text


def test_toml_nesting_stops_counting_past_the_limit():
    assert toml_nesting("a = " + "{b = " * 30_000 + "1" + "}" * 30_000, 32) == 33
    assert toml_nesting("[[a]]\nb = 1", 32) == 2
