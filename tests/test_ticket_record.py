"""The ticket's typed records: a ticket written the old way (each field json.dumps of a plain dict, as the writer did
before the records existed) reads to the expected typed values, saving what was loaded gives back the same bytes,
and no field of Ticket is an untyped JSON object again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save as np_save

from ticketcli.runs.compare import compare_tickets
from ticketcli.runs.header import TicketHeader
from ticketcli.specs.run import InitSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import CheckpointRecord, MethodRecord, ModelRecord, Stored

SHA = "ab" * 32
SHAPES = {"layers.0.weight": [3, 5], "layers.1.weight": [2, 3]}
# An older writer's fields, in its key order, with what the reader must keep as it is: an int k, a key no reader
# knows, a hyper-parameter of one method only, a split that records no loss.
OLD = {
    "model": {"spec": "mlp:5-3-2", "arch": "mlp", "widths": [5, 3, 2], "bias": False},
    "init": {"scheme": "scaled-kaiming-uniform", "k": 1, "gain": "relu", "seed": 7},
    "shapes": SHAPES,
    "weights_sha256": SHA,
    "method": {"name": "edge-popup", "sparsity": 0.5, "epochs": 3, "lr": 0.01, "future_knob": [1, 2]},
    "data": {"dataset": "digits", "n_extract": 10, "n_val": 5, "n_test": 4, "split_seed": 7},
    "sparsity": {
        "requested": 0.5,
        "achieved": 0.5,
        "kept": 10,
        "total": 21,
        "per_layer": {"layers.0.weight": {"kept": 7, "total": 15, "achieved": 0.5333, "aux_share": 0.25}},
    },
    "metrics": {"test": {"accuracy": 0.75, "correct": 3, "n": 4}, "device": "cpu", "wall_time_s": 1.5},
    "created_by": {"ticketcli": "0.0.9", "torch": "2.0.0"},
}


def old_ticket(path: Path, *, digest: bool = True, checkpoint: dict | None = None) -> Path:
    """A ticket file made without ticketcli's writer: packed masks, and each metadata field json.dumps of a dict."""
    rng = np.random.default_rng(0)
    packed = {f"mask/{n}": np.packbits(rng.random(int(np.prod(s))) < 0.5) for n, s in SHAPES.items()}
    meta = {"format": "ticket", "format_version": "1"}
    meta |= {k: v if isinstance(v, str) else json.dumps(v) for k, v in OLD.items()}
    if checkpoint is not None:
        meta["checkpoint"] = json.dumps(checkpoint)
    if digest:  # masks_sha256: sha256 over each key, a NUL and its bytes, in sorted key order
        h = hashlib.sha256()
        for key in sorted(packed):
            h.update(key.encode() + b"\0" + packed[key].tobytes())
        meta["masks_sha256"] = h.hexdigest()
    path.write_bytes(np_save(packed, metadata=meta))
    return path


def test_an_old_ticket_reads_to_typed_records(tmp_path):
    tk = ticket_io.load(old_ticket(tmp_path / "old.safetensors"))
    assert (tk.model.spec, tk.model.arch, tk.model.parameters, tk.model.batchnorm) == ("mlp:5-3-2", "mlp", None, None)
    assert (tk.init.scheme, tk.init.k, tk.init.seed) == ("scaled-kaiming-uniform", 1, 7)
    assert tk.init.spec() == InitSpec(scheme="scaled-kaiming-uniform", k=1.0, seed=7)
    assert (tk.method.name, tk.method.sparsity, tk.method.option("epochs")) == ("edge-popup", 0.5, 3)
    assert tk.method.option("future_knob") == [1, 2] and tk.method.option("grasp_direction") is None
    assert tk.data.split() == {"dataset": "digits", "n_extract": 10, "n_val": 5, "split_seed": 7}
    assert (tk.sparsity.requested, tk.sparsity.kept, tk.sparsity.total) == (0.5, 10, 21)
    assert tk.sparsity.layer("layers.0.weight").aux_share == 0.25 and tk.sparsity.layer("layers.1.weight").kept is None
    assert tk.metrics.test is not None and (tk.metrics.test.accuracy, tk.metrics.test.loss) == (0.75, None)
    assert tk.metrics.val is None and tk.metrics.accuracy("val") is None and tk.metrics.device == "cpu"
    assert (tk.created_by.ticketcli, tk.created_by.torch) == ("0.0.9", "2.0.0") and tk.checkpoint is None
    for key in ("model", "init", "method", "data", "sparsity", "metrics", "created_by"):
        assert getattr(tk, key).to_json() == OLD[key], key  # every key kept, unknown ones included


