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
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ticketcli import runs
from ticketcli import ticket as ticket_io
from ticketcli.atomic import write_atomic
from ticketcli.budget import Budget
from ticketcli.errors import RunFailed, TicketCliError, TicketFileError, UsageError
from ticketcli.methods import METHODS
from ticketcli.models import MaskedNet, build_model, layer_of, planned_shapes
from ticketcli.pool import run_pool
from ticketcli.seeding import file_sha256, generator
from ticketcli.specs import ModelSpec, RunSpec
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


def masks_sha256(masks: dict[str, torch.Tensor]) -> str:
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
            masks = ticket_io.load(path).masks
    finally:
        torch.set_num_threads(previous)
    m, sp = summary["metrics"], summary["sparsity"]
    record = {
        "id": task.id,
        "seed": task.seed,
        "group": task.group,
        "config": task.config,
        "fixed": task.fixed,
        "method": task.spec.method.name,
        "requested_sparsity": task.spec.method.sparsity,
        "layer_densities": None if task.spec.method.layer_densities is None else list(task.spec.method.layer_densities),
        "test_accuracy": m["test"]["accuracy"],
        "val_accuracy": m["val"]["accuracy"],
        "test_loss": m["test"]["loss"],
        "achieved_sparsity": sp["achieved"],
        "masks_sha256": masks_sha256(masks),
        "device": m["device"],
        "threads": threads,
        "wall_time_s": m["wall_time_s"],
        "ticket": None,
        "ticket_sha256": None,
    }
    return record, payload


# ---- keeping runs in --out-dir ----


def store(out_dir: Path, task: SweepTask, record: dict, payload: bytes) -> dict:
    """Write the ticket, then its record (the record last: a record on disk means the ticket is complete)."""
    ticket = out_dir / f"{task.id}.safetensors"
    write_atomic(ticket, payload, overwrite=True)
    record = {**record, "ticket": str(ticket), "ticket_sha256": hashlib.sha256(payload).hexdigest()}
    doc = {"spec": spec_identity(task.spec), "record": record}
    write_atomic(
        out_dir / f"{task.id}.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode(), overwrite=True
    )
    return record


def finished(out_dir: Path, task: SweepTask) -> dict | None:
    """The stored record when the run is complete and intact (same spec, ticket present, hashes match)."""
    try:
        doc = json.loads((out_dir / f"{task.id}.json").read_text())
        record = doc["record"]
        if doc["spec"] != json.loads(json.dumps(spec_identity(task.spec))):
            return None
        ticket = out_dir / f"{task.id}.safetensors"
        if file_sha256(str(ticket)) != record["ticket_sha256"]:
            return None
        if masks_sha256(ticket_io.load(ticket).masks) != record["masks_sha256"]:
            return None
    except (OSError, ValueError, KeyError, TypeError, TicketFileError):
        return None
    return {**record, "ticket": str(ticket)}


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
) -> dict:
    """Run (or resume) every task; returns {"records": in plan order, "resumed": ids taken from out_dir}."""
    out = None if out_dir is None else Path(out_dir)
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"cannot create --out-dir {out}: {e.strerror or e}") from None
    records: dict[str, dict] = {}
    resumed = []
    todo = []
    for t in tasks:
        rec = None if out is None else finished(out, t)
        if rec is None:
            todo.append(t)
        else:
            records[t.id] = rec
            resumed.append(t.id)
            if on_result:
                on_result(rec, True)
    todo.sort(key=lambda t: -_cost(t))  # longest first, so a multi-round run is not the pool's last straggler
    results = _ray(todo, threads, ray_address) if executor == "ray" and todo else _local(todo, workers, threads)
    for task, (record, payload) in results:
        if out is not None:
            record = store(out, task, record, payload)
        records[task.id] = record
        if on_result:
            on_result(record, False)
    return {"records": [records[t.id] for t in tasks], "resumed": resumed}


def sweep_k(tasks: list[SweepTask], *, band: tuple[float, float] = PAPER_BAND, **run: Any) -> dict:
    """Run the planned tasks (see run_sweep for the executor options) and summarise them."""
    result = run_sweep(tasks, **run)
    return {**result, "summary": summarize(result["records"], band=band)}
