"""The `--json` contract: what every command's result becomes, one versioned document.

A typed result (result.Result: extract, evaluate, inspect, export, list) makes its own document (`to_document()`);
for the other commands core code returns whatever shape suits its tables and `document(command, result)` turns it
into what `--json` prints. Either way the same thing sits at the same path everywhere (docs/json.md): `schema`
names the document and its version, accuracies sit at `metrics.<split>.accuracy` (and `.loss`), sparsity at
`sparsity.achieved` / `sparsity.requested`, and per-layer data in a list `layers[]` of objects with a `name`. The
JSON Schema of each document ships in `ticketcli/schemas/` (`schema_of`). Pure dict work: no torch, no package
imports."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from typing import Any

# Command -> the schema its document carries. The number bumps only when a key a script may read moves, disappears
# or changes type; adding a key keeps it. drift's feature documents had /1 before the contract moved their layers.
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
}
RUN_FACTS = ("device", "wall_time_s", "processes", "precision")  # what a ticket's metrics field holds beside splits
# the shared sparsity shape's keys (the schemas' $defs.sparsity): what inspect takes from a file's sparsity field
SPARSITY_KEYS = frozenset(
    {"requested", "achieved", "kept", "total", "density", "aug_density", "aux_share", "requested_layer_densities"}
    | {"projected", "rounds"}
)
SPLITS = ("train", "val", "test")  # the order a reader expects; a document holds those its command measured
Doc = dict[str, Any]


def schema_of(command: str) -> Doc:
    """The JSON Schema (draft 2020-12) that `command`'s document validates against."""
    name = SCHEMAS[command].split("/")[0].removeprefix("ticket.")
    text = resources.files("ticketcli").joinpath("schemas").joinpath(f"{name}.json").read_text(encoding="utf-8")
    schema: Doc = json.loads(text)
    return schema


def document(command: str, result: Doc) -> Doc:
    """The `--json` document of `command` for its core result (the result itself is left untouched)."""
    if command not in SCHEMAS:
        raise KeyError(f"no JSON contract for command {command!r}")
    if command not in CONVERTERS:  # a typed result (result.Result) makes its own document
        raise KeyError(f"{command!r} has a typed result: its to_document() is the document")
    body = CONVERTERS[command](result)
    return {"schema": SCHEMAS[command], **{k: v for k, v in body.items() if k != "schema"}}


def split_metrics(metrics: Doc) -> tuple[Doc, Doc]:
    """A metrics dict mixing splits and run facts (device, wall time) -> (the splits only, the rest)."""
    splits = {k: v for k, v in metrics.items() if k in SPLITS and isinstance(v, dict)}
    return splits, {k: v for k, v in metrics.items() if k not in splits}


def layer_list(per_layer: Doc | None) -> list[Doc]:
    """{name: {kept, total, achieved, ...}} -> [{name, kept, total, density, sparsity, ...}] in the given order."""
    layers = []
    for name, entry in (per_layer or {}).items():
        item: Doc = {"name": name, **{k: v for k, v in entry.items() if k != "achieved"}}
        if "kept" in entry and "total" in entry and entry["total"]:
            item["density"] = entry["kept"] / entry["total"]
            item["sparsity"] = entry["achieved"] if "achieved" in entry else 1.0 - item["density"]
        layers.append(item)
    return layers


def _sparsity(sparsity: Doc) -> Doc:
    return {k: v for k, v in sparsity.items() if k != "per_layer"}


def run_metrics_fields(doc: Doc, metrics: Doc) -> None:
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


def _curve_point(p: Doc) -> Doc:
    train = {k: p[k] for k in ("accuracy", "loss") if k in p}
    val = {k.removeprefix("val_"): p[k] for k in ("val_accuracy", "val_loss") if k in p}
    rest = {k: v for k, v in p.items() if k not in ("accuracy", "loss", "val_accuracy", "val_loss")}
    return {**rest, "metrics": {"train": train, "val": val}}


def _weak_run(run: Doc) -> Doc:
    rest = {
        k: v for k, v in run.items() if k not in ("initial", "final", "curve", "best_val_epoch", "best_val_accuracy")
    }
    return {
        **rest,
        "metrics": run["final"],
        "initial": {"metrics": run["initial"]},
        "best": {"epoch": run["best_val_epoch"], "metrics": {"val": {"accuracy": run["best_val_accuracy"]}}},
        "curve": [_curve_point(p) for p in run["curve"]],
    }


