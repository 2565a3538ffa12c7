"""Differential test of the safetensors reader: every crafted file of this suite (harness.py's broken tickets, and
container-level cases below) goes through ticket's reader (ticketfile.safetensors_file.read_header, and ticket.load) and
through the safetensors library. ticket never accepts what safetensors rejects; where ticket is stricter, the
difference is deliberate and listed in DELIBERATE."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest
from harness import families, malformed, write_seed_ticket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticketcli.errors import TicketFileError
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.safetensors_file import read_header

safetensors_torch = pytest.importorskip("safetensors.torch")  # torch has every dtype (numpy has no bfloat16)

# Where ticket refuses a file the safetensors library reads, on purpose (each crafted case below names its reason).
DELIBERATE = {
    "duplicate key": "a key given twice: readers would disagree on which value counts (safetensors keeps the last)",
    "extra entry key": "an entry holds exactly dtype, shape and data_offsets (safetensors ignores other keys)",
    "header over 16 MiB": "a ticket's header is a few KiB; safetensors allows 100 MB",
    "more than MAX_DIMS dimensions": "a shape of more than 8 dimensions is no mask's",
    "newer dtype": "only the dtypes this reader knows (safetensors adds new ones, e.g. C64, F8_E8M0)",
}


def entry(dtype="U8", shape=(1,), offsets=(0, 1)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def container(header: bytes | dict, body: bytes = b"\x01") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


ONE = json.dumps({"a": entry()}).encode()
CRAFTED: dict[str, tuple[bytes, str | None]] = {  # name -> (file, the DELIBERATE reason if ticket is stricter)
    "plain": (container(ONE), None),
    "byte-order mark": (container(b"\xef\xbb\xbf" + ONE), None),
    "UTF-16 header": (container(json.dumps({"a": entry()}).encode("utf-16")), None),
    "leading space": (container(b" " + ONE), None),
    "trailing spaces": (container(ONE + b"    "), None),
    "trailing NULs": (container(ONE + b"\0\0"), None),
    "lone surrogate": (
        container(b'{"__metadata__": {"x": "\\ud800"}, "a": ' + json.dumps(entry()).encode() + b"}"),
        None,
    ),
    "surrogate pair": (
        container(b'{"__metadata__": {"x": "\\ud83d\\ude00"}, "a": ' + json.dumps(entry()).encode() + b"}"),
        None,
    ),
    "metadata of a number": (container({"__metadata__": {"x": 1}, "a": entry()}), None),
    "metadata null": (container({"__metadata__": None, "a": entry()}), None),
    "metadata NaN": (container(b'{"__metadata__": {"x": NaN}, "a": ' + json.dumps(entry()).encode() + b"}"), None),
    "negative zero": (container(b'{"a": {"dtype": "U8", "shape": [-0], "data_offsets": [0, 0]}}', b""), None),
    "float shape": (container(b'{"a": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}}'), None),
    "exponent shape": (container(b'{"a": {"dtype": "U8", "shape": [1e0], "data_offsets": [0, 1]}}'), None),
    "bool shape": (container({"a": entry(shape=(True,))}), None),
    "overflow before a zero": (container({"a": entry(shape=(1 << 32, 1 << 32, 0), offsets=(0, 0))}, b""), None),
    "dimension of 2^64": (container({"a": entry(shape=(0, 1 << 64), offsets=(0, 0))}, b""), None),
    "lowercase dtype": (container({"a": entry(dtype="u8")}), None),
    "top-level list": (container(b"[1]"), None),
    "empty header": (container(b"{}", b""), None),
    "gap between tensors": (container({"a": entry(offsets=(1, 2))}, b"\x01\x01"), None),
    "bytes after the last tensor": (container({"a": entry()}, b"\x01\x02"), None),
    "header length past the file": (struct.pack("<Q", 1 << 40) + ONE, None),
    "duplicate key": (
        container(b'{"a": ' + json.dumps(entry()).encode() + b', "a": ' + json.dumps(entry()).encode() + b"}"),
        "duplicate key",
    ),
    "extra entry key": (container({"a": {**entry(), "extra": 1}}), "extra entry key"),
    "header over 16 MiB": (container(ONE + b" " * (1 << 24)), "header over 16 MiB"),
    "more than MAX_DIMS dimensions": (
        container({"a": entry(shape=(1,) * 9)}),
        "more than MAX_DIMS dimensions",
    ),
    "newer dtype": (container({"a": entry(dtype="C64", offsets=(0, 8))}, b"\0" * 8), "newer dtype"),
}


def library_accepts(data: bytes) -> bool:
    try:
        safetensors_torch.load(data)
    except Exception:  # SafetensorError and whatever else the library raises for a bad file
        return False
    return True


def ticket_accepts(data: bytes) -> bool:
    try:
        read_header(io.BytesIO(data), len(data), Path("case.safetensors"))
    except TicketFileError:
        return False
    return True


@pytest.mark.parametrize("name", list(CRAFTED))
def test_ticket_accepts_no_container_the_library_rejects(name):
    data, deliberate = CRAFTED[name]
    library, ticket = library_accepts(data), ticket_accepts(data)
    assert not (ticket and not library), f"{name}: ticket accepts what safetensors rejects"
    if deliberate is None:
        assert ticket == library, f"{name}: ticket {ticket}, safetensors {library}, and no deliberate difference listed"
    else:
        assert library and not ticket, f"{name}: listed as a deliberate difference, but it is none"
        assert deliberate in DELIBERATE


def test_every_deliberate_difference_has_a_case():
    assert {reason for _, reason in CRAFTED.values() if reason} == set(DELIBERATE)


@pytest.fixture(scope="module")
def seed(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("seed") / "t.safetensors")


def test_the_seed_ticket_is_read_by_both(seed):
    assert library_accepts(seed) and ticket_accepts(seed)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.slow
def test_no_broken_ticket_of_the_harness_is_accepted_where_the_library_rejects_it(data, seed, tmp_path_factory):
    """Every family of harness.py's broken tickets: where safetensors rejects the file, both ticket's container
    reader and ticket.load reject it too."""
    family, payload = data.draw(malformed(seed))
    if payload is None:  # "a directory": no bytes to compare
        return
    if library_accepts(payload):
        return
    assert not ticket_accepts(payload), family
    path = tmp_path_factory.mktemp("case") / "t.safetensors"
    path.write_bytes(payload)
    with pytest.raises(TicketFileError):
        ticket_io.load(path)


def test_the_harness_families_are_all_drawn_from(seed):
    assert len(families(seed)) > 10  # the strategy above draws from each of these
