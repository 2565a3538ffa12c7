"""Hostile run configs and setting values: a --config that is a FIFO, /dev/zero, a directory, over 1 MiB, not UTF-8
or deeply nested, and any setting of the wrong type or out of its documented range (specs.RANGES) -- in a TOML file
or as the same flag, for extract, sweep-k, train-weak and drift -- ends with exit code 2 and one line naming the
setting, never a traceback, a hang, a truthy "false" or a run with a nonsense value; nothing is written."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest
from hostile import assert_clean, cli, snapshot

from ticketcli.errors import UsageError
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.run import EXTRACT_DEFAULTS, RUN
from ticketcli.settings.setting import option_flag

BASE = ("--dataset", "digits", "--method", "random", "--model", "mlp:64-8-10", "--quiet")

RANGES = {s.name: s.range for s in RUN if s.range is not None}  # each setting's own range, by name


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {math.inf: "inf", -math.inf: "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    return json.dumps(v) if isinstance(v, str) else repr(v)  # JSON's string escapes are TOML's


def extract(tmp_path: Path, *args: str, config: Path | None = None):
    out = tmp_path / "t.safetensors"
    before = snapshot(out)
    run = cli("extract", *BASE, *(("--config", str(config)) if config is not None else ()), *args, "--out", str(out))
    return run, before


def with_config(tmp_path: Path, text: str | bytes, *args: str):
    p = tmp_path / "c.toml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return extract(tmp_path, *args, config=p)


# ------------------------------------------------------------------------------------------ the file itself


def test_a_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)

    def unblock():  # should the reader ever open the FIFO and wait, give it EOF so the test fails instead of hanging
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    timer = threading.Timer(20, unblock)
    timer.start()
    try:
        run, before = extract(tmp_path, config=fifo)
    finally:
        timer.cancel()
    assert_clean(run, 2, contains="is not a regular file", unchanged=before, folder=tmp_path)


@pytest.mark.parametrize("kind", ["dev-zero", "link-to-dev-zero", "directory", "missing", "over-1-MiB"])
def test_special_and_oversized_files(tmp_path, kind):
    p = tmp_path / "c.toml"
    if kind == "dev-zero":
        p = Path("/dev/zero")
    elif kind == "link-to-dev-zero":
        p.symlink_to("/dev/zero")
    elif kind == "directory":
        p.mkdir()
    elif kind == "over-1-MiB":
        p.write_text("# padding\n" * 110_000 + "seed = 1\n")
    run, before = extract(tmp_path, config=p)
    needle = {"directory": "is a directory", "missing": "config file not found", "over-1-MiB": "larger than 1 MiB"}.get(
        kind, "is not a regular file"
    )
    assert_clean(run, 2, contains=needle, unchanged=before, folder=tmp_path)


def test_sweep_k_reads_its_config_the_same_way(tmp_path):
    run = cli("sweep-k", "--dataset", "digits", "--config", "/dev/zero")
    assert_clean(run, 2, contains="is not a regular file")


@pytest.mark.parametrize(
    "text,needle",
    [
        (b"seed = 1\n\xff\xfe\n", "not UTF-8"),
        ("seed = \n", "not valid TOML"),
        ("seed = 1\nseed = 2\n", "not valid TOML"),
        ("aux-width = 2\naux_width = 3\n", "sets aux_width twice"),
        ("'" + "k" * 200_000 + "' = 1\n", "unknown key"),
        ('"line\\nbreak" = 1\n', "unknown key"),
        ("[optimizer]\nlr = 0.1\n", "unknown key 'optimizer'"),
        ("a = " + "[" * 100_000 + "]" * 100_000 + "\n", "nests arrays or tables too deeply"),
        ("a = " + "{b = " * 30_000 + "1" + "}" * 30_000 + "\n", "nests arrays or tables too deeply"),
        ("[" + ".".join(["a"] * 20_000) + "]\n", "unknown key 'a'"),
        ("seed = " + "[" * 100 + "1" + "]" * 100 + "\n", "got a nested array"),
        ("lr = { value = 0.1 }\n", "got a table"),
        ("[[epochs]]\nn = 1\n", "must be an integer, got a nested array"),
        ("seed = 1979-05-27\n", "must be an integer"),
        ("lr = 1" + "0" * 400 + "\n", "must lie in (0, inf)"),
        ("layer_densities = [" + "0.5, " * 5000 + "]\n", "must be comma-separated numbers or an array"),
    ],
)
def test_malformed_or_nested_config(tmp_path, text, needle):
    run, before = with_config(tmp_path, text)
    assert_clean(run, 2, contains=needle, unchanged=before, folder=tmp_path)


@pytest.mark.parametrize("text", ["a = " + "{b = " * 30_000 + "1" + "}" * 30_000, "a = " + "[" * 30_000 + "]" * 30_000])
def test_deep_nesting_is_refused_alike_whatever_the_recursion_limit(tmp_path, text):
    """tomllib recurses once per level, bounded only by the interpreter's recursion limit, which a library in the
    same process may raise: the text's depth is read first, so the outcome never depends on it (nor its cost: with
    the limit raised, tomllib took 48 s on the inline tables)."""
    import sys

    was = sys.getrecursionlimit()
    sys.setrecursionlimit(200_000)
    try:
        run, before = with_config(tmp_path, text + "\n")
    finally:
        sys.setrecursionlimit(was)
    assert_clean(run, 2, contains="nests arrays or tables too deeply", unchanged=before, folder=tmp_path)


def test_an_integral_float_is_an_integer_in_the_file_as_on_the_command_line(tmp_path):
    """Typer reads --epochs 3.0 as 3; so does the file (3.5 is refused by both)."""
    p = tmp_path / "c.toml"
    p.write_text("epochs = 3.0\nseed = 2.0\n")
    spec = build_extract_spec(merge_settings({}, p))
    assert (spec.method.epochs, spec.init.seed) == (3, 2) and type(spec.method.epochs) is int


def test_a_config_just_under_the_cap_is_read(tmp_path):
    """The cap refuses big files, not big-but-valid ones: a 1 MiB config with padding still sets its values."""
    p = tmp_path / "c.toml"
    p.write_text("#" * ((1 << 20) - 200) + "\nepochs = 7\nbias = true\n")
    assert p.stat().st_size <= 1 << 20
    s = merge_settings({}, p)
    assert (s["epochs"], s["bias"]) == (7, True)


# ------------------------------------------------------------------------------------------ wrong types, every key

WRONG = {
    "bool": "false",
    "int": 3.5,
    "float": "0.5",
    "text": 7,
    "numbers": [[0.5]],
    "size": True,
    "choice": 7,
}  # kind -> a wrong-typed value
REASON = {
    "choice": "must be one of",
    "bool": "must be true or false, got 'false'",
    "int": "must be an integer, got 3.5",
    "float": "must be a number, got '0.5'",
    "text": "must be text",
    "numbers": "entries must be a number, got [0.5]",
    "size": "must be a size such as 512M, 8G or a number of bytes, got True",
}


@pytest.mark.parametrize("key", sorted(EXTRACT_DEFAULTS))
def test_every_key_refuses_a_wrong_type(tmp_path, key):
    """A string "false" must not read as true, 3.0 is not an epoch count, 7 is not a path: per key, in the file."""
    kind = RANGES[key].kind
    run, before = with_config(tmp_path, f"{key} = {toml_value(WRONG[kind])}\n")
    assert_clean(run, 2, contains=f"{key} {REASON[kind]}", unchanged=before, folder=tmp_path)


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("bias", 1, "must be true or false"),
        ("download", "no", "must be true or false"),
        ("frozen_aux", [True], "must be true or false"),
        ("seed", "7", "must be an integer"),
        ("seed", True, "must be an integer"),
        ("epochs", 1e300, "must be >= 1 and <= 100000"),
        ("seed", -0.5, "must be an integer"),
        ("lr", True, "must be a number"),
        ("lr", math.nan, "must lie in"),
        ("eps", math.inf, "must lie in"),
        ("weight_decay", -math.inf, "must lie in"),
        ("init_k", 5e-324, "must lie in [1e-06, 1e+06]"),
        ("init_k", math.inf, "must lie in [1e-06, 1e+06]"),
        ("model", ["mlp:64-8-10"], "must be text"),
        ("data_dir", "a\0b", "no NUL"),
        ("weights", "w" * 5000, "at most 4096 characters"),
        ("betas", "0.9,x", "must be comma-separated numbers"),
        ("betas", [True, 0.9], "must be a number"),
        ("betas", [0.9, 0.99, 0.999], "two numbers"),
        ("layer_densities", [], "is empty"),
    ],
)
def test_key_families_refuse_wrong_values(tmp_path, key, value, reason):
    run, before = with_config(tmp_path, f"{key} = {toml_value(value)}\n")
    assert_clean(run, 2, contains=reason, unchanged=before, folder=tmp_path)


# ------------------------------------------------------------------------------------------ ranges, file and flag


def outside(key: str) -> list[tuple[str, object]]:
    """Values just outside RANGES[key] on each side (an open bound itself; NaN where a side is unbounded)."""
    r = RANGES[key]
    if r.kind == "int":
        return [("below", r.lo - 1), ("above", r.hi if r.hi_open else r.hi + 1)]
    below = float(r.lo if r.lo_open else (r.lo / 2 if r.lo > 0 else -0.5))
    above = math.nan if math.isinf(r.hi) else float(r.hi if r.hi_open else r.hi * 2)
    if r.kind == "numbers":
        return [("below", [0.5, below]), ("above", [0.5, above])]
    return [("below", below), ("above" if not math.isnan(above) else "nan", above)]


NUMERIC = sorted(k for k in EXTRACT_DEFAULTS if RANGES[k].kind in ("int", "float", "numbers"))
RANGE_CASES = [(k, side, v) for k in NUMERIC for side, v in outside(k)]


def flag_text(v) -> str:
    return ",".join(map(repr, v)) if isinstance(v, list) else repr(v) if isinstance(v, float) else str(v)


@pytest.mark.parametrize("key,side,value", RANGE_CASES, ids=[f"{k}-{s}" for k, s, _ in RANGE_CASES])
def test_out_of_range_in_the_file_and_as_a_flag(tmp_path, key, side, value):
    """The file and the flag are refused for the same reason, by the same table."""
    run_file, before = with_config(tmp_path, f"{key} = {toml_value(value)}\n")
    assert_clean(run_file, 2, contains=f"c.toml: {key}", unchanged=before, folder=tmp_path)
    run_flag, before = extract(tmp_path, option_flag(key), flag_text(value))
    assert_clean(run_flag, 2, contains=option_flag(key), unchanged=before, folder=tmp_path)

    def reason(run):
        return run.stderr.split(" must ", 1)[1]

    assert reason(run_file) == reason(run_flag)


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--seed", "99999999999999999999"), "--seed must be >= 0 and < 2^63"),
        (("--seed", str(2**63)), "--seed must be >= 0 and < 2^63"),
        (("--init-k", "1e-320"), "--init-k must lie in [1e-06, 1e+06]"),
        (("--init-k", "1e400"), "--init-k must lie in [1e-06, 1e+06], got inf"),
        (("--lr", "nan"), "--lr must lie in (0, inf), got nan"),
        (("--epochs", "3.5"), "Input should be a valid integer"),
        (("--batch-size", str(2**64)), "--batch-size must be >= 1 and <= 1048576"),
    ],
)
def test_extract_flags_from_the_issue(tmp_path, args, needle):
    run, before = extract(tmp_path, *args)
    assert_clean(run, 2, contains=needle, unchanged=before, folder=tmp_path)


@pytest.mark.parametrize(
    "args,needle",
    [
        (("train-weak", "missing.safetensors", "--epochs", "0"), "--epochs must be >= 1"),
        (("train-weak", "missing.safetensors", "--epochs", "100001"), "--epochs must be >= 1 and <= 100000"),
        (("train-weak", "missing.safetensors", "--lr", "nan"), "--lr must lie in (0, inf)"),
        (("train-weak", "missing.safetensors", "--lr", "inf"), "--lr must lie in (0, inf)"),
        (("train-weak", "missing.safetensors", "--lr", "-1"), "--lr must lie in (0, inf)"),
        (("train-weak", "missing.safetensors", "--batch-size", "0"), "--batch-size must be >= 1"),
        (("drift", "--steps", "0"), "--steps must be >= 1"),
        (("drift", "--steps", "10000001"), "--steps must be >= 1 and <= 10000000"),
        (("drift", "--log-every", "0"), "--log-every must be >= 1"),
        (("drift", "--probe-size", str(2**40)), "--probe-size must be >= 1 and <= 1048576"),
        (("drift", "--lr", "nan"), "--lr must lie in (0, inf)"),
        (("drift", "--momentum", "1"), "--momentum must lie in [0, 1)"),
        (("drift", "--clip", "inf"), "--clip must lie in (0, 1e+06]"),
        (("drift", "--zero-threshold", "0"), "--zero-threshold must lie in (0, 1e+06]"),
        (("drift", "--batch-size", "0"), "--batch-size must be >= 1"),
        (("drift", "--seeds", f"0,{2**63}"), "--seeds entries must be >= 0 and < 2^63"),
        (("drift", "--seeds", "0," + "9" * 5000), "--seeds must be comma-separated integers"),
        (("sweep-k", "--dataset", "digits", "--seeds", str(2**63)), "--seeds entries must be >= 0 and < 2^63"),
        (("sweep-k", "--dataset", "digits", "--layerwise", "10001"), "--layerwise must be >= 0 and <= 10000"),
        (("sweep-k", "--dataset", "digits", "--workers", "0"), "--workers must be >= 1"),
        (("sweep-k", "--dataset", "digits", "--threads", "4097"), "--threads must be >= 1 and <= 4096"),
    ],
)
def test_other_commands_check_their_numbers(tmp_path, args, needle):
    run = cli(*args)
    assert_clean(run, 2, contains=needle, folder=tmp_path)


# ------------------------------------------------------------------------------------------ the table itself


def test_every_setting_has_a_range_and_its_default_is_inside():
    assert set(EXTRACT_DEFAULTS) <= set(RANGES)
    for key, default in EXTRACT_DEFAULTS.items():
        if default is not None:
            RANGES[key].check(default, key)  # raises if the table and the defaults disagree


@pytest.mark.parametrize("key", NUMERIC)
def test_closed_bounds_are_accepted(key):
    """The table's closed ends are valid values (so the ranges in the README are exact)."""
    r = RANGES[key]
    ends = [e for e, is_open in ((r.lo, r.lo_open), (r.hi, r.hi_open)) if not is_open and math.isfinite(e)]
    for end in ends:
        value = [end, end] if r.kind == "numbers" else end
        try:
            build_extract_spec(merge_settings({key: value}, None))
        except UsageError as e:  # another rule may object (e.g. a method option); never the range
            assert " must be >= " not in str(e) and " must lie in " not in str(e), str(e)
