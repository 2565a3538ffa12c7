"""The `--json` contract: the schema names and versions, the JSON Schemas, and the few shapes the commands' typed
results share. Every command returns a typed result (result.Result) whose `to_document()` is what `--json` prints,
and the same thing sits at the same path everywhere (docs/json.md): `schema` names the document and its version,
accuracies sit at `metrics.<split>.accuracy` (and `.loss`), sparsity at `sparsity.achieved` /
`sparsity.requested`, and per-layer data in a list `layers[]` of objects with a `name`. The JSON Schema of each
document ships in `ticketcli/schemas/`, or in its command's own package (`schema_of`). Pure dict work: no torch, no
package imports."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

# Command -> the schema its document carries. The number bumps only when a key a script may read moves, disappears
# or changes type; adding a key keeps it. The feature documents (-control, -relufy, -tradeoff) had /1 before the
# contract moved their layers.
SCHEMAS = {
    "extract": "ticket.extract/2",
    "evaluate": "ticket.evaluate/2",
    "inspect": "ticket.inspect/1",
    "train-weak": "ticket.train-weak/2",
    "sweep-k": "ticket.sweep-k/2",
    "export": "ticket.export/1",
    "drift": "ticket.drift/1",
    "drift-control": "ticket.drift-control/2",
    "drift-relufy": "ticket.drift-relufy/2",
    "drift-tradeoff": "ticket.drift-tradeoff/2",
    "list": "ticket.list/1",
    # several tickets at once: `inspect DIR` and `evaluate DIR` (a folder, a glob or several files)
    "inspect-folder": "ticket.inspect-folder/1",
    "evaluate-folder": "ticket.evaluate-folder/1",
    "compare": "ticket.compare/1",
    "bench": "ticket.bench/1",
}
# sweep-k's record of one run in --out-dir (<id>.json): {"schema", "spec", "record"}, its record in the shape of
# the sweep-k document's records[] ($defs.record of schemas/sweep-k.json). Files without `schema` are version 0.
SWEEP_RUN_RECORD = "ticket.sweep-k-run/1"
RUN_FACTS = ("device", "wall_time_s", "processes", "precision")  # what a ticket's metrics field holds beside splits
# the shared sparsity shape's keys (the schemas' $defs.sparsity): what inspect takes from a file's sparsity field
SPARSITY_KEYS = frozenset(
    {"requested", "achieved", "kept", "total", "density", "aug_density", "aux_share", "requested_layer_densities"}
    | {"projected", "rounds"}
)
SPLITS = ("train", "val", "test")  # the order a reader expects; a document holds those its command measured
JsonObject = dict[str, Any]  # a JSON object: a document, a part of one, or one read from a file (keys by name)


def entries(record: object, *names: str) -> JsonObject:
    """A document's entries that are a record's attributes as they are: by name, in that order."""
    return {name: getattr(record, name) for name in names}


def schema_of(command: str) -> JsonObject:
    """The JSON Schema (draft 2020-12) that `command`'s document validates against: `schemas/<name>.json`, in the
    package of the name's first word where that package ships its own (`<package>/schemas/`), else the package's."""
    name = SCHEMAS[command].split("/")[0].removeprefix("ticket.")
    root = resources.files("ticketcli")
    own = root / name.split("-")[0] / "schemas" / f"{name}.json"
    text = (own if own.is_file() else root / "schemas" / f"{name}.json").read_text(encoding="utf-8")
    schema: JsonObject = json.loads(text)
    return schema


def present(**fields: Any) -> JsonObject:
    """The fields whose value is not None, in the order given: a document's optional keys, written only when set."""
    return {k: v for k, v in fields.items() if v is not None}


def split_metrics(metrics: JsonObject) -> tuple[JsonObject, JsonObject]:
    """A metrics dict mixing splits and run facts (device, wall time) -> (the splits only, the rest)."""
    splits = {k: v for k, v in metrics.items() if k in SPLITS and isinstance(v, dict)}
    return splits, {k: v for k, v in metrics.items() if k not in splits}


def layer_list(per_layer: JsonObject | None) -> list[JsonObject]:
    """{name: {kept, total, achieved, ...}} -> [{name, kept, total, density, sparsity, ...}] in the given order."""
    layers = []
    for name, entry in (per_layer or {}).items():
        item: JsonObject = {"name": name, **{k: v for k, v in entry.items() if k != "achieved"}}
        if "kept" in entry and "total" in entry and entry["total"]:
            item["density"] = entry["kept"] / entry["total"]
            item["sparsity"] = entry["achieved"] if "achieved" in entry else 1.0 - item["density"]
        layers.append(item)
    return layers


def run_metrics_fields(doc: JsonObject, metrics: JsonObject) -> None:
    """A ticket's `metrics` field into `doc`: the splits at metrics.<split>, the trained network's splits at
    trained.metrics, and the facts of the run (RUN_FACTS) beside them at the top, never in place of a key the
    document already has; anything else a file's field holds is not part of the contract (inspect reads it from an
    untrusted file)."""
    splits, facts = split_metrics(metrics)
    trained = facts.pop("trained", None)
    if isinstance(trained, dict):
        t_splits, t_rest = split_metrics(trained)
        doc["trained"] = {"metrics": t_splits, **t_rest}
    for k in RUN_FACTS:
        if k in facts:
            doc.setdefault(k, facts[k])
    doc["metrics"] = splits
