"""sweep-k's records in --out-dir: one ticket and one JSON record per finished run, written ticket first, and read
back (like a ticket: bounded, strict, every field checked) when a sweep resumes. A record file holds `schema`
(contract.SWEEP_RUN_RECORD), `spec` (what decides the run's result) and `record`, in the shape of the sweep-k
document's records; records written before they had a `schema` (a flat record, the method by its name) are still
read. Either is read back as the one record type, result.SweepRecord."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from ticketcli.contract.schema import SWEEP_RUN_RECORD, JsonObject
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.files.atomic import write_owned
from ticketcli.methods.registry import method_document
from ticketcli.models.build import planned_shapes
from ticketcli.runs import build as runs_build
from ticketcli.seeding import file_sha256
from ticketcli.specs.run import RunSpec
from ticketcli.sweep.outputs import Note, folder_lock, read_json
from ticketcli.sweep.plan import SweepTask
from ticketcli.sweep.result import SweepRecord, flat_record
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.safetensors_file import MAX_HEADER_BYTES

# Record fields that legitimately differ between two runs of the same task; everything else must be identical.
VOLATILE = ("wall_time_s", "ticket", "ticket_sha256")


RECORD_LIMIT = 1 << 20  # a record is a few hundred bytes
RECORD_DEPTH = 6  # {"spec": {"model": {...: [...]}}} nests 4 deep
HEX64 = frozenset("0123456789abcdef")
# every field of a record, with its type; fields that name the task must also equal the task's own
_NUMBER = (int, float)
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "seed": (int,),
    "group": (str,),
    "config": (str,),
    "fixed": (bool,),
    "method": (str, dict),  # its record; an older record file's, its name
    "requested_sparsity": _NUMBER,
    "layer_densities": (list, type(None)),
    "test_accuracy": _NUMBER,
    "val_accuracy": _NUMBER,
    "test_loss": _NUMBER,
    "achieved_sparsity": _NUMBER,
    "masks_sha256": (str,),
    "device": (str,),
    "threads": (int,),
    "wall_time_s": _NUMBER,
    "ticket": (str,),
    "ticket_sha256": (str,),
}
# a language model's run (--dataset text) has both of these besides, an image model's neither; they must equal the
# bits per character its ticket stores
LM_FIELDS: dict[str, tuple[type, ...]] = {"test_bits_per_char": _NUMBER, "val_bits_per_char": _NUMBER}


def spec_identity(spec: RunSpec) -> JsonObject:
    """What decides a run's result (not where the data files live): a resumed record must match it exactly."""
    data = {k: v for k, v in asdict(spec.data).items() if k not in ("search_dirs", "download", "download_dir")}
    return {
        "model": spec.model.to_dict(),
        "init": spec.init.to_dict(),
        "data": data,
        "method": method_document(spec.method),
        "device": spec.device,
    }


def legacy_masks_sha256(masks: dict[str, torch.Tensor]) -> str:
    """The digest records held before they took their ticket's own (ticket.masks_sha256, which inspect reports):
    still accepted when a sweep resumes from an older --out-dir."""
    h = hashlib.sha256()
    for name, m in masks.items():
        h.update(name.encode() + b"\0" + ticket_io.pack_bits(m).numpy().tobytes())
    return h.hexdigest()


def paths(out_dir: Path, task: SweepTask) -> tuple[Path, Path]:
    """The run's ticket and record in --out-dir."""
    return out_dir / f"{task.id}.safetensors", out_dir / f"{task.id}.json"


