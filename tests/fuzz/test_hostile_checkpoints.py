"""Hostile checkpoint files are one line and exit 2, never a traceback, and never run code: --weights with NaN or
Inf is refused for every registered method (naming the parameter) and by every command that reads --weights,
before any work; a pickle that names globals is refused without advising to disable the safety (no marker file
appears); torn and foreign files are refused; `extract --resume` from a damaged, foreign or mismatched OUT.ckpt
(truncated, random bytes, another structure, another run's options, a state that does not fit) is refused too,
and the checkpoint is left as it was."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import torch
from hostile import assert_clean, cli, snapshot
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.files.checkpoint import Checkpointer, read_torch_file
from ticketcli.methods import METHODS
from ticketcli.models.build import build_model
from ticketcli.models.registry import parse_model
from ticketcli.settings.readers import method_reads
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import CheckpointRecord

MODEL = "mlp:64-13-10"
BASE = ["--dataset", "digits", "--model", MODEL, "--n-extract", "100", "--n-val", "50", "--device", "cpu", "--quiet"]
RESUMABLE = [*BASE, "--method", "edge-popup", "--epochs", "2", "--batch-size", "50"]


def weights_of(model: str = MODEL, **poison: float) -> dict[str, torch.Tensor]:
    """A state dict that fits `model`, with one entry of each named parameter set to the given value."""
    module = build_model(parse_model(model))
    gen = torch.Generator().manual_seed(0)
    state = {n: torch.randn(p.shape, generator=gen) * 0.1 for n, p in module.named_parameters()}
    for name, value in poison.items():
        state[name.replace("__", ".")][0, 1] = value
    return state


def save(obj, path: Path) -> Path:
    torch.save(obj, path)
    return path


class Marker:
    """Unpickling this would create `path`: proof that code from the file ran."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


# ---- --weights with NaN or Inf: every method, every reader ----------------------------------------------------

NON_FINITE = [(m, v) for m in METHODS.names() for v in (math.nan, math.inf)] + [
    ("augmented", -math.inf),
    ("random", -math.inf),
]


@pytest.mark.parametrize("method, value", NON_FINITE, ids=[f"{m}-{v}" for m, v in NON_FINITE])
def test_non_finite_weights_are_refused_for_every_method(method, value, tmp_path):
    w = save(weights_of(layers__1__weight=value), tmp_path / "w.pt")
    out = tmp_path / "t.safetensors"
    epochs = ["--epochs", "1"] if method_reads(method, "epochs") else []  # the others refuse --epochs
    run = cli("extract", *BASE, "--method", method, *epochs, "--weights", str(w), "--out", str(out))
    assert_clean(run, 2, contains="layers.1.weight has 1 non-finite value", folder=tmp_path)
    assert not out.exists() and "--lr" not in run.stderr


@pytest.fixture(scope="module")
def ticket_from_weights(tmp_path_factory) -> tuple[Path, Path]:
    """A ticket extracted from a checkpoint file, and a NaN copy of that checkpoint whose sha256 the ticket
    records (as an older ticketcli, which accepted NaN weights for some methods, would have written it)."""
    folder = tmp_path_factory.mktemp("from-weights")
    good = save(weights_of(), folder / "w.pt")
    path = folder / "t.safetensors"
    r = CliRunner().invoke(app, ["extract", *BASE, "--method", "random", "--weights", str(good), "--out", str(path)])
    assert r.exit_code == 0, r.stderr
    bad = save(weights_of(layers__0__weight=math.nan), folder / "nan.pt")
    tk = ticket_io.load(path)
    tk.checkpoint = CheckpointRecord.of({"path": "nan.pt", "sha256": hashlib.sha256(bad.read_bytes()).hexdigest()})
    ticket_io.save(tk, path, overwrite=True)
    return path, bad


@pytest.mark.parametrize("command", ["evaluate", "export", "train-weak", "drift"])
def test_non_finite_weights_are_refused_by_every_reader(command, ticket_from_weights, tmp_path):
    path, bad = ticket_from_weights
    args = {
        "evaluate": ["evaluate", str(path), "--device", "cpu"],
        "export": ["export", str(path), "--format", "masked", "--out", str(tmp_path / "x.safetensors")],
        "train-weak": ["train-weak", str(path), "--epochs", "1", "--device", "cpu", "--quiet"],
        "drift": ["drift", "--ticket", str(path), "--steps", "2", "--quiet"],
    }[command]
    assert_clean(
        cli(*args, "--weights", str(bad)), 2, contains="layers.0.weight has 1 non-finite value", folder=tmp_path
    )
    assert not (tmp_path / "x.safetensors").exists()


# ---- --weights files that are not state dicts of tensors -------------------------------------------------------


