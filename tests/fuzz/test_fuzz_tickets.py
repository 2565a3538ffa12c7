"""Hostile ticket files: every way of breaking a real ticket ends in exit code 2 with one line, for every reader
(ticket.load, `ticket inspect`, `evaluate`, `export`, `train-weak`, `drift --ticket`), without allocating for sizes
the file only declares; a changed mask bit is reported by load/inspect and refused by every reader of the masks."""

from __future__ import annotations

import pytest
from harness import (
    MASK_READERS,
    READERS,
    byte_flips,
    clean_rejection,
    edit_masks,
    families,
    flip_first_bit,
    malformed,
    place,
    read,
    split,
    write_seed_ticket,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticketcli.ticketfile import ticket as ticket_io

CASES = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MAX_PEAK_BYTES = 16 << 20  # the seed ticket is ~1 KB; a reader that allocates a declared size blows far past this


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("seed") / "seed.safetensors")


@pytest.mark.slow
def test_seed_ticket_is_read_by_every_reader(seed, tmp_path):
    """The base of every mutation is valid: each reader accepts it (so rejections below are the mutation's)."""
    path = place(seed, tmp_path / "t.safetensors")
    for reader in READERS:
        assert read(reader, path).exit_code == 0, reader


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.slow
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


@pytest.mark.parametrize(
    "family",
    [
        "huge-shape",
        "header-length-lie",
        "duplicated-key",
        "padding-bits",
        "byte-length",
        "tensor-set",
        "garbage",
        "metric-field-types",
        "long-integer",
        "deep-nesting",
        "masks-digest",
        "metadata-field-types",
    ],
)
def test_each_family_is_rejected_by_load(seed, tmp_path, family):
    """Every family on its own (the mixed draw above may visit rare ones seldom)."""
    path = tmp_path / "case.safetensors"

    @settings(CASES, max_examples=25)
    @given(payload=families(seed)[family])
    def check(payload):
        outcome = read("load", place(payload, path), trace_memory=True)
        assert clean_rejection(outcome) and outcome.peak_bytes < MAX_PEAK_BYTES, outcome

    check()


@pytest.mark.parametrize("reader", ["load", "inspect", "compare"])
def test_byte_flips_never_crash(seed, tmp_path, reader):
    """Arbitrary byte changes may leave a readable ticket (a metric's digit, or a flipped mask bit, which load and
    inspect report as `integrity: modified`); otherwise a clean exit 2."""
    path = tmp_path / "case.safetensors"

    @settings(CASES, max_examples=40)
    @given(payload=byte_flips(seed))
    def check(payload):
        outcome = read(reader, place(payload, path))
        assert outcome.exit_code == 0 or clean_rejection(outcome), outcome

    check()


@st.composite
def mask_byte_flips(draw, raw: bytes):
    """1-3 bytes of the mask data changed (each really changed): what load accepts only as `modified`."""
    body = len(split(raw)[1])
    data = bytearray(raw)
    for _ in range(draw(st.integers(1, 3))):
        i = len(raw) - body + draw(st.integers(0, body - 1))
        data[i] ^= draw(st.integers(1, 255))
    return bytes(data)


@pytest.mark.parametrize("reader", ["load", *MASK_READERS])
def test_changed_mask_bytes_are_refused_by_every_reader_of_masks(seed, tmp_path, reader):
    """A changed mask byte is either set padding (every reader refuses) or a changed mask: load returns it marked
    `modified`, and evaluate, export, train-weak and drift refuse it with one line."""
    path = tmp_path / "case.safetensors"

    @settings(CASES, max_examples=15)
    @given(payload=mask_byte_flips(seed))
    def check(payload):
        if payload == seed:
            return  # the flips cancelled out
        outcome = read(reader, place(payload, path))
        if reader == "load":
            assert (
                clean_rejection(outcome)
                and "padding" in outcome.message
                or (outcome.exit_code == 0 and ticket_io.load(path).integrity == "modified")
            ), outcome
        else:
            assert clean_rejection(outcome), outcome
            assert (
                "padding" in outcome.message or "masks were modified after the ticket was written" in outcome.message
            ), outcome

    check()


def test_one_flipped_mask_bit_is_modified_not_corrupt(seed, tmp_path):
    path = place(edit_masks(seed, flip_first_bit), tmp_path / "flipped.safetensors")
    assert ticket_io.load(path).integrity == "modified"
    assert ticket_io.load(place(seed, tmp_path / "s.safetensors")).integrity == "ok"
    for reader in MASK_READERS:
        outcome = read(reader, path)
        assert clean_rejection(outcome) and "masks were modified after the ticket was written" in outcome.message


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
