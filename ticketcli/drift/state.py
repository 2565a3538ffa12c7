"""A drift run's resumable state (`--run-dir`): everything one seed's training needs to continue exactly where it
stopped, as one safetensors file whose tensors are the weights, the optimiser's state, the module buffers, every
random generator's state, the data order and the centering statistics, and whose `__metadata__` holds one JSON
object (the position, the accumulators that are numbers, where measurements.jsonl stood).

The file is never trusted: it is read within a bound that the run's own expected state justifies, its header is
checked by the ticket reader's rules (dtype, shape and byte range of every entry, tiling the body) before a tensor
byte is read, and then every tensor must have exactly the name, dtype and shape the fresh run has. No pickle is
involved anywhere. Anything off is one UsageError line."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save as st_save

from ticketcli.contract.schema import JsonObject
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.files.bounded import read_regular_file
from ticketcli.files.nesting import shallow_json
from ticketcli.ticketfile.safetensors_file import MAX_HEADER_BYTES, read_header

FORMAT = "ticket-drift-state/1"
_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "U8": torch.uint8}
_NAMES = {v: k for k, v in _DTYPES.items()}
_NUMPY: dict[str, np.dtype[Any]] = {
    "F32": np.dtype("<f4"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
}


@dataclass
class Expected:
    """What a state for this run must hold: tensor name -> (dtype, shape), from the fresh run's own objects (a
    tensor the run has not made yet, such as the optimiser's moments before the first step, is `optional`)."""

    tensors: dict[str, tuple[torch.dtype, tuple[int, ...]]] = field(default_factory=dict)
    optional: set[str] = field(default_factory=set)

    def add(self, name: str, t: torch.Tensor | tuple[torch.dtype, tuple[int, ...]], optional: bool = False) -> None:
        self.tensors[name] = (t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else t
        if optional:
            self.optional.add(name)

    def limit(self) -> int:
        """The largest file such a state can be: every tensor's bytes, the header and its JSON metadata."""
        body = sum(
            int(np.prod(s, dtype=np.int64)) * torch.empty((), dtype=d).element_size() for d, s in self.tensors.values()
        )
        return body + 8 + MAX_HEADER_BYTES


def encode(tensors: dict[str, torch.Tensor], meta: JsonObject) -> bytes:
    """The state file's bytes: contiguous CPU copies of the tensors and the JSON metadata."""
    plain = {n: t.detach().to("cpu").contiguous().clone() for n, t in tensors.items()}
    return st_save(plain, metadata={"state": json.dumps({"format": FORMAT, **meta}, sort_keys=True)})


def decode(path: Path, expected: Expected) -> tuple[dict[str, torch.Tensor], JsonObject]:
    """The tensors and metadata of the state file at `path`, each tensor checked against `expected`; one line
    (UsageError) for a file that is not such a state, whatever is wrong with it."""
    data = read_regular_file(path, expected.limit(), "drift state")
    try:
        header, start = read_header(io.BytesIO(data), len(data), path)
    except TicketFileError as e:
        raise UsageError(str(e).replace("for a ticket", "for a drift state"), hint=DELETE) from None
    meta_text = (header.get("__metadata__") or {}).get("state")
    try:
        meta = shallow_json(meta_text) if isinstance(meta_text, str) else None
    except ValueError:  # not JSON, or nested deeper than a state ever is (TooDeep)
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"{path} is not a drift state ({FORMAT})", hint=DELETE)
    names = {n for n in header if n != "__metadata__"}
    missing = sorted(set(expected.tensors) - expected.optional - names)
    extra = sorted(names - set(expected.tensors))
    if missing or extra:
        what = f"lacks {missing[0]!r}" if missing else f"holds {extra[0][:80]!r}, which this run does not have"
        raise UsageError(f"{path} does not belong to this run: it {what}", hint=DELETE)
    tensors = {}
    for name in sorted(names):
        entry = header[name]
        dtype, shape = expected.tensors[name]
        if _DTYPES.get(entry["dtype"]) != dtype or tuple(entry["shape"]) != shape:
            raise UsageError(
                f"{path}: tensor {name!r} is {entry['dtype']} {entry['shape']}, this run's is {_NAMES.get(dtype)} "
                f"{list(shape)}",
                hint=DELETE,
            )
        begin, end = entry["data_offsets"]
        item = _NUMPY[entry["dtype"]]
        raw = np.frombuffer(data, dtype=item, count=(end - begin) // item.itemsize, offset=start + begin)
        tensors[name] = torch.from_numpy(raw.copy()).reshape(shape)
    return tensors, meta


DELETE = "the run dir's state is damaged or foreign: delete state.safetensors to start the run over"


def check(ok: bool, path: Path, what: str) -> None:
    """One line for a metadata value of the wrong kind (a hand-edited or crafted state)."""
    if not ok:
        raise UsageError(f"{path}: {what}", hint=DELETE)


def whole(value: Any, lo: int = 0, hi: int | None = None) -> bool:
    """A JSON integer (not a bool) in [lo, hi]."""
    return type(value) is int and value >= lo and (hi is None or value <= hi)


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimiser's per-parameter state as flat named tensors (opt.<index>.<key>)."""
    out = {}
    for index, state in opt.state_dict()["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                out[f"opt.{index}.{key}"] = value
    return out


def expect_optimizer(expected: Expected, opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """The optimiser's state as torch makes it after a step (Adam: step, exp_avg, exp_avg_sq; SGD with momentum:
    momentum_buffer), optional: a state saved before the first step has none."""
    for i, p in enumerate(params):
        if isinstance(opt, torch.optim.Adam):
            expected.add(f"opt.{i}.step", (torch.float32, ()), optional=True)
            expected.add(f"opt.{i}.exp_avg", p, optional=True)
            expected.add(f"opt.{i}.exp_avg_sq", p, optional=True)
        elif opt.defaults.get("momentum"):
            expected.add(f"opt.{i}.momentum_buffer", p, optional=True)


def load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Put the saved per-parameter state back (the hyperparameters are the run's own, from its settings)."""
    state: dict[int, dict[str, Any]] = {}
    for name, t in tensors.items():
        if name.startswith("opt."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = t
    if isinstance(opt, torch.optim.Adam):
        partial = [i for i, s in state.items() if len(s) != 3]
        check(not partial, path, f"the optimiser state of parameter {partial[:1]} is incomplete")
    current = opt.state_dict()
    opt.load_state_dict({"state": state, "param_groups": current["param_groups"]})
