"""sweep-k: edge-popup over scalar and layerwise keep densities vs double-scoring, one independent task per run.

Every task is one `runs.extract_ticket` on the seed's shared initialisation. Tasks run in-process, in a local
spawn pool or on Ray; each sets a fixed torch thread count so its arithmetic (and so its record) does not depend
on the executor or the number of workers. The summary is the paper's Section 6.3 stability table (docs/method.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ticketcli import runs
from ticketcli import ticket as ticket_io
from ticketcli.atomic import check_destination, write_owned
from ticketcli.budget import Budget
from ticketcli.errors import RunFailed, TicketCliError, TicketFileError, UsageError
from ticketcli.methods import METHODS
from ticketcli.models.build import build_model, planned_shapes
from ticketcli.models.masked import MaskedNet, layer_of
from ticketcli.pool import run_pool
from ticketcli.safetensors_file import MAX_HEADER_BYTES
from ticketcli.seeding import file_sha256, generator
from ticketcli.specs import ModelSpec, RunSpec
from ticketcli.sweep_outputs import Note, load_note, read_json
from ticketcli.sweep_summary import PAPER_BAND, summarize

PAPER_DENSITIES = (0.01, 0.02, 0.05, 0.075, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50, 0.65, 0.80)  # Appendix B
PAPER_LAYERWISE = 8  # random layerwise tuples per seed (Appendix B)
DOUBLE_SCORING = ("augmented", "iterated")  # run whichever of these the METHODS registry has
# Record fields that legitimately differ between two runs of the same task; everything else must be identical.
VOLATILE = ("wall_time_s", "ticket", "ticket_sha256")

OnResult = Callable[[dict, bool], None]  # (record, resumed) after each finished task


@dataclass(frozen=True)
class SweepTask:
    id: str  # file stem in --out-dir, unique in the sweep
    seed: int
    group: str  # "edge-popup" (the sweep), "fixed", "random" or a double-scoring method name
    config: str  # human label: "k=0.1", "layerwise 3", "fixed", ...
    spec: RunSpec
    fixed: bool = False  # this edge-popup run is also the fixed target-density baseline


def double_scoring_methods() -> list[str]:
    return [m for m in DOUBLE_SCORING if m in METHODS.names()]


def model_layers(model: ModelSpec, limits: Budget = Budget()) -> int:
    """Layers of the model, worked out on the meta device for a built-in one (after its budget check)."""
    if model.arch != "user":
        return len({layer_of(n) for n in planned_shapes(model, limits)})
    return len(MaskedNet(build_model(model), model).layers())


def layerwise_tuples(seed: int, pool: tuple[float, ...], n_layers: int, count: int) -> list[tuple[float, ...]]:
    """`count` keep-density tuples, one pool value per layer, drawn uniformly from the seed's own stream."""
    if count == 0:
        return []
    idx = torch.randint(len(pool), (count, n_layers), generator=generator(seed, "sweep-layerwise"))
    return [tuple(pool[i] for i in row.tolist()) for row in idx]


def _for_seed(spec: RunSpec, seed: int, **method) -> RunSpec:
    return replace(
        spec,
        init=replace(spec.init, seed=seed),
        data=replace(spec.data, split_seed=seed),
        method=replace(spec.method, **method),
    )


