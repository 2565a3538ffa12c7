"""The Python API keeps docs/api.md's promise for bad input: every public function raises tc.UsageError or
tc.TicketFileError with one line (the CLI's message), never UnpicklingError, SafetensorError, TypeError or
AttributeError, never hangs on a FIFO, and reads files within a bound."""

from __future__ import annotations

import os
import pickle
import signal
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

import ticketcli as tc

PEAK = 64 << 20  # Python-level allocations of one refused call


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("api")
    os.mkfifo(d / "fifo.safetensors")
    os.mkfifo(d / "fifo.pt")
    with open(d / "evil.pt", "wb") as f:
        pickle.dump(Evil(), f)
    (d / "junk.safetensors").write_bytes(b"\x00" * 100)
    (d / "bom.safetensors").write_bytes(b"\x10\0\0\0\0\0\0\0\xef\xbb\xbf{}            ")
    with open(d / "sparse.pt", "wb") as f:
        f.truncate(4 << 30)
    torch.save({"a": torch.zeros(1)}, d / "other.pt")
    t = tc.extract("mlp:64-16-10", "digits", method="random", sparsity=0.5, progress=False, n_extract=50, n_val=20)
    t.save(d / "t.safetensors")
    return d


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))


def same_names() -> nn.Module:
    """A module with the parameter names and shapes of the ticket's mlp:64-16-10, and random weights of its own."""
    m = nn.Module()
    m.layers = nn.ModuleList([nn.Linear(64, 16, bias=False), nn.Linear(16, 10, bias=False)])
    return m