def ticket_bound(spec: RunSpec) -> int:
    """The largest file a ticket of spec's model can be: a bit per weight and a bounded header (a built-in model's
    size from the meta device; the ticket format's own bound for a user's model)."""
    if spec.model.arch == "user":
        return ticket_io.MAX_FILE_BYTES
    shapes = planned_shapes(spec.model, runs_build.run_budget(spec))
    return 8 + MAX_HEADER_BYTES + sum((math.prod(s) + 7) // 8 for s in shapes.values())


def store(
    out_dir: Path,
    task: SweepTask,
    record: SweepRecord,
    payload: bytes,
    note: Note | None = None,
    overwrite: bool = False,
) -> SweepRecord:
    """Write the ticket, then its record (the record last: a record on disk means the ticket is complete); each
    replaces an existing file only with `overwrite` or when `note` shows the sweep wrote it, and goes in the note."""
    ticket, record_path = paths(out_dir, task)
    note = note if note is not None else Note(out_dir)
    record = replace(record, ticket=str(ticket), ticket_sha256=hashlib.sha256(payload).hexdigest())
    # the sweep-k document's record shape (docs/json.md)
    stored = {"schema": SWEEP_RUN_RECORD, "spec": spec_identity(task.spec), "record": record.to_dict()}
    doc = (json.dumps(stored, indent=2, sort_keys=True) + "\n").encode()
    with folder_lock(out_dir):  # another sweep on the folder reads a run's files with their note entries
        note.reload()
        for path, data in ((ticket, payload), (record_path, doc)):
            owned = write_owned(path, data, overwrite=overwrite, owned=note.owned(path), checked_at_start=True)
            note.add(owned, data)
    return record


def _typed(record: Any, task: SweepTask) -> str | None:
    """Why a stored record is not a well-formed record of this task (None when it is)."""
    if not isinstance(record, dict) or record.keys() not in (RECORD_FIELDS.keys(), {*RECORD_FIELDS, *LM_FIELDS}):
        return "its fields are not a sweep-k record's"
    for key, types in {**RECORD_FIELDS, **LM_FIELDS}.items():
        if key not in record:  # an image model's run: no bits per character
            continue
        v = record[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            return f"{key} is not a {types[0].__name__}"
        if isinstance(v, float) and not math.isfinite(v) and key != "test_loss":
            return f"{key} is not finite"
    if any(record.get(k, 0) < 0 for k in LM_FIELDS):
        return "a bits per character is negative"
    if any(not 0 <= record[k] <= 1 for k in ("test_accuracy", "val_accuracy", "achieved_sparsity")):
        return "an accuracy or sparsity lies outside [0, 1]"
    ld = record["layer_densities"]
    if ld is not None and not all(type(x) in _NUMBER and 0 < x <= 1 for x in ld):
        return "layer_densities is not a list of densities"
    if any(len(record[k]) != 64 or not set(record[k]) <= HEX64 for k in ("masks_sha256", "ticket_sha256")):
        return "a digest is not 64 hex digits"
    method = record["method"]
    if isinstance(method, dict) and not isinstance(method.get("name"), str):
        return "method is not a method record"
    name = method["name"] if isinstance(method, dict) else method
    if any(record[k] != v for k, v in task.identity().items()) or name != task.spec.method.name:
        return "it describes another run"
    return None


def finished(
    out_dir: Path, task: SweepTask, bound: int = ticket_io.MAX_FILE_BYTES
) -> tuple[SweepRecord | None, str | None]:
    """(the stored record, None) when the run is complete and intact (same spec, ticket present, hashes match);
    (None, None) when there is none or it is of other settings; (None, why) when the record or its ticket is not
    what the sweep writes (a FIFO, a device, too large, bad JSON, wrong types, a ticket that does not match):
    the caller warns and recomputes the run. Both files are read like tickets, within bounds (`bound`: the size
    of a ticket of this model)."""
    ticket, record_path = paths(out_dir, task)
    if not os.path.lexists(record_path):
        return None, None
    try:
        doc = read_json(record_path, RECORD_LIMIT, "sweep-k record", RECORD_DEPTH)
    except UsageError as e:
        return None, str(e)
    if isinstance(doc, dict) and doc.keys() == {"schema", "spec", "record"} and doc["schema"] == SWEEP_RUN_RECORD:
        record = flat_record(doc["record"])
    elif isinstance(doc, dict) and doc.keys() == {"spec", "record"}:  # before records had a schema: flat
        record = doc["record"]
    else:
        return None, f"sweep-k record {record_path} is not a record sweep-k wrote"
    if doc["spec"] != json.loads(json.dumps(spec_identity(task.spec))):
        return None, None  # a run of other settings (run_sweep refuses them without --force: other_settings)
    why = "its fields are not a sweep-k record's" if record is None else _typed(record, task)
    if record is None or why is not None:
        return None, f"sweep-k record {record_path} is not valid ({why})"
    try:
        st = os.stat(ticket)
        if not stat.S_ISREG(st.st_mode) or st.st_size > bound:
            return None, f"{ticket} is not a ticket of this run (not a regular file, or larger than {bound} bytes)"
        loaded = ticket_io.load(ticket)
        if file_sha256(str(ticket)) != record["ticket_sha256"]:
            return None, f"{ticket} differs from the ticket its record names (sha256)"
        digest = ticket_io.masks_sha256(loaded.packed())
        if record["masks_sha256"] not in (digest, legacy_masks_sha256(loaded.masks)):
            return None, f"{ticket}'s masks differ from its record's"
        bits = ticket_bits(loaded)
        if any(k in record for k in LM_FIELDS) and tuple(record[k] for k in LM_FIELDS) != bits:
            return None, f"{ticket}'s bits per character differ from its record's"
    except FileNotFoundError:
        return None, f"{ticket}, the ticket of {record_path}, is missing"
    except (OSError, ValueError) as e:
        return None, f"cannot read {ticket}: {getattr(e, 'strerror', None) or e}"
    except TicketFileError as e:
        return None, str(e)
    # the ticket's own method record, digest and bits per character, as inspect reads them (an older record may hold
    # others, or a language model's record written before records had its bits per character none)
    lm = dict(zip(LM_FIELDS, bits)) if bits[0] is not None else {}
    ticket_own = {"ticket": str(ticket), "method": loaded.method.to_json(), "masks_sha256": digest, **lm}
    return SweepRecord.of({**record, **ticket_own}), None


def ticket_bits(loaded: ticket_io.Ticket) -> tuple[float | None, float | None]:
    """The test and validation bits per character a ticket stores ((None, None): an image model's ticket)."""
    test, val = loaded.metrics.test, loaded.metrics.val
    return (None if test is None else test.bits_per_char), (None if val is None else val.bits_per_char)


def differences(old: Any, new: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any, Any]]:
    """Where two specs (nested JSON objects) differ: (key path, old value, new value) per differing leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(old.keys() | new.keys()) for d in differences(old.get(k), new.get(k), (*path, k))]
    return [] if old == new else [(path, old, new)]


def other_settings(out_dir: Path, tasks: list[SweepTask]) -> list[str]:
    """What differs between the settings of the runs stored in out_dir and this sweep's, one phrase per setting
    ("epochs: 5 in the folder, 6 now"); empty when every stored record of a planned run has this sweep's settings.
    A record that cannot be read is not looked at here (finished() reports it)."""
    found: dict[tuple[str, ...], tuple[Any, Any]] = {}
    for t in tasks:
        _, record_path = paths(out_dir, t)
        if not os.path.lexists(record_path):
            continue
        try:
            doc = read_json(record_path, RECORD_LIMIT, "sweep-k record", RECORD_DEPTH)
        except UsageError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
            for where, was, now in differences(doc["spec"], json.loads(json.dumps(spec_identity(t.spec)))):
                found.setdefault(where, (was, now))
    leaves = [where[-1] for where in found]
    return [
        f"{where[-1] if leaves.count(where[-1]) == 1 else '.'.join(where)}: {_shown(was)} in the folder, "
        f"{_shown(now)} now"
        for where, (was, now) in found.items()
    ]


def _shown(value: Any) -> str:
    return "absent" if value is None else json.dumps(value) if isinstance(value, (list, dict, str)) else str(value)


def stale_runs(out_dir: Path, tasks: list[SweepTask], note: Note | None) -> list[str]:
    """The ids of runs this sweep wrote to out_dir earlier (its note) that are not in the plan (densities or seeds
    dropped since), whose files are still there."""
    if note is None:
        return []
    planned = {t.id for t in tasks}
    here = Path(os.path.abspath(out_dir))
    return sorted(
        {
            Path(p).stem
            for p in note.files
            if Path(p).parent == here
            and Path(p).suffix in (".safetensors", ".json")
            and Path(p).name != note.path.name
            and Path(p).stem not in planned
            and os.path.lexists(p)
        }
    )