def parts(raw: bytes) -> tuple[dict, dict, bytes]:
    """A safetensors file's metadata (each value's exact text), tensor entries and tensor bytes. Whole files are not
    compared: safetensors writes its metadata map in no fixed order, so two saves by one writer already differ."""
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    return header.pop("__metadata__"), header, raw[8 + n :]


@pytest.mark.parametrize("checkpoint", [None, {"path": "w.pt", "sha256": "c" * 64}])
def test_saving_a_loaded_ticket_gives_back_its_bytes(tmp_path, checkpoint):
    old = old_ticket(tmp_path / "old.safetensors", checkpoint=checkpoint)
    tk = ticket_io.load(old)
    ticket_io.save(tk, tmp_path / "again.safetensors")
    assert parts((tmp_path / "again.safetensors").read_bytes()) == parts(old.read_bytes())
    if checkpoint is not None:
        assert isinstance(tk.checkpoint, CheckpointRecord) and tk.checkpoint.path == "w.pt"


def test_a_ticket_without_a_mask_digest_reads_and_gains_one_when_saved(tmp_path):
    old = old_ticket(tmp_path / "old.safetensors", digest=False)
    tk = ticket_io.load(old)
    assert tk.masks_sha256 is None and tk.integrity == "not recorded"
    ticket_io.save(tk, tmp_path / "again.safetensors")
    again = ticket_io.load(tmp_path / "again.safetensors")
    assert again.integrity == "ok" and again.method == tk.method and again.metrics == tk.metrics


def test_a_record_keeps_the_json_it_was_made_from_and_is_not_changed_through_it():
    obj = {"spec": "mlp:5-3-2", "parameters": {"w": [3, 5]}, "odd": {"x": 1}}
    record = ModelRecord.of(obj)
    assert record.parameters == {"w": (3, 5)} and record.dumps() == json.dumps(obj)
    record.to_json()["odd"]["x"] = 2  # a copy
    assert record.to_json() == obj and MethodRecord.of({"name": 5}).name == ""  # a wrong type reads as nothing


def _untyped(hint: object) -> bool:
    """Whether a type hint is (or holds) an open JSON object: dict/Mapping with Any values, or Any itself."""
    if hint is typing.Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (dict, Mapping) and typing.get_args(hint)[1:] == (typing.Any,):
        return True
    return any(_untyped(a) for a in typing.get_args(hint))


def test_no_field_of_ticket_is_an_untyped_json_object():
    import torch  # the masks' annotation names it

    hints = typing.get_type_hints(ticket_io.Ticket, {**vars(ticket_io), "torch": torch})
    untyped = [f.name for f in dataclasses.fields(ticket_io.Ticket) if _untyped(hints[f.name])]
    assert untyped == []
    assert _untyped(dict[str, typing.Any]) and _untyped(dict[str, typing.Any] | None)  # the check itself can fail
    records = [f.name for f in dataclasses.fields(ticket_io.Ticket) if isinstance(hints[f.name], type)]
    assert {n for n in records if issubclass(hints[n], Stored)} == {
        "model",
        "init",
        "method",
        "data",
        "sparsity",
        "metrics",
        "created_by",
    }


def test_compare_writes_the_header_derived_from_the_ticket(tmp_path):
    a = old_ticket(tmp_path / "a.safetensors")
    b = old_ticket(tmp_path / "b.safetensors")
    doc = compare_tickets([a, b]).to_document()["tickets"][0]
    header = TicketHeader.of(a, ticket_io.load(a)).to_dict()
    assert {k: doc[k] for k in header} == header
    assert header == {"ticket": str(a), "method": OLD["method"], "model": "mlp:5-3-2", "seed": 7}