CASES: dict[str, Callable[[Path], object]] = {
    "load: a FIFO": lambda d: tc.load(d / "fifo.safetensors"),
    "load: an int": lambda d: tc.load(123),  # type: ignore[arg-type]
    "load: a NUL in the path": lambda d: tc.load("a\0b"),
    "load: a name too long": lambda d: tc.load("x" * 5000),
    "load: a directory": lambda d: tc.load(d),
    "load: a byte-order mark": lambda d: tc.load(d / "bom.safetensors"),
    "load_pruned: a FIFO (safetensors)": lambda d: tc.load_pruned(mlp(), d / "fifo.safetensors"),
    "load_pruned: a FIFO (torch)": lambda d: tc.load_pruned(mlp(), d / "fifo.pt"),
    "load_pruned: a pickle that runs code": lambda d: tc.load_pruned(mlp(), d / "evil.pt"),
    "load_pruned: not safetensors": lambda d: tc.load_pruned(mlp(), d / "junk.safetensors"),
    "load_pruned: a sparse 4 GiB file": lambda d: tc.load_pruned(mlp(), d / "sparse.pt"),
    "load_pruned: another state dict": lambda d: tc.load_pruned(mlp(), d / "other.pt"),
    "load_pruned: missing": lambda d: tc.load_pruned(mlp(), d / "nope.pt"),
    "load_pruned: a string value": lambda d: tc.load_pruned(mlp(), {"0.weight": "x"}),  # type: ignore[dict-item]
    "load_pruned: an int key": lambda d: tc.load_pruned(mlp(), {1: torch.zeros(1)}),  # type: ignore[dict-item]
    "load_pruned: an int": lambda d: tc.load_pruned(mlp(), 5),  # type: ignore[arg-type]
    "load_pruned: not a module": lambda d: tc.load_pruned("m", {}),  # type: ignore[arg-type]
    "apply_masks: a string mask": lambda d: tc.apply_masks(mlp(), {"0.weight": "x"}),  # type: ignore[dict-item]
    "apply_masks: an int key": lambda d: tc.apply_masks(mlp(), {0: torch.ones(16, 64, dtype=torch.bool)}),  # type: ignore[dict-item]
    "apply_masks: a list": lambda d: tc.apply_masks(mlp(), [1, 2]),  # type: ignore[arg-type]
    "apply_masks: not a module": lambda d: tc.apply_masks("m", {}),  # type: ignore[arg-type]
    "apply_masks: a mask of 0.5": lambda d: tc.apply_masks(
        nn.Linear(2, 2), {"weight": torch.full((2, 2), 0.5), "bias": torch.ones(2)}
    ),
    "apply_masks: a wrong shape": lambda d: tc.apply_masks(
        nn.Linear(2, 2), {"weight": torch.ones(3, 2), "bias": torch.ones(2)}
    ),
    "remove_masks: not a module": lambda d: tc.remove_masks("m"),  # type: ignore[arg-type]
    "Ticket.save: an int": lambda d: tc.load(d / "t.safetensors").save(5),  # type: ignore[arg-type]
    "Ticket.save: a NUL": lambda d: tc.load(d / "t.safetensors").save("a\0b"),
    "Ticket.save: a FIFO": lambda d: tc.load(d / "t.safetensors").save(d / "fifo.safetensors", overwrite=True),
    "Ticket.save: over a file": lambda d: tc.load(d / "t.safetensors").save(d / "t.safetensors"),
    "Ticket.save: a .pt name": lambda d: tc.load(d / "t.safetensors").save(d / "t.pt"),
    "Ticket.build: a module that is a string": lambda d: tc.load(d / "t.safetensors").build(module="x"),  # type: ignore[arg-type]
    "Ticket.evaluate: data of an int": lambda d: tc.load(d / "t.safetensors").evaluate(data=5),  # type: ignore[arg-type]
    "Ticket.evaluate: weights of an int": lambda d: tc.load(d / "t.safetensors").evaluate(weights=5),  # type: ignore[arg-type]
    "apply_masks: a ticket's masks on other weights": lambda d: tc.apply_masks(
        same_names(), tc.load(d / "t.safetensors").masks
    ),
    "Ticket.apply: a module that is a string": lambda d: tc.load(d / "t.safetensors").apply("x"),  # type: ignore[arg-type]
    "Ticket.apply: another architecture": lambda d: tc.load(d / "t.safetensors").apply(mlp()),
    "Ticket.splits: data of an int": lambda d: tc.load(d / "t.safetensors").splits(data=5),  # type: ignore[arg-type]
    "Ticket.splits: another dataset's name": lambda d: tc.load(d / "t.safetensors").splits(data="mnist"),
    "compare: a junk file": lambda d: tc.compare(d / "t.safetensors", d / "junk.safetensors"),
    "compare: a FIFO": lambda d: tc.compare(d / "fifo.safetensors", d / "t.safetensors"),
    "compare: a NUL in the path": lambda d: tc.compare("a\0b", d / "t.safetensors"),
    "compare: a ticket of an int": lambda d: tc.compare(d / "t.safetensors", 5),  # type: ignore[arg-type]
    "compare: a pickle": lambda d: tc.compare(d / "evil.pt", d / "t.safetensors"),
    "extract: a model of an int": lambda d: tc.extract(5, progress=False),  # type: ignore[arg-type]
    "extract: a config FIFO": lambda d: tc.extract("mlp:64-16-10", config=d / "fifo.pt", progress=False),
    "extract: a config of an int": lambda d: tc.extract("mlp:64-16-10", config=5, progress=False),  # type: ignore[arg-type]
    "extract: a sparsity string": lambda d: tc.extract("mlp:64-16-10", sparsity="x", progress=False),  # type: ignore[arg-type]
    "extract: an unknown option": lambda d: tc.extract("mlp:64-16-10", foo=1, progress=False),
    "extract: data of an int": lambda d: tc.extract("mlp:64-16-10", 5, progress=False),  # type: ignore[arg-type]
    "extract: out over a file": lambda d: tc.extract("mlp:64-16-10", out=d / "t.safetensors", progress=False),
    "extract: out a FIFO": lambda d: tc.extract("mlp:64-16-10", out=d / "fifo.safetensors", overwrite=True),
    "extract: out of an int": lambda d: tc.extract("mlp:64-16-10", out=5, progress=False),  # type: ignore[arg-type]
    "inspect: a FIFO": lambda d: tc.inspect(d / "fifo.safetensors"),
    "inspect: a junk file": lambda d: tc.inspect(d / "junk.safetensors"),
    "inspect: an int": lambda d: tc.inspect(5),  # type: ignore[arg-type]
    "inspect: a pickle": lambda d: tc.inspect(d / "evil.pt"),
    "Ticket.export: over a file": lambda d: tc.load(d / "t.safetensors").export("masked", d / "t.safetensors"),
    "Ticket.export: a FIFO": lambda d: tc.load(d / "t.safetensors").export("prune", d / "fifo.pt", overwrite=True),
    "Ticket.export: an unknown format": lambda d: tc.load(d / "t.safetensors").export("zip", d / "x.zip"),
    "Ticket.export: a path of an int": lambda d: tc.load(d / "t.safetensors").export("masked", 5),  # type: ignore[arg-type]
    "load_sparse: a FIFO": lambda d: tc.load_sparse(d / "fifo.safetensors"),
    "load_sparse: a junk file": lambda d: tc.load_sparse(d / "junk.safetensors"),
    "load_sparse: a pickle": lambda d: tc.load_sparse(d / "evil.pt"),
    "load_sparse: an int": lambda d: tc.load_sparse(5),  # type: ignore[arg-type]
    "load_sparse: a NUL in the path": lambda d: tc.load_sparse("a\0b"),
    "load_sparse: an unknown layout": lambda d: tc.load_sparse(d / "t.safetensors", layout="zip"),
    "load_sparse: a layout of an int": lambda d: tc.load_sparse(d / "t.safetensors", layout=4),  # type: ignore[arg-type]
    "load_sparse: bsr of an unstructured ticket": lambda d: tc.load_sparse(d / "t.safetensors", layout="bsr"),
    "load_sparse: 2:4 of an unstructured ticket": lambda d: tc.load_sparse(d / "t.safetensors", layout="2:4"),
    "sparse_module: not a module": lambda d: tc.sparse_module(object(), {}),  # type: ignore[arg-type]
    "sparse_module: a mask of no parameter": lambda d: tc.sparse_module(
        torch.nn.Linear(2, 2), {"nope": torch.ones(2, 2, dtype=torch.bool)}
    ),
    "sparse_module: a mask of another shape": lambda d: tc.sparse_module(
        torch.nn.Linear(2, 2), {"weight": torch.ones(3, 2, dtype=torch.bool)}
    ),
    "train_weak: a junk ticket": lambda d: tc.train_weak(d / "junk.safetensors", progress=False),
    "train_weak: a FIFO": lambda d: tc.train_weak(d / "fifo.safetensors", progress=False),
    "train_weak: a ticket of an int": lambda d: tc.train_weak(5),  # type: ignore[arg-type]
    "train_weak: a plot over the ticket": lambda d: tc.train_weak(d / "t.safetensors", plot=d / "t.safetensors"),
    "train_weak: weights of a .pt": lambda d: tc.train_weak(d / "t.safetensors", out=d / "w.pt", progress=False),
    "sweep_k: seeds of words": lambda d: tc.sweep_k(seeds="a,b", progress=False),
    "sweep_k: data of tensors": lambda d: tc.sweep_k("mlp:8-4", (torch.zeros(4, 8), torch.zeros(4)), progress=False),  # type: ignore[arg-type]
    "sweep_k: a config FIFO": lambda d: tc.sweep_k(config=d / "fifo.pt", progress=False),
    "sweep_k: a model of an int": lambda d: tc.sweep_k(5, progress=False),  # type: ignore[arg-type]
    "drift: a ticket FIFO": lambda d: tc.drift(ticket=d / "fifo.safetensors", progress=False),
    "drift: a junk ticket": lambda d: tc.drift(ticket=d / "junk.safetensors", progress=False),
    "drift: a model of an int": lambda d: tc.drift(5, progress=False),  # type: ignore[arg-type]
    "drift: a plot over the ticket": lambda d: tc.drift(plot=d / "t.safetensors", progress=False),
    "drift: steps of a string": lambda d: tc.drift(steps="x", progress=False),
    "schema_of: an unknown command": lambda d: tc.schema_of("nope"),
    "schema_of: an int": lambda d: tc.schema_of(5),  # type: ignore[arg-type]
}


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a FIFO opened for reading waits for a writer forever)."""

    def expired(signum, frame):
        raise AssertionError(f"still running after {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_a_usage_or_ticket_file_error_of_one_line(case, files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where Evil would leave its marker
    before = {p.name: p.stat().st_mtime_ns for p in files.iterdir() if p.is_file()}
    tracemalloc.start()
    try:
        with within(60), pytest.raises((tc.UsageError, tc.TicketFileError)) as caught:
            CASES[case](files)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert message and "\n" not in message and "weights_only=False" not in message, message
    assert not (tmp_path / "pwned").exists()
    assert peak < PEAK, peak
    assert {p.name: p.stat().st_mtime_ns for p in files.iterdir() if p.is_file()} == before  # nothing clobbered


def test_every_public_function_has_a_hostile_case():
    """A public function added to the API gets a case here (classes and exceptions aside)."""
    functions = {n for n in tc.__all__ if n[0].islower() and not n.startswith("list_") and n != "extract_options"}
    covered = {c.split(":")[0] for c in CASES}
    assert functions <= covered | {"Ticket"}, functions - covered
    assert {"Ticket.save", "Ticket.build", "Ticket.evaluate"} <= covered
