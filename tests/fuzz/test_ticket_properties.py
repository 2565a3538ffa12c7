"""Properties of the ticket file, beside the case lists: any ticket the writer makes (any mask shape, every
padding length, density 0 to 1, any JSON in the free-form metadata) reads back bit for bit and writes back the
same masks and metadata; a real ticket's stored metrics are re-measured exactly by evaluate; and random mutations
of a valid ticket end only in exit 0 or exit 2 with one line, within a memory bound. Fixed seed, bounded budget
(benchmarks/ticket_properties.py runs the same properties longer)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from harness import (
    SEED_MODEL,
    Outcome,
    clean_rejection,
    mask_shapes,
    mutations,
    place,
    read,
    valid_tickets,
    write_seed_ticket,
)
from hostile import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.ticketfile import ticket as ticket_io

BUDGET = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_PEAK_BYTES = 16 << 20  # the tickets here are ~1 KB: a reader that allocates a declared size blows far past this


@pytest.fixture(scope="module")
def seed_raw(tmp_path_factory) -> bytes:
    return write_seed_ticket(tmp_path_factory.mktemp("seed") / "seed.safetensors")


@pytest.fixture(scope="module")
def seed(seed_raw, tmp_path_factory) -> ticket_io.Ticket:
    return ticket_io.load(place(seed_raw, tmp_path_factory.mktemp("s") / "s.safetensors"))


def test_drawn_shapes_cover_every_padding_length():
    """The shape strategy reaches all eight residues mod 8 (so every count of padding bits is written and read)."""
    residues = set()

    @settings(BUDGET, max_examples=60)
    @given(shapes=mask_shapes())
    def collect(shapes):
        residues.update(torch.Size(s).numel() % 8 for s in shapes.values())

    collect()
    assert residues == set(range(8))


@pytest.mark.slow
def test_any_valid_ticket_round_trips_bit_for_bit(seed, tmp_path):
    """write -> read -> write -> read: the same masks and the same metadata strings each time. (Not the same
    file bytes: safetensors writes the metadata's keys in no fixed order.)"""
    path, again = tmp_path / "t.safetensors", tmp_path / "u.safetensors"

    @settings(BUDGET, max_examples=80)
    @given(tk=valid_tickets(seed))
    def check(tk):
        ticket_io.save(tk, path, overwrite=True)
        back = ticket_io.load(path)
        assert back.integrity == "ok"
        assert list(back.masks) == list(tk.masks)
        for name, mask in tk.masks.items():
            assert back.masks[name].dtype == torch.bool
            assert torch.equal(back.masks[name], mask), name
        assert back.shapes == tk.shapes
        assert back.metadata() == tk.metadata()
        for key in ("model", "init", "method", "data", "sparsity", "metrics", "created_by"):
            assert getattr(back, key).to_json() == getattr(tk, key).to_json(), key
        ticket_io.save(back, again, overwrite=True)  # written again from what was read: the same again
        twice = ticket_io.load(again)
        assert twice.metadata() == tk.metadata()
        assert all(torch.equal(twice.masks[n], m) for n, m in tk.masks.items())

    check()


def test_extracted_tickets_evaluate_to_their_stored_metrics(tmp_path):
    """A real tiny ticket at a drawn sparsity, written, read and written again, is re-measured exactly: the same
    correct counts on both splits as stored at extraction."""
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"

    @settings(BUDGET, max_examples=3)
    @given(sparsity=st.floats(0.05, 0.95), seed=st.integers(0, 3))
    def check(sparsity, seed):
        settings_ = {"method": "random", "dataset": "digits", "model": SEED_MODEL, "n_extract": 60, "n_val": 40}
        spec = build_extract_spec(merge_settings({**settings_, "sparsity": sparsity, "seed": seed}, None))
        runs_extract.extract_ticket(spec, out=first, overwrite=True)
        ticket_io.save(ticket_io.load(first), second, overwrite=True)
        result = runs_evaluate.evaluate_ticket(second)
        stored = ticket_io.load(first).metrics.to_json()
        assert result.reproduced
        for split, measured in (("test", result.test), ("val", result.val)):
            assert measured.correct == stored[split]["correct"], split
            assert measured.accuracy == stored[split]["accuracy"], split

    check()


def _one_line_or_ok(o: Outcome) -> bool:
    return o.exit_code == 0 or clean_rejection(o)


@pytest.mark.parametrize("reader", ["load", "inspect", "evaluate"])
@pytest.mark.slow
def test_mutated_tickets_end_in_exit_0_or_2_with_one_line(seed_raw, tmp_path, reader):
    """Random edits of a valid ticket (bytes, header JSON, metadata values of any type): accepted, or refused with
    exit 2 and one line; ticket.load's Python allocations stay bounded."""
    path = tmp_path / "m.safetensors"
    seen = set()

    @settings(BUDGET, max_examples={"load": 150, "inspect": 60, "evaluate": 25}[reader])
    @given(case=mutations(seed_raw))
    def check(case):
        what, payload = case
        seen.update(what.split("+"))
        o = read(reader, place(payload, path), trace_memory=reader == "load")
        assert _one_line_or_ok(o), (what, o)
        if reader == "load":
            assert o.peak_bytes < MAX_PEAK_BYTES, (what, o.peak_bytes)

    check()
    assert seen >= {"flip", "insert", "truncate", "header", "value"}  # every kind of edit was tried


@pytest.mark.slow
def test_mutated_tickets_through_the_installed_command(seed_raw, tmp_path):
    """The same property in a real process (exit code and stderr as a shell sees them), for a few mutations."""
    cases = []

    @settings(BUDGET, max_examples=4)
    @given(case=mutations(seed_raw))
    def collect(case):
        cases.append(case)

    collect()
    for i, (what, payload) in enumerate(cases):
        path = place(payload, tmp_path / f"m{i}.safetensors")
        p = subprocess.run(
            [sys.executable, "-m", "ticketcli", "inspect", str(path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
        )
        o = Outcome("inspect", p.returncode, p.stderr, 0.0, -1)
        assert _one_line_or_ok(o), (what, o)
