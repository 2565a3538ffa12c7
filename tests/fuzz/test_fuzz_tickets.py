"""Hostile ticket files: every way of breaking a real ticket ends in exit code 2 with one line, for every reader
(ticket.load, `ticket inspect`, `ticket evaluate`), without allocating for sizes the file only declares."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import READERS, byte_flips, clean_rejection, families, malformed, place, read, write_seed_ticket

CASES = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
MAX_PEAK_BYTES = 16 << 20  # the seed ticket is ~1 KB; a reader that allocates a declared size blows far past this


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("seed") / "seed.safetensors")


def test_seed_ticket_is_read_by_every_reader(seed, tmp_path):
    """The base of every mutation is valid: each reader accepts it (so rejections below are the mutation's)."""
    path = place(seed, tmp_path / "t.safetensors")
    for reader in READERS:
        assert read(reader, path).exit_code == 0, reader


@pytest.mark.parametrize("reader", list(READERS))
def test_malformed_tickets_exit_2_with_one_line(seed, tmp_path, reader):
    path = tmp_path / "case.safetensors"
    seen = set()

    @CASES
    @given(case=malformed(seed))
    def check(case):
        family, payload = case
        seen.add(family)
        outcome = read(reader, place(payload, path), trace_memory=reader == "load")
        assert clean_rejection(outcome), (family, outcome)
        if reader == "load":
            assert outcome.peak_bytes < MAX_PEAK_BYTES, (family, outcome.peak_bytes)

    check()
    assert len(seen) >= len(families(seed)) // 2  # the draw really spreads over the families


@pytest.mark.parametrize("family", ["huge-shape", "header-length-lie", "duplicated-key", "padding-bits",
                                    "byte-length", "tensor-set", "garbage"])
def test_each_family_is_rejected_by_load(seed, tmp_path, family):
    """Every family on its own (the mixed draw above may visit rare ones seldom)."""
    path = tmp_path / "case.safetensors"

    @settings(CASES, max_examples=25)
    @given(payload=families(seed)[family])
    def check(payload):
        outcome = read("load", place(payload, path), trace_memory=True)
        assert clean_rejection(outcome) and outcome.peak_bytes < MAX_PEAK_BYTES, outcome

    check()


@pytest.mark.parametrize("reader", ["load", "inspect"])
def test_byte_flips_never_crash(seed, tmp_path, reader):
    """Arbitrary byte changes may leave a valid ticket (a flipped mask bit); otherwise a clean exit 2."""
    path = tmp_path / "case.safetensors"

    @settings(CASES, max_examples=40)
    @given(payload=byte_flips(seed))
    def check(payload):
        outcome = read(reader, place(payload, path))
        assert outcome.exit_code == 0 or clean_rejection(outcome), outcome

    check()


def test_directory_and_empty_file(tmp_path):
    for payload in (None, b""):
        path = place(payload, tmp_path / "x.safetensors")
        for reader in READERS:
            assert clean_rejection(read(reader, path)), (reader, payload)


def test_huge_declared_tensor_is_rejected_before_safetensors(seed, tmp_path):
    """A header that declares a 10^12-element tensor with a consistent byte range: rejected by our own header
    check (which names the byte range), not by letting safetensors try."""
    from harness import HUGE, encode, split

    header, body = split(seed)
    name = next(k for k in header if k != "__metadata__")
    header[name] = {"dtype": "U8", "shape": [HUGE], "data_offsets": [0, HUGE]}
    path = place(encode(header, body), tmp_path / "huge.safetensors")
    outcome = read("load", path, trace_memory=True)
    assert clean_rejection(outcome) and "data_offsets" in outcome.message
    assert outcome.peak_bytes < MAX_PEAK_BYTES


def test_duplicated_header_key_is_named(seed, tmp_path):
    from harness import encode, split

    header, body = split(seed)
    import json

    text = json.dumps(header, separators=(",", ":")).replace('{"__metadata__":{', '{"__metadata__":{"format":"x",', 1)
    outcome = read("load", place(encode(text, body), tmp_path / "dup.safetensors"))
    assert clean_rejection(outcome) and "'format' appears twice" in outcome.message