def hostile_weights(kind: str, folder: Path) -> Path:
    marker = folder / "MARKER"
    good = weights_of()
    path = folder / ("w.safetensors" if kind == "corrupt-safetensors" else "w.pt")
    if kind == "object-global":
        return save({**good, "extra": Marker(marker)}, path)  # torch.save: a zip whose pickle names os.mkdir
    if kind in ("reduce-protocol-2", "reduce-protocol-4"):
        path.write_bytes(pickle.dumps(Marker(marker), protocol=int(kind[-1])))
    elif kind == "plain-pickle":
        path.write_bytes(pickle.dumps({n: t.tolist() for n, t in good.items()}, protocol=4))
    elif kind == "random-bytes":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(save(good, folder / "full.pt").read_bytes()[:300])
    elif kind == "lists-not-tensors":
        save({n: t.tolist() for n, t in good.items()}, path)
    elif kind == "bare-tensor":
        save(good["layers.0.weight"], path)
    elif kind == "corrupt-safetensors":
        path.write_bytes(b'\x10\x00\x00\x00\x00\x00\x00\x00{"a": [1, 2, 3]}')
    elif kind in LENGTH_FIELDS:
        path.write_bytes(LENGTH_FIELDS[kind][0])
    elif kind == "compressed-zip":
        path.write_bytes(inflating(torch_bytes(good)))
    elif kind == "zip-entry-declares-more":
        path.write_bytes(overdeclared(torch_bytes(good)))
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    return path


# A pickle stream's length fields, far beyond the few bytes that follow: torch's legacy reader asks the file for
# read(n), which allocates n up front on a real file. Nothing may allocate beyond what the file's size justifies.
LENGTH_FIELDS = {  # name -> (the file, a fragment of the one line for a weights file, for a checkpoint)
    "string-declares-4gib": (b"X\xff\xff\xff\xff" + b"\0" * 64, "cannot read weights from", "cannot read checkpoint"),
    "frame-declares-1tib": (
        b"\x80\x04\x95" + (1 << 40).to_bytes(8, "little") + b"\0" * 64,  # FRAME
        "safe loader cannot read",
        "safe loader cannot read",
    ),
    "proto-then-string": (
        b"\x80\x02X\xfe\xff\xff\x7f" + b"\0" * 64,
        "cannot read weights from",
        "cannot read checkpoint",
    ),
}


def inflating(stored: bytes, extra: int = 96 << 20) -> bytes:
    """torch.save's zip with data.pkl deflated and `extra` zero bytes after its STOP: a zip bomb that loads."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(stored)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if not info.filename.endswith("data.pkl"):
                dst.writestr(info, data)
                continue
            deflated = zipfile.ZipInfo(info.filename)
            deflated.compress_type = zipfile.ZIP_DEFLATED
            with dst.open(deflated, "w", force_zip64=True) as f:
                f.write(data)
                for _ in range(extra >> 20):
                    f.write(bytes(1 << 20))
    return out.getvalue()


def overdeclared(stored: bytes) -> bytes:
    """torch.save's zip whose central directory says data.pkl holds 2 GiB (its uncompressed-size field)."""
    raw = bytearray(stored)
    at = raw.index(b"PK\x01\x02")  # the first central directory entry: data.pkl, as torch writes it first
    assert raw[at + 46 :].startswith(b"archive/data.pkl") or b"data.pkl" in raw[at + 46 : at + 46 + 64]
    raw[at + 24 : at + 28] = (0x7FFFFFFF).to_bytes(4, "little")
    return bytes(raw)


WEIGHTS_CASES = {
    "object-global": "needs arbitrary code to load (it names posix.mkdir)",
    "reduce-protocol-2": "needs arbitrary code to load (it names posix.mkdir)",
    "reduce-protocol-4": "is a pickle that torch's safe loader cannot read",
    "plain-pickle": "is a pickle that torch's safe loader cannot read",
    "random-bytes": "cannot read weights from",
    "empty": "cannot read weights from",
    "truncated": "cannot read weights from",
    "lists-not-tensors": "is not a state dict of tensors",
    "bare-tensor": "is not a state dict of tensors",
    "corrupt-safetensors": "cannot read weights from",
    "fifo": "is not a regular file",
    "directory": "is not a regular file",
    **{k: v[1] for k, v in LENGTH_FIELDS.items()},
    "compressed-zip": "is compressed",
    "zip-entry-declares-more": "declares 2147483647 bytes",
}


@pytest.mark.parametrize("kind", list(WEIGHTS_CASES))
def test_weights_that_are_not_tensors_are_refused_without_running_code(kind, tmp_path):
    w = hostile_weights(kind, tmp_path)
    run = cli("extract", *BASE, "--method", "random", "--weights", str(w), "--out", str(tmp_path / "t.safetensors"))
    assert_clean(run, 2, contains=WEIGHTS_CASES[kind], markers=(tmp_path / "MARKER",), folder=tmp_path)
    assert "weights_only" not in run.stderr and "Weights only" not in run.stderr  # torch's advice is not passed on


# ---- extract --resume from a damaged, foreign or mismatched OUT.ckpt -------------------------------------------