def _train_weak(r: Doc) -> Doc:
    doc = {k: v for k, v in r.items() if k not in ("masked", "dense", "sparsity")}
    sp = r["sparsity"]
    checks = ("nonzero_after", "masked_nonzero_after", "unchanged")
    doc["sparsity"] = {k: v for k, v in _sparsity(sp).items() if k not in checks}
    doc["weights_check"] = {k: sp[k] for k in checks if k in sp}
    doc["layers"] = layer_list(sp.get("per_layer"))
    doc["masked"] = _weak_run(r["masked"])
    doc["metrics"] = doc["masked"]["metrics"]  # the trained ticket's accuracy, where every other command has it
    if "dense" in r:
        doc["dense"] = _weak_run(r["dense"])
    return doc


def _record(r: Doc) -> Doc:
    """A sweep-k record (or an oracle's pick) with extract's metrics and sparsity shapes."""
    moved = ("test_accuracy", "val_accuracy", "test_loss", "achieved_sparsity", "requested_sparsity")
    doc = {k: v for k, v in r.items() if k not in moved}
    metrics: Doc = {}
    if "val_accuracy" in r:
        metrics["val"] = {"accuracy": r["val_accuracy"]}
    if "test_accuracy" in r:
        metrics["test"] = {"accuracy": r["test_accuracy"]} | ({"loss": r["test_loss"]} if "test_loss" in r else {})
    doc["metrics"] = metrics
    doc["sparsity"] = {"achieved": r["achieved_sparsity"]} | (
        {"requested": r["requested_sparsity"]} if "requested_sparsity" in r else {}
    )
    return doc


def flat_record(record: Doc) -> Doc:
    """A sweep-k document's record back in sweep's own flat shape (test_accuracy, achieved_sparsity, ...), so that a
    saved document can be summarized again (sweep/summary.py's summarize) or compared with a fresh run's record."""
    flat = {k: v for k, v in record.items() if k not in ("metrics", "sparsity")}
    test, val, sp = record["metrics"].get("test", {}), record["metrics"].get("val", {}), record["sparsity"]
    pairs = [("test_accuracy", test, "accuracy"), ("val_accuracy", val, "accuracy"), ("test_loss", test, "loss")]
    pairs += [("achieved_sparsity", sp, "achieved"), ("requested_sparsity", sp, "requested")]
    flat.update({key: part[name] for key, part, name in pairs if name in part})
    return flat


def _group(g: Doc) -> Doc:
    """A summary group's statistics: test accuracy and achieved sparsity at their contract paths."""
    doc = {k: v for k, v in g.items() if k not in ("test", "achieved_sparsity", "per_seed")}
    doc["metrics"] = {"test": {"accuracy": g["test"]}}
    doc["sparsity"] = {"achieved": g["achieved_sparsity"]}
    if "per_seed" in g:
        doc["per_seed"] = {s: None if v is None else _record(v) for s, v in g["per_seed"].items()}
    return doc


def _sweep_k(r: Doc) -> Doc:
    doc = dict(r)
    doc["records"] = [_record(x) for x in r["records"]]
    s = r.get("summary")
    if s is not None:
        groups = ("edge_popup", "oracle_constrained", "oracle_unconstrained", "fixed_edge_popup")
        summary = {k: (_group(v) if k in groups else v) for k, v in s.items()}
        summary["methods"] = {m: _group(v) for m, v in s.get("methods", {}).items()}
        doc["summary"] = summary
    return doc


def named_layers(node: Any) -> Any:
    """drift documents: every `layers` (or activation `sites`) object keyed by name becomes a list of objects with
    a `name`, in the same order (a bare number there is that layer's activation sparsity)."""
    if isinstance(node, list):
        return [named_layers(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in ("layers", "sites") and isinstance(v, dict):
            out[k] = [
                {"name": n, **named_layers(x)} if isinstance(x, dict) else {"name": n, "sparsity": x}
                for n, x in v.items()
            ]
        else:
            out[k] = named_layers(v)
    return out


def _tradeoff(r: Doc) -> Doc:
    doc = named_layers(r)
    for m in doc.get("models", {}).values():
        m["curve"] = [
            {k: v for k, v in p.items() if k != "achieved_sparsity"}
            | {"sparsity": {"achieved": p["achieved_sparsity"], "requested": p["target"]}}
            for p in m["curve"]
        ]
    return doc


CONVERTERS: dict[str, Callable[[Doc], Doc]] = {
    "train-weak": _train_weak,
    "sweep-k": _sweep_k,
    "drift": named_layers,
    "drift-control": named_layers,
    "drift-relufy": named_layers,
    "drift-tradeoff": _tradeoff,
}


def drift_command(result: Doc) -> str:
    """Which drift document a drift result is: plain, or one of its features (the schema its core set, if any)."""
    name = str(result.get("schema", "ticket.drift/")).split("/")[0].removeprefix("ticket.")
    return name if name in SCHEMAS else "drift"