def build_plan(
    base: RunSpec, *, seeds: Iterable[int], densities: tuple[float, ...], layerwise: int, double_scoring: Iterable[str]
) -> list[SweepTask]:
    """Every run of the sweep, in a fixed order; base.method carries the requested sparsity and training settings."""
    s = base.method.sparsity
    target = 1.0 - s
    n_layers = model_layers(base.model, runs.run_budget(base))
    double_scoring = list(double_scoring)
    tasks = []
    for seed in seeds:
        p = f"seed{seed}-"
        ep = dict(name="edge-popup", layer_densities=None, aug_density=None)
        has_fixed = False
        for d in densities:
            fixed = math.isclose(d, target, rel_tol=0, abs_tol=1e-12)
            has_fixed |= fixed
            tasks.append(
                SweepTask(
                    f"{p}edge-popup-k{d:g}",
                    seed,
                    "edge-popup",
                    f"k={d:g}",
                    _for_seed(base, seed, **ep, sparsity=round(1.0 - d, 12)),
                    fixed=fixed,
                )
            )
        for i, tup in enumerate(layerwise_tuples(seed, densities, n_layers, layerwise)):
            tasks.append(
                SweepTask(
                    f"{p}edge-popup-lw{i}",
                    seed,
                    "edge-popup",
                    f"layerwise {i}",
                    _for_seed(base, seed, **{**ep, "layer_densities": tup}, sparsity=s),
                )
            )
        if not has_fixed:
            tasks.append(
                SweepTask(
                    f"{p}fixed",
                    seed,
                    "fixed",
                    f"fixed k={target:g}",
                    _for_seed(base, seed, **ep, sparsity=s),
                    fixed=True,
                )
            )
        tasks.append(
            SweepTask(
                f"{p}random",
                seed,
                "random",
                "random",
                _for_seed(base, seed, name="random", layer_densities=None, aug_density=None, sparsity=s),
            )
        )
        for name in double_scoring:
            tasks.append(
                SweepTask(
                    f"{p}{name}",
                    seed,
                    name,
                    name,
                    _for_seed(base, seed, name=name, layer_densities=None, aug_density=None, sparsity=s),
                )
            )
    return tasks


def spec_identity(spec: RunSpec) -> dict:
    """What decides a run's result (not where the data files live): a resumed record must match it exactly."""
    data = {k: v for k, v in asdict(spec.data).items() if k not in ("search_dirs", "download", "download_dir")}
    return {
        "model": spec.model.to_dict(),
        "init": spec.init.to_dict(),
        "data": data,
        "method": spec.method.to_dict(),
        "device": spec.device,
    }


def legacy_masks_sha256(masks: dict[str, torch.Tensor]) -> str:
    """The digest records held before they took their ticket's own (ticket.masks_sha256, which inspect reports):
    still accepted when a sweep resumes from an older --out-dir."""
    h = hashlib.sha256()
    for name, m in masks.items():
        h.update(name.encode() + b"\0" + ticket_io.pack_bits(m).numpy().tobytes())
    return h.hexdigest()


def run_task(task: SweepTask, threads: int) -> tuple[dict, bytes]:
    """One extraction with exactly `threads` torch threads; returns its record and the ticket file's bytes."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="ticket-sweep-") as tmp:
            path = Path(tmp) / f"{task.id}.safetensors"
            summary = runs.extract_ticket(task.spec, out=path)
            payload = path.read_bytes()
    finally:
        torch.set_num_threads(previous)
    m, sp = summary["metrics"], summary["sparsity"]
    record = {
        "id": task.id,
        "seed": task.seed,
        "group": task.group,
        "config": task.config,
        "fixed": task.fixed,
        "method": summary["method"],  # the ticket's method record, as extract and inspect report it
        "requested_sparsity": task.spec.method.sparsity,
        "layer_densities": None if task.spec.method.layer_densities is None else list(task.spec.method.layer_densities),
        "test_accuracy": m["test"]["accuracy"],
        "val_accuracy": m["val"]["accuracy"],
        "test_loss": m["test"]["loss"],
        "achieved_sparsity": sp["achieved"],
        "masks_sha256": summary["masks_sha256"],  # the ticket's digest, as extract and inspect report it
        "device": m["device"],
        "threads": threads,
        "wall_time_s": m["wall_time_s"],
        "ticket": None,
        "ticket_sha256": None,
    }
    return record, payload


# ---- keeping runs in --out-dir ----


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
    "method": (str,),
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


def paths(out_dir: Path, task: SweepTask) -> tuple[Path, Path]:
    """The run's ticket and record in --out-dir."""
    return out_dir / f"{task.id}.safetensors", out_dir / f"{task.id}.json"


