"""The ticket file format v1: bit packing, save/load round trips, atomic writes and rejection of bad files."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from safetensors.torch import save_file

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MetricsRecord, Provenance, SparsityRecord
from ticketcli.ticketfile.ticket import Ticket, pack_bits, unpack_bits

SHA = "0123456789abcdef" * 4
SHAPES = {"layers.0.weight": (3, 5), "layers.1.weight": (7,)}


def oracle_pack(bits: list[int]) -> bytes:
    """The spec, written out: element i goes to byte i // 8, bit 7 - i % 8 (MSB first); padding stays zero."""
    out = bytearray((len(bits) + 7) // 8)
    for i, b in enumerate(bits):
        if b:
            out[i // 8] |= 1 << (7 - i % 8)
    return bytes(out)


def random_mask(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) < 0.5


# ---------------------------------------------------------------------------------------------- pack / unpack


@pytest.mark.parametrize("n", range(41))
def test_pack_unpack_round_trip_every_length(n):
    mask = random_mask((n,), seed=1000 + n)
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    assert packed.numel() == math.ceil(n / 8)
    assert bytes(packed.numpy()) == oracle_pack(mask.int().tolist())
    assert np.array_equal(packed.numpy(), np.packbits(mask.numpy(), bitorder="big"))
    back = unpack_bits(packed, (n,))
    assert back.dtype == torch.bool and tuple(back.shape) == (n,)
    assert torch.equal(back, mask)


@pytest.mark.parametrize("shape", [(3, 5), (4, 8), (1, 1), (2, 3, 4), (0, 3)])
def test_pack_unpack_multi_dim_is_row_major(shape):
    mask = random_mask(shape, seed=7)
    packed = pack_bits(mask)
    n = math.prod(shape)
    assert packed.numel() == math.ceil(n / 8)
    assert bytes(packed.numpy()) == oracle_pack(mask.reshape(-1).int().tolist())
    back = unpack_bits(packed, shape)
    assert tuple(back.shape) == shape and torch.equal(back, mask)


def test_pack_non_contiguous_uses_logical_row_major_order():
    mask = random_mask((5, 3), seed=3)
    t = mask.t()  # (3, 5) view, not contiguous
    assert not t.is_contiguous()
    assert bytes(pack_bits(t).numpy()) == oracle_pack(t.reshape(-1).int().tolist())
    assert torch.equal(unpack_bits(pack_bits(t), (3, 5)), t)


def test_pack_known_bytes():
    mask = torch.tensor([1, 0, 0, 0, 0, 0, 0, 0, 1], dtype=torch.bool)
    assert pack_bits(mask).tolist() == [0x80, 0x80]
    assert pack_bits(torch.tensor([0, 0, 0, 0, 0, 0, 0, 1], dtype=torch.bool)).tolist() == [0x01]
    assert pack_bits(torch.ones(10, dtype=torch.bool)).tolist() == [0xFF, 0xC0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(0, 2**31 - 1))
def test_pack_unpack_round_trip_property(shape, seed):
    shape = tuple(shape)
    mask = random_mask(shape, seed)
    packed = pack_bits(mask)
    assert packed.numel() == (math.prod(shape) + 7) // 8
    assert torch.equal(unpack_bits(packed, shape), mask)


@pytest.mark.parametrize("n", [1, 5, 7, 9, 15, 33])
def test_unpack_rejects_each_set_padding_bit(n):
    packed = pack_bits(random_mask((n,), seed=n))
    assert torch.equal(unpack_bits(packed, (n,)), random_mask((n,), seed=n))
    for pad in range(n, 8 * packed.numel()):  # every padding bit, one at a time
        bad = packed.clone()
        bad[pad // 8] |= 1 << (7 - pad % 8)
        with pytest.raises(TicketFileError, match="padding"):
            unpack_bits(bad, (n,))


@pytest.mark.parametrize("n", [0, 1, 8, 9, 16])
def test_unpack_rejects_wrong_byte_length(n):
    packed = pack_bits(random_mask((n,), seed=n))
    longer = torch.cat([packed, torch.zeros(1, dtype=torch.uint8)])
    with pytest.raises(TicketFileError):
        unpack_bits(longer, (n,))
    if packed.numel() > 0:
        with pytest.raises(TicketFileError):
            unpack_bits(packed[:-1], (n,))


def test_unpack_rejects_2d_packed():
    packed = pack_bits(torch.ones(16, dtype=torch.bool)).reshape(2, 1)
    with pytest.raises(TicketFileError):
        unpack_bits(packed, (16,))


# ---------------------------------------------------------------------------------------------- save / load


def make_ticket(seed: int = 0, checkpoint: dict | None = None) -> Ticket:
    masks = {name: random_mask(shape, seed + i) for i, (name, shape) in enumerate(SHAPES.items())}
    return Ticket.of(
        masks,
        model={"spec": "mlp:5-3-7", "arch": "mlp", "widths": [5, 3, 7], "bias": False},
        init={"scheme": "scaled-kaiming-uniform", "k": 0.5, "gain": "relu", "seed": seed},
        weights_sha256=SHA,
        method={"name": "random", "sparsity": 0.5, "layer_densities": None},
        data={"dataset": "digits", "n_extract": 10, "n_val": 5, "n_test": 5, "split_seed": seed},
        sparsity={},
        metrics={},
        created_by={},
        checkpoint=checkpoint,
    )


FIELDS = (
    "model",
    "init",
    "shapes",
    "weights_sha256",
    "method",
    "data",
    "sparsity",
    "metrics",
    "created_by",
    "checkpoint",
)


def assert_same_ticket(a: Ticket, b: Ticket) -> None:
    assert set(a.masks) == set(b.masks)
    for name in a.masks:
        assert b.masks[name].dtype == torch.bool
        assert torch.equal(a.masks[name], b.masks[name]), name
    for f in FIELDS:
        assert getattr(a, f) == getattr(b, f), f


def test_ticket_shapes_default_from_masks():
    t = make_ticket()
    assert t.shapes == {name: list(shape) for name, shape in SHAPES.items()}


def test_save_load_round_trip(tmp_path):
    t = make_ticket()
    path = tmp_path / "t.safetensors"
    size = ticket_io.save(t, path)
    assert size == path.stat().st_size
    back = ticket_io.load(path)
    assert_same_ticket(t, back)
    assert path.stat().st_size <= sum(math.ceil(math.prod(s) / 8) for s in SHAPES.values()) + 16384
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]  # no temp files left behind


def test_round_trip_with_rich_metadata_and_checkpoint(tmp_path):
    t = make_ticket(seed=3, checkpoint={"path": "w.pt", "sha256": "f" * 64})
    t.sparsity = SparsityRecord.of({"requested": 0.9, "achieved": 0.9, "per_layer": {"layers.0.weight": 0.8666}})
    t.metrics = MetricsRecord.of({"test": {"accuracy": 0.5, "correct": 3, "loss": 1.25}, "device": "cpu"})
    t.created_by = Provenance.of({"ticketcli": "0.1.0", "torch": torch.__version__, "unicode": "é ✓"})
    path = tmp_path / "t.safetensors"
    ticket_io.save(t, path)
    assert_same_ticket(t, ticket_io.load(path))


def test_file_layout_matches_spec(tmp_path):
    """The bytes on disk are the spec's layout, read with plain safetensors (not through ticketcli)."""
    t = make_ticket(seed=5)
    path = tmp_path / "t.safetensors"
    ticket_io.save(t, path)
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    meta = json.loads(raw[8 : 8 + n])["__metadata__"]
    assert meta["format"] == "ticket" and meta["format_version"] == "1"
    assert all(isinstance(v, str) for v in meta.values())
    assert meta["weights_sha256"] == SHA
    for key in ("model", "init", "shapes", "method", "data", "sparsity", "metrics", "created_by"):
        assert json.loads(meta[key]) == (t.shapes if key == "shapes" else getattr(t, key).to_json())
    tensors = st_load(raw)
    assert set(tensors) == {f"mask/{name}" for name in SHAPES}
    for name, _shape in SHAPES.items():
        packed = tensors[f"mask/{name}"]
        assert packed.dtype == torch.uint8 and packed.dim() == 1
        assert bytes(packed.numpy()) == oracle_pack(t.masks[name].reshape(-1).int().tolist())


def test_save_refuses_to_overwrite_without_flag(tmp_path):
    path = tmp_path / "t.safetensors"
    ticket_io.save(make_ticket(seed=0), path)
    before = path.read_bytes()
    with pytest.raises(UsageError):
        ticket_io.save(make_ticket(seed=1), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]

    new = make_ticket(seed=1)
    ticket_io.save(new, path, overwrite=True)
    assert path.read_bytes() != before
    assert_same_ticket(new, ticket_io.load(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]


def test_save_into_missing_directory(tmp_path):
    with pytest.raises(UsageError):
        ticket_io.save(make_ticket(), tmp_path / "nope" / "t.safetensors")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- bad files


def valid_parts(seed: int = 0) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    t = make_ticket(seed)
    return {f"mask/{n}": pack_bits(m) for n, m in t.masks.items()}, t.metadata()


def assert_rejected(path: Path) -> TicketFileError:
    with pytest.raises(TicketFileError) as info:
        ticket_io.load(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return info.value


def write(tmp_path: Path, tensors: dict, meta: dict | None, name: str = "bad.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(st_save(tensors, metadata=meta))
    return path


def test_valid_parts_load(tmp_path):
    """The base every corruption below starts from is itself a valid ticket."""
    tensors, meta = valid_parts()
    assert_same_ticket(make_ticket(), ticket_io.load(write(tmp_path, tensors, meta)))


def test_load_missing_path(tmp_path):
    assert_rejected(tmp_path / "missing.safetensors")


def test_load_directory(tmp_path):
    d = tmp_path / "dir.safetensors"
    d.mkdir()
    assert_rejected(d)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"abc",
        b"\x00" * 7,
        struct.pack("<Q", 0),
        struct.pack("<Q", 1000) + b"{}",
        struct.pack("<Q", 2**63) + b"{}",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 2) + b'"x"',
        struct.pack("<Q", 4) + b"{\xff\xfe}",
        struct.pack("<Q", 2) + b"{}",
    ],
    ids=[
        "empty",
        "3-bytes",
        "7-bytes",
        "zero-header",
        "header-too-long",
        "huge-header",
        "header-list",
        "header-string",
        "header-not-utf8",
        "empty-header",
    ],
)
def test_load_rejects_non_safetensors(tmp_path, content):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    assert_rejected(path)


@pytest.mark.parametrize("seed", range(5))
def test_load_rejects_random_bytes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    path = tmp_path / "random.safetensors"
    path.write_bytes(rng.integers(0, 256, size=int(rng.integers(8, 2000)), dtype=np.uint8).tobytes())
    assert_rejected(path)
    # random bytes behind a plausible (small) header length
    path.write_bytes(struct.pack("<Q", 64) + rng.integers(0, 256, size=200, dtype=np.uint8).tobytes())
    assert_rejected(path)


def test_load_rejects_every_truncation(tmp_path):
    tensors, meta = valid_parts()
    raw = st_save(tensors, metadata=meta)
    path = tmp_path / "cut.safetensors"
    offsets = sorted(set(range(0, len(raw), 7)) | {len(raw) - 1, len(raw) - 2, 8, 9})
    for cut in offsets:
        path.write_bytes(raw[:cut])
        assert_rejected(path)


def test_load_rejects_plain_safetensors(tmp_path):
    tensors, _ = valid_parts()
    path = tmp_path / "plain.safetensors"
    save_file(tensors, str(path))
    assert_rejected(path)
    save_file(tensors, str(path), metadata={"format": "pt"})
    assert_rejected(path)


def mutate(key: str, value):
    def f(tensors, meta):
        if value is None:
            del meta[key]
        else:
            meta[key] = value

    return f


def mutate_json(key: str, fn):
    def f(tensors, meta):
        d = json.loads(meta[key])
        fn(d)
        meta[key] = json.dumps(d)

    return f


def setitem(k, v):
    def f(d):
        if v is None:
            del d[k]
        else:
            d[k] = v

    return f


W0, W1 = "mask/layers.0.weight", "mask/layers.1.weight"


def tensor_edit(fn):
    def f(tensors, meta):
        fn(tensors)

    return f


BAD_METADATA = {
    "format-version-2": mutate("format_version", "2"),
    "format-version-int-string": mutate("format_version", "01"),
    "no-format-version": mutate("format_version", None),
    "format-other": mutate("format", "tickets"),
    "model-not-json": mutate("model", "{not json"),
    "init-empty": mutate("init", ""),
    "shapes-as-list": mutate("shapes", json.dumps([[3, 5], [7]])),
    "model-as-string": mutate("model", json.dumps("mlp:5-3-7")),
    "metrics-as-number": mutate("metrics", "3"),
    "missing-metrics": mutate("metrics", None),
    "missing-created-by": mutate("created_by", None),
    "missing-sha": mutate("weights_sha256", None),
    "sha-not-hex": mutate("weights_sha256", "z" * 64),
    "sha-upper-case": mutate("weights_sha256", SHA.upper()),
    "sha-too-short": mutate("weights_sha256", SHA[:63]),
    "sha-json-quoted": mutate("weights_sha256", json.dumps(SHA)),
    "model-no-spec": mutate_json("model", setitem("spec", None)),
    "model-spec-number": mutate_json("model", setitem("spec", 3)),
    "init-no-scheme": mutate_json("init", setitem("scheme", None)),
    "init-seed-negative": mutate_json("init", setitem("seed", -1)),
    "init-seed-float": mutate_json("init", setitem("seed", 1.5)),
    "init-seed-bool": mutate_json("init", setitem("seed", True)),
    "init-k-zero": mutate_json("init", setitem("k", 0)),
    "init-k-string": mutate_json("init", setitem("k", "0.5")),
    "method-no-name": mutate_json("method", setitem("name", None)),
    "data-no-dataset": mutate_json("data", setitem("dataset", None)),
    "data-n-extract-negative": mutate_json("data", setitem("n_extract", -1)),
    "data-no-split-seed": mutate_json("data", setitem("split_seed", None)),
    "shapes-empty": mutate("shapes", "{}"),
    "shape-zero-dim": mutate_json("shapes", setitem("layers.1.weight", [0])),
    "shape-negative": mutate_json("shapes", setitem("layers.1.weight", [-7])),
    "shape-not-list": mutate_json("shapes", setitem("layers.1.weight", 7)),
    "shape-float": mutate_json("shapes", setitem("layers.1.weight", [7.0])),
    "shape-huge": mutate_json("shapes", setitem("layers.1.weight", [2**40, 2**40])),
    "shape-disagrees": mutate_json("shapes", setitem("layers.1.weight", [3, 5])),
    "shapes-extra-name": mutate_json("shapes", setitem("layers.2.weight", [7])),
    "checkpoint-not-json": mutate("checkpoint", "{"),
    "checkpoint-bad-sha": mutate("checkpoint", json.dumps({"path": "w.pt", "sha256": "nothex"})),
    "missing-mask-tensor": tensor_edit(lambda t: t.pop(W1)),
    "extra-tensor": tensor_edit(lambda t: t.update({"mask/layers.9.weight": torch.zeros(1, dtype=torch.uint8)})),
    "extra-non-mask-tensor": tensor_edit(lambda t: t.update({"weights": torch.zeros(3)})),
    "renamed-tensor": tensor_edit(lambda t: t.update({"layers.1.weight": t.pop(W1)})),
    "float32-mask": tensor_edit(lambda t: t.update({W1: t[W1].to(torch.float32)})),
    "int8-mask": tensor_edit(lambda t: t.update({W1: t[W1].to(torch.int8)})),
    "bool-mask": tensor_edit(lambda t: t.update({W1: torch.ones(7, dtype=torch.bool)})),
    "2d-mask": tensor_edit(lambda t: t.update({W0: t[W0].reshape(1, -1)})),
    "one-byte-too-many": tensor_edit(lambda t: t.update({W0: torch.cat([t[W0], torch.zeros(1, dtype=torch.uint8)])})),
    "one-byte-too-few": tensor_edit(lambda t: t.update({W0: t[W0][:-1].clone()})),
    "padding-bit-set": tensor_edit(lambda t: t.update({W1: t[W1] | 1})),  # 7 elements: the LSB is padding
    "padding-bit-set-2d": tensor_edit(lambda t: t.update({W0: torch.cat([t[W0][:1], t[W0][1:] | 1])})),
}


@pytest.mark.parametrize("corrupt", list(BAD_METADATA.values()), ids=list(BAD_METADATA))
def test_load_rejects_bad_content(tmp_path, corrupt):
    tensors, meta = valid_parts()
    tensors = dict(tensors)
    corrupt(tensors, meta)
    assert_rejected(write(tmp_path, tensors, meta))


def test_padding_bit_corruption_is_the_only_difference(tmp_path):
    """Sanity for the padding case: the same bytes with the padding bit cleared do load."""
    tensors, meta = valid_parts()
    assert int(tensors[W1][0]) & 1 == 0
    tensors[W1] = tensors[W1] | 1
    assert_rejected(write(tmp_path, tensors, meta, "a.safetensors"))
    tensors[W1] = tensors[W1] & 0xFE
    ticket_io.load(write(tmp_path, tensors, meta, "b.safetensors"))


def test_load_accepts_mask_tensors_in_any_file_order(tmp_path):
    tensors, meta = valid_parts()
    reordered = dict(reversed(list(tensors.items())))
    back = ticket_io.load(write(tmp_path, reordered, meta))
    assert_same_ticket(make_ticket(), back)


# ---------------------------------------------------------------------------------------------- regressions


def test_deeply_nested_json_is_rejected_not_a_recursion_error(tmp_path):
    header = b"[" * 200_000
    p = tmp_path / "nested.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header)
    assert_rejected(p)
    tensors, meta = valid_parts()
    meta["sparsity"] = "[" * 200_000
    assert_rejected(write(tmp_path, tensors, meta))


def test_infinite_init_k_is_rejected(tmp_path):
    tensors, meta = valid_parts()
    meta["init"] = meta["init"].replace('"k": 0.5', '"k": Infinity')
    assert "Infinity" in meta["init"]
    assert_rejected(write(tmp_path, tensors, meta))


def test_save_onto_a_directory_is_a_usage_error(tmp_path):
    (tmp_path / "d.safetensors").mkdir()
    with pytest.raises(UsageError, match="directory"):
        ticket_io.save(make_ticket(), tmp_path / "d.safetensors", overwrite=True)


def test_saved_file_mode_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        ticket_io.save(make_ticket(), tmp_path / "t.safetensors")
    finally:
        os.umask(old)
    assert (tmp_path / "t.safetensors").stat().st_mode & 0o777 == 0o644


def test_masks_keep_parameter_order(tmp_path):
    names = [f"layers.{i}.{kind}" for i in (0, 2, 10) for kind in ("weight", "bias")]
    t = make_ticket()
    t.masks = {n: random_mask((3,), i) for i, n in enumerate(names)}
    t.shapes = {n: [3] for n in names}
    ticket_io.save(t, tmp_path / "t.safetensors")
    assert list(ticket_io.load(tmp_path / "t.safetensors").masks) == names
