"""`ticket compare` and `tc.compare`: the overlap counted from packed bytes equals numpy's on the unpacked masks
(small, padded and multi-chunk masks), a ticket compared with itself is identical with the same init, two seeds
differ in their init and fingerprint, the pairwise matrix is symmetric with ones on its diagonal, --json validates
against its schema, and bad input (missing, corrupt, another architecture, one ticket) is one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app
from ticketcli.contract.schema import schema_of
from ticketcli.errors import UsageError
from ticketcli.runs.compare import CompareResult, compare_tickets
from ticketcli.runs.overlap import both_kept
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.safetensors_file import CHUNK_BYTES

runner = CliRunner()
TINY = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--model", "mlp:64-16-10"]
TINY += ["--epochs", "1", "--batch-size", "64", "--quiet"]
SHA = "0123456789abcdef" * 4


def invoke(*args: str, columns: int = 200):
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns)})


def one_line_error(r) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), (r.exit_code, r.stderr)
    assert "Traceback" not in r.output
    return lines[0]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> dict[int, Path]:
    """Two tiny digits tickets extracted with seeds 0 and 1."""
    d = tmp_path_factory.mktemp("seeds")
    out = {}
    for seed in (0, 1):
        out[seed] = d / f"s{seed}.safetensors"
        r = invoke("extract", *TINY, "--seed", str(seed), "--out", str(out[seed]))
        assert r.exit_code == 0, r.output
    return out


def hand_ticket(path: Path, shapes: dict[str, tuple[int, ...]], densities: list[float], seed: int) -> Path:
    """A ticket file written by the ticket writer with random masks of the given densities (no extraction)."""
    g = torch.Generator().manual_seed(seed)
    masks = {n: torch.rand(s, generator=g) < p for (n, s), p in zip(shapes.items(), densities, strict=True)}
    widths = [shapes["layers.0.weight"][1], *(s[0] for s in shapes.values())]
    tk = ticket_io.Ticket.of(
        masks,
        model={"spec": "mlp:" + "-".join(map(str, widths)), "arch": "mlp", "widths": widths, "bias": False},
        init={"scheme": "scaled-kaiming-uniform", "k": 0.5, "gain": "relu", "seed": 0},
        weights_sha256=SHA,
        method={"name": "random", "sparsity": 0.5},
        data={"dataset": "digits", "n_extract": 10, "n_val": 5, "n_test": 5, "split_seed": 0},
        sparsity={"requested": 0.5, "achieved": 0.5},
        metrics={"test": {"accuracy": 0.25 + seed / 10}, "val": {"accuracy": 0.5}},
        created_by={},
    )
    ticket_io.save(tk, path)
    return path


# 3000x3000 packs into 1,125,000 bytes: more than one chunk of CHUNK_BYTES, and numpy's path (above SMALL_BYTES);
# 7x13 = 91 entries leave 5 padding bits in the last byte.
BIG = {"layers.0.weight": (3000, 3000), "layers.1.weight": (7, 3000), "layers.2.weight": (13, 7)}


def test_the_big_mask_spans_more_than_one_chunk():
    assert (3000 * 3000 + 7) // 8 > CHUNK_BYTES


@pytest.mark.parametrize("densities", [([0.3, 0.5, 0.5], [0.3, 0.9, 0.1]), ([0.01, 0.0, 1.0], [0.5, 0.0, 1.0])])
def test_overlap_equals_numpy_on_the_unpacked_masks(tmp_path, densities):
    """The oracle: unpack both tickets' masks with the loader and count with numpy's logical and/or."""
    a = hand_ticket(tmp_path / "a.safetensors", BIG, densities[0], seed=1)
    b = hand_ticket(tmp_path / "b.safetensors", BIG, densities[1], seed=2)
    result = compare_tickets([a, b])
    ma, mb = ticket_io.load(a).masks, ticket_io.load(b).masks
    pair = result.pairs[0]
    assert [la.name for la in pair.layers] == list(BIG)
    sums = np.zeros(4, dtype=np.int64)
    for la in pair.layers:
        x, y = ma[la.name].numpy(), mb[la.name].numpy()
        counts = np.array([x.size, x.sum(), y.sum(), np.logical_and(x, y).sum()])
        either = np.logical_or(x, y).sum()
        o = la.overlap
        assert (o.total, o.kept_a, o.kept_b, o.both, o.either) == (*counts, either)
        assert o.jaccard == (counts[3] / either if either else 1.0)
        assert o.a_kept_in_b == (counts[3] / counts[1] if counts[1] else None)
        assert o.b_kept_in_a == (counts[3] / counts[2] if counts[2] else None)
        sums += counts
    total = pair.overlap
    assert (total.total, total.kept_a, total.kept_b, total.both) == tuple(sums)
    assert total.jaccard == pytest.approx(sums[3] / (sums[1] + sums[2] - sums[3]))
    assert 0 < total.jaccard < 1
    assert pair.same_init  # same recorded init and fingerprint: only the masks differ
    assert pair.change["accuracy"]["test"] == pytest.approx(0.1)
    assert result.tickets[0].kept == sums[1] and result.tickets[1].total == sums[0]


@pytest.mark.slow
def test_memory_stays_bounded_by_the_chunks_not_the_masks(tmp_path):
    """Two tickets of 36M weights (4.3 MiB of packed mask each): compared a chunk at a time, the peak stays below
    what holding both packed masks (8.6 MiB), let alone unpacking one (36 MB of bools), would take."""
    import tracemalloc

    shapes = {"layers.0.weight": (6000, 6000), "layers.1.weight": (10, 6000)}
    a = hand_ticket(tmp_path / "a.safetensors", shapes, [0.5, 0.5], seed=1)
    b = hand_ticket(tmp_path / "b.safetensors", shapes, [0.3, 0.5], seed=2)
    tracemalloc.start()
    try:
        result = compare_tickets([a, b])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * 2**20, peak
    o = result.pairs[0].overlap
    assert o.total == 36_060_000 and 0 < o.both < min(o.kept_a, o.kept_b)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    data=st.binary(min_size=0, max_size=9000),
    cuts_a=st.lists(st.integers(0, 9000), max_size=5),
    cuts_b=st.lists(st.integers(0, 9000), max_size=5),
    key=st.integers(0, 255),
)
def test_both_counts_pieces_that_do_not_line_up(data, cuts_a, cuts_b, key):
    """Two files read back in pieces of different lengths (a short read) still count the same AND."""
    other = bytes((b * 37 + key) % 256 for b in data)

    def pieces(raw: bytes, cuts: list[int]):
        edges = [0, *sorted(c for c in cuts if c <= len(raw)), len(raw)]
        return iter([raw[i:j] for i, j in zip(edges, edges[1:]) if j > i])

    x, y = np.frombuffer(data, np.uint8), np.frombuffer(other, np.uint8)
    want = int(np.unpackbits(x & y).sum())
    assert both_kept(pieces(data, cuts_a), pieces(other, cuts_b)) == want


def test_a_ticket_compared_with_itself(seeds):
    r = invoke("compare", str(seeds[0]), str(seeds[0]), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    pair = doc["pairs"][0]
    assert pair["same_init"] is True and pair["init_differences"] == [] and pair["data_differences"] == []
    assert pair["overlap"]["jaccard"] == 1.0 and all(la["jaccard"] == 1.0 for la in pair["layers"])
    assert pair["overlap"]["a_kept_in_b"] == 1.0 and pair["overlap"]["both"] == doc["tickets"][0]["sparsity"]["kept"]
    assert pair["change"] == {"accuracy": {"test": 0.0, "val": 0.0}, "sparsity": {"requested": 0.0, "achieved": 0.0}}
    table = invoke("compare", str(seeds[0]), str(seeds[0])).stdout
    assert "init: same init" in table and "layers.0.weight" in table


def test_two_seeds_differ_in_their_init_and_fingerprint(seeds):
    r = invoke("compare", str(seeds[0]), str(seeds[1]), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    a, b = doc["tickets"]
    assert a["weights_sha256"] != b["weights_sha256"] and (a["seed"], b["seed"]) == (0, 1)
    pair = doc["pairs"][0]
    fields = {d["field"]: (d["a"], d["b"]) for d in pair["init_differences"]}
    assert pair["same_init"] is False
    assert fields["weights_sha256"] == (a["weights_sha256"], b["weights_sha256"]) and fields["init.seed"] == (0, 1)
    assert {d["field"] for d in pair["data_differences"]} == {"data.split_seed"}
    assert pair["overlap"]["jaccard"] < 1
    want = b["metrics"]["test"]["accuracy"] - a["metrics"]["test"]["accuracy"]
    assert pair["change"]["accuracy"]["test"] == pytest.approx(want)
    table = invoke("compare", str(seeds[0]), str(seeds[1])).stdout
    assert "init: differs: weights_sha256" in table and "init.seed 0 vs 1" in table


def test_the_matrix_is_symmetric_with_ones_on_its_diagonal(seeds):
    paths = [seeds[0], seeds[1], seeds[0]]
    result = compare_tickets(paths)
    jac, same = result.jaccard_matrix(), result.same_init_matrix()
    assert [(p.a, p.b) for p in result.pairs] == [(0, 1), (0, 2), (1, 2)]
    for i in range(3):
        assert jac[i][i] == 1.0 and same[i][i] is True
        for j in range(3):
            assert jac[i][j] == jac[j][i] and same[i][j] == same[j][i]
    assert jac[0][2] == 1.0 and same[0][2] and not same[0][1] and jac[0][1] < 1
    two = compare_tickets(paths[:2]).pairs[0]
    assert result.pair(1, 0) == result.pairs[0] and result.pairs[0].overlap == two.overlap
    r = invoke("compare", *map(str, paths), columns=80)
    assert r.exit_code == 0 and "Jaccard over all masked weights" in r.stdout and "same init" in r.stdout
    assert "…" not in r.stdout  # at 80 columns the tables fold long values, never cut them
    narrow = invoke("compare", *map(str, [*paths, seeds[1]]), columns=40).stdout  # a 4x4 matrix would not fit:
    assert "pairs" in narrow and "Jaccard over all masked weights" not in narrow  # one row per pair instead
    assert narrow.count(" yes ") == 2 and narrow.count(" no ") == 4  # (0, 2) and (1, 3) share their init


@pytest.mark.parametrize("n", [2, 3])
def test_the_json_document_validates_against_its_schema(seeds, n):
    jsonschema = pytest.importorskip("jsonschema")
    paths = [seeds[0], seeds[1], seeds[1]][:n]
    r = invoke("compare", *map(str, paths), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "ticket.compare/1" and len(doc["pairs"]) == n * (n - 1) // 2
    assert all(t["device"] == "cpu" and "processes" not in t for t in doc["tickets"])  # one process, as recorded
    jsonschema.validate(doc, schema_of("compare"))
    assert len(doc["matrix"]["jaccard"]) == n and all(len(row) == n for row in doc["matrix"]["same_init"])
    bad = {**doc, "pairs": [{**doc["pairs"][0], "overlap": {**doc["pairs"][0]["overlap"], "jaccard": 1.5}}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema_of("compare"))


def test_the_python_api_returns_what_the_command_prints(seeds):
    result = tc.compare(seeds[0], str(seeds[1]))
    assert isinstance(result, CompareResult)
    doc = json.loads(invoke("compare", str(seeds[0]), str(seeds[1]), "--json").stdout)
    assert result.to_document() == doc and result["pairs"][0]["same_init"] is False
    loaded = tc.load(seeds[0])
    assert tc.compare(loaded, seeds[0]).pairs[0].overlap.jaccard == 1.0  # a loaded Ticket is read from its file
    with pytest.raises(UsageError, match="must be a path or a saved Ticket"):
        tc.compare(seeds[0], 3)  # type: ignore[arg-type]


def test_an_unsaved_ticket_is_refused_by_the_api(seeds):
    t = tc.extract("mlp:64-16-10", "digits", epochs=1, n_extract=200, n_val=100, batch_size=64, progress=False)
    with pytest.raises(UsageError, match="has no file"):
        tc.compare(t, seeds[0])


# --- bad input: one line, exit 2 -------------------------------------------------------------------------------


def test_fewer_than_two_tickets(seeds):
    assert "at least two tickets" in one_line_error(invoke("compare", str(seeds[0])))
    with pytest.raises(UsageError):
        compare_tickets([seeds[0]])


def test_tickets_of_another_architecture_are_refused(seeds, tmp_path):
    other = tmp_path / "wide.safetensors"
    r = invoke("extract", *TINY[:6], "--model", "mlp:64-32-10", *TINY[8:], "--out", str(other))
    assert r.exit_code == 0, r.output
    line = one_line_error(invoke("compare", str(seeds[0]), str(other)))
    assert "mask different layers" in line and "mlp:64-16-10 vs mlp:64-32-10" in line and "32x64" in line
    line = one_line_error(invoke("compare", str(seeds[0]), str(seeds[1]), str(other), "--json"))
    assert "mask different layers" in line


def test_missing_garbage_and_directories_are_one_line(seeds, tmp_path):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x07" * 64)
    for bad in (tmp_path / "missing.safetensors", garbage, tmp_path):
        for args in ((seeds[0], bad), (bad, seeds[0]), (seeds[0], seeds[1], bad)):
            r = invoke("compare", *map(str, args), "--json")
            line = one_line_error(r)
            assert str(bad) in line and r.stdout == ""


def flip_body_byte(raw: bytes, offset: int, bits: int) -> bytes:
    """The file with `bits` xored into byte `offset` of its tensor data (the metadata, masks_sha256 included, kept)."""
    data = bytearray(raw)
    data[8 + int.from_bytes(raw[:8], "little") + offset] ^= bits
    return bytes(data)


def test_a_corrupt_mask_is_refused_and_a_modified_one_reported(seeds, tmp_path):
    """Inspect's rules: set padding bits are corrupt (exit 2); a changed mask bit is read, reported as modified."""
    flipped = tmp_path / "flipped.safetensors"
    flipped.write_bytes(flip_body_byte(seeds[0].read_bytes(), 0, 0x80))  # the first entry of a mask: never padding
    r = invoke("compare", str(seeds[0]), str(flipped), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [t["integrity"] for t in doc["tickets"]] == ["ok", "modified"]
    assert doc["pairs"][0]["overlap"]["either"] - doc["pairs"][0]["overlap"]["both"] == 1  # the one flipped bit
    assert "masks were modified" in r.stderr
    odd = hand_ticket(tmp_path / "odd.safetensors", {"layers.0.weight": (3, 3)}, [0.5], seed=0)
    padded = tmp_path / "padded.safetensors"
    padded.write_bytes(flip_body_byte(odd.read_bytes(), 1, 0x01))  # 9 entries: 7 padding bits in the second byte
    assert "padding bits are set" in one_line_error(invoke("compare", str(odd), str(padded)))


def test_masks_rewritten_in_place_after_validation_are_refused(seeds, monkeypatch):
    """Bytes read for the overlap that cannot be the validated masks (more kept by both than by either) end in one
    TicketFileError line, never in a Jaccard above 1."""

    def every_bit_set(self, name):
        begin, end = self._spans[name]
        yield b"\xff" * (end - begin)

    monkeypatch.setattr(ticket_io.MaskFile, "pieces", every_bit_set)
    with pytest.raises(ticket_io.TicketFileError, match="changed while being compared"):
        compare_tickets([seeds[0], seeds[1]])
    assert "changed while being compared" in one_line_error(invoke("compare", str(seeds[0]), str(seeds[1])))