def ticket_bound(spec: RunSpec) -> int:
    """The largest file a ticket of spec's model can be: a bit per weight and a bounded header (a built-in model's
    size from the meta device; the ticket format's own bound for a user's model)."""
    if spec.model.arch == "user":
        return ticket_io.MAX_FILE_BYTES
    shapes = planned_shapes(spec.model, runs.run_budget(spec))
    return 8 + MAX_HEADER_BYTES + sum((math.prod(s) + 7) // 8 for s in shapes.values())


def store(
    out_dir: Path, task: SweepTask, record: dict, payload: bytes, note: Note | None = None, overwrite: bool = False
) -> dict:
    """Write the ticket, then its record (the record last: a record on disk means the ticket is complete); each
    replaces an existing file only with `overwrite` or when `note` shows the sweep wrote it, and goes in the note."""
    ticket, record_path = paths(out_dir, task)
    note = note if note is not None else Note(out_dir)
    note.add(write_owned(ticket, payload, overwrite=overwrite, owned=note.owned(ticket)), payload)
    record = {**record, "ticket": str(ticket), "ticket_sha256": hashlib.sha256(payload).hexdigest()}
    # on disk the method is its name (RECORD_FIELDS); the full record is the ticket's, read back by finished()
    kept = {**record, "method": record["method"]["name"]}
    doc = (json.dumps({"spec": spec_identity(task.spec), "record": kept}, indent=2, sort_keys=True) + "\n").encode()
    note.add(write_owned(record_path, doc, overwrite=overwrite, owned=note.owned(record_path)), doc)
    return record


def _typed(record: Any, task: SweepTask) -> str | None:
    """Why a stored record is not a well-formed record of this task (None when it is)."""
    if not isinstance(record, dict) or record.keys() != RECORD_FIELDS.keys():
        return "its fields are not a sweep-k record's"
    for key, types in RECORD_FIELDS.items():
        v = record[key]
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            return f"{key} is not a {types[0].__name__}"
        if isinstance(v, float) and not math.isfinite(v) and key != "test_loss":
            return f"{key} is not finite"
    if any(not 0 <= record[k] <= 1 for k in ("test_accuracy", "val_accuracy", "achieved_sparsity")):
        return "an accuracy or sparsity lies outside [0, 1]"
    ld = record["layer_densities"]
    if ld is not None and not all(type(x) in _NUMBER and 0 < x <= 1 for x in ld):
        return "layer_densities is not a list of densities"
    if any(len(record[k]) != 64 or not set(record[k]) <= HEX64 for k in ("masks_sha256", "ticket_sha256")):
        return "a digest is not 64 hex digits"
    task_fields = {"id": task.id, "seed": task.seed, "group": task.group, "config": task.config, "fixed": task.fixed}
    if any(record[k] != v for k, v in task_fields.items()) or record["method"] != task.spec.method.name:
        return "it describes another run"
    return None


def finished(out_dir: Path, task: SweepTask, bound: int = ticket_io.MAX_FILE_BYTES) -> tuple[dict | None, str | None]:
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
    if not isinstance(doc, dict) or doc.keys() != {"spec", "record"}:
        return None, f"sweep-k record {record_path} is not a record sweep-k wrote"
    if doc["spec"] != json.loads(json.dumps(spec_identity(task.spec))):
        return None, None  # a run of other settings: recomputed, as the settings changed
    record = doc["record"]
    why = _typed(record, task)
    if why is not None:
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
    except FileNotFoundError:
        return None, f"{ticket}, the ticket of {record_path}, is missing"
    except (OSError, ValueError) as e:
        return None, f"cannot read {ticket}: {getattr(e, 'strerror', None) or e}"
    except TicketFileError as e:
        return None, str(e)
    return {**record, "ticket": str(ticket), "method": loaded.method, "masks_sha256": digest}, None


# ---- executors ----


def _local(tasks: list[SweepTask], workers: int, threads: int) -> Iterator[tuple[SweepTask, tuple[dict, bytes]]]:
    return run_pool(
        run_task, tasks, workers=workers, threads=threads, describe=lambda t: f"{t.id} (out of memory or killed)"
    )


def _ray(tasks: list[SweepTask], threads: int, address: str | None):
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray installed", hint="pip install 'ticketcli[ray]'") from None
    started = not ray.is_initialized()
    if started:
        # Ship this very package to the workers, so the cluster runs the driver's code.
        pkg = str(Path(__file__).resolve().parent)
        try:
            ray.init(
                address=address,
                runtime_env={"py_modules": [pkg]},
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        except Exception as e:  # ConnectionError, ValueError, RuntimeError... depending on the address
            raise UsageError(
                f"cannot connect to Ray at {address or 'a new local cluster'}: {str(e).splitlines()[0][:200]}"
            ) from None
    try:
        remote = ray.remote(num_cpus=threads)(run_task)
        refs = {remote.remote(t, threads): t for t in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayTaskError as e:  # the task raised: re-raise a user-facing error as is
                if isinstance(e.cause, TicketCliError):
                    raise e.cause from None
                raise
            except ray.exceptions.RayError as e:  # the worker or the cluster failed
                raise RunFailed(f"Ray could not run {refs[done[0]].id}: {str(e).splitlines()[0][:200]}") from None
            yield refs[done[0]], result
    finally:
        if started:
            ray.shutdown()


def _cost(task: SweepTask) -> int:
    """Relative work of a run: score-training epochs, times the rounds for iterated (up to max_rounds)."""
    m = task.spec.method
    return m.epochs * (m.max_rounds if m.name == "iterated" else 1) if m.name != "random" else 0


def run_sweep(
    tasks: list[SweepTask],
    *,
    workers: int = 1,
    threads: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    out_dir: str | Path | None = None,
    on_result: OnResult | None = None,
    overwrite: bool = False,
    warn: Callable[[str], None] | None = None,
) -> dict:
    """Run (or resume) every task; returns {"records": in plan order, "resumed": ids taken from out_dir}.

    A file in out_dir the sweep will write is replaced only when the sweep wrote it (its note) or with
    `overwrite` (--force), checked before any run starts; a stored record or ticket that is not what the sweep
    writes is reported through `warn` and its run recomputed."""
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create --out-dir {out}: {e.strerror or e}") from None
    note = load_note(out)
    bound = ticket_bound(tasks[0].spec) if out is not None and tasks else ticket_io.MAX_FILE_BYTES
    records: dict[str, dict] = {}
    resumed = []
    todo = []
    problems: dict[str, str] = {}
    for t in tasks:
        rec, why = (None, None) if out is None else finished(out, t, bound)
        if rec is None:
            todo.append(t)
            if why is not None:
                problems[t.id] = why
        else:
            records[t.id] = rec
            resumed.append(t.id)
    if out is not None and note is not None and todo:  # before the work: every file it will write may be written
        note.check(overwrite)
        for t in todo:
            for p in paths(out, t):
                if os.path.lexists(p) and not overwrite and note.owned(p) is None:
                    raise UsageError(
                        f"{problems.get(t.id, f'{p} is not a file this sweep wrote')}; "
                        f"it is not replaced without --force",
                        hint="pass --force to replace it and recompute that run, or use another --out-dir",
                    )
                check_destination(p, overwrite=overwrite, owned=note.owned(p))
        for t in todo:
            if t.id in problems and warn is not None:
                warn(f"{problems[t.id]}; that run is recomputed")
    for t in tasks:
        if on_result and t.id in records:
            on_result(records[t.id], True)
    todo.sort(key=lambda t: -_cost(t))  # longest first, so a multi-round run is not the pool's last straggler
    results = _ray(todo, threads, ray_address) if executor == "ray" and todo else _local(todo, workers, threads)
    for task, (record, payload) in results:
        if out is not None:
            record = store(out, task, record, payload, note, overwrite)
        records[task.id] = record
        if on_result:
            on_result(record, False)
    return {"records": [records[t.id] for t in tasks], "resumed": resumed}


def sweep_k(tasks: list[SweepTask], *, band: tuple[float, float] = PAPER_BAND, **run: Any) -> dict:
    """Run the planned tasks (see run_sweep for the executor options) and summarise them."""
    result = run_sweep(tasks, **run)
    return {**result, "summary": summarize(result["records"], band=band)}