@pytest.fixture(scope="module")
def real_checkpoint(tmp_path_factory) -> bytes:
    """The bytes of a genuine OUT.ckpt after epoch 2 of the RESUMABLE run (kept: its removal is skipped)."""
    out = tmp_path_factory.mktemp("ckpt") / "t.safetensors"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Checkpointer, "remove", lambda self: None)
        r = CliRunner().invoke(app, ["extract", *RESUMABLE, "--checkpoint-every", "1", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    return out.with_name(out.name + ".ckpt").read_bytes()


def edited(raw: bytes, edit) -> bytes:
    """The checkpoint with `edit(saved)` applied to its loaded contents (identity kept: the run still matches)."""
    saved = torch.load(io.BytesIO(raw), weights_only=True)
    edit(saved)
    buf = io.BytesIO()
    torch.save(saved, buf)
    return buf.getvalue()


def torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _scores_reshaped(s):
    parts = s["state"]["trainer"]["scores"]["layers.0.weight"]
    parts[0] = parts[0][:, :1].clone()  # (13, 1): copy_ would broadcast it silently


RESUME_CASES = {  # name -> (the OUT.ckpt's bytes from the genuine ones, a fragment of the one line)
    "truncated": (lambda raw: raw[: len(raw) // 2], "cannot read checkpoint"),
    "random-bytes": (lambda raw: os.urandom(len(raw)), "cannot read checkpoint"),
    "empty": (lambda raw: b"", "cannot read checkpoint"),
    **{k: (lambda raw, v=v: v[0], v[2]) for k, v in LENGTH_FIELDS.items()},
    "compressed-zip": (inflating, "is compressed"),
    "zip-entry-declares-more": (overdeclared, "declares 2147483647 bytes"),
    "state-dict-of-tensors": (lambda raw: torch_bytes({"layers.0.weight": torch.zeros(3)}), "not a ticket checkpoint"),
    "a-list": (lambda raw: torch_bytes([1, 2, 3]), "not a ticket checkpoint"),
    "identity-not-json": (lambda raw: edited(raw, lambda s: s.update(identity="{oops")), "not a ticket checkpoint"),
    "identity-a-list": (lambda raw: edited(raw, lambda s: s.update(identity="[1, 2]")), "not a ticket checkpoint"),
    "pickle-with-globals": (
        lambda raw: torch_bytes({"format": "ticket-checkpoint/1", "x": Marker(Path("MARKER"))}),
        "needs arbitrary code to load",
    ),
    "no-trainer": (lambda raw: edited(raw, lambda s: s["state"].pop("trainer")), "does not hold a state"),
    "scores-of-another-shape": (lambda raw: edited(raw, _scores_reshaped), "does not hold a state"),
    "epoch-not-a-number": (lambda raw: edited(raw, lambda s: s["state"].update(epoch="x")), "does not hold a state"),
    "generator-state-garbage": (
        lambda raw: edited(raw, lambda s: s["state"].update(generator=torch.zeros(3))),
        "does not hold a state",
    ),
}


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_from_a_damaged_checkpoint_is_one_line(case, real_checkpoint, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the pickle's marker is a relative path
    out = tmp_path / "t.safetensors"
    ckpt = out.with_name(out.name + ".ckpt")
    make, fragment = RESUME_CASES[case]
    ckpt.write_bytes(make(real_checkpoint))
    before = snapshot(out, ckpt)
    run = cli("extract", *RESUMABLE, "--resume", "--out", str(out))
    assert_clean(run, 2, contains=fragment, unchanged=before, markers=(tmp_path / "MARKER",), folder=tmp_path)
    assert "weights_only" not in run.stderr


def test_resume_with_other_options_names_what_changed(real_checkpoint, tmp_path):
    out = tmp_path / "t.safetensors"
    ckpt = out.with_name(out.name + ".ckpt")
    ckpt.write_bytes(real_checkpoint)
    before = snapshot(out, ckpt)
    run = cli("extract", *RESUMABLE, "--lr", "0.02", "--resume", "--out", str(out))
    assert_clean(
        run, 2, contains="belongs to a different run (method.lr: 0.01 -> 0.02)", unchanged=before, folder=tmp_path
    )


def test_the_genuine_checkpoint_resumes(real_checkpoint, tmp_path):
    """The base of every case above is valid: resuming from it writes the ticket (so each refusal is the edit's)."""
    out = tmp_path / "t.safetensors"
    out.with_name(out.name + ".ckpt").write_bytes(real_checkpoint)
    r = CliRunner().invoke(app, ["extract", *RESUMABLE, "--resume", "--json", "--out", str(out)])
    assert r.exit_code == 0 and out.is_file(), r.stderr
    assert json.loads(r.stdout)["ticket"] == str(out)


@pytest.mark.parametrize("opcode", range(256))
def test_no_first_byte_makes_the_torch_reader_allocate_beyond_the_file(opcode, tmp_path):
    """Every opcode a stream can start with, followed by all-ones length fields: whatever the reader makes of it,
    it refuses in one UsageError and allocates no more than a few times the file (random bytes found 'X' once)."""
    path = tmp_path / "w.pt"
    path.write_bytes(bytes([opcode]) + b"\xff" * 16 + bytes(range(256)))
    tracemalloc.start()
    try:
        with pytest.raises(UsageError):
            read_torch_file(path, "weights from")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak
