"""Golden tickets: record a small ticket per method (plus drift, train-weak, sweep-k and evaluate outputs) and later
check that a refactor reproduces them bit for bit.

    python benchmarks/golden_tickets.py record DIR     # before the change
    python benchmarks/golden_tickets.py compare DIR    # after it: exit 1 on any difference (reruns in a temp dir)

Each case runs `python -m ticketcli ...` with the working tree's code (PYTHONPATH is set to the repository root), on
scikit-learn's digits so it needs no files. Tickets are compared on their masks, metadata (model, init, shapes,
weights fingerprint, method, data, sparsity, masks digest) and test/val metrics; JSON outputs are compared whole,
wall-clock fields aside (drift's within a relative 1e-6: DRIFT_REL_TOL).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ["--dataset", "digits", "--quiet", "--json"]
METHOD_ARGS = {
    "augmented": ["--model", "mlp:64-32-32-10", "--epochs", "3"],
    "edge-popup": ["--model", "conv4", "--epochs", "2"],
    "grasp": ["--model", "mlp:64-32-10+bias"],  # trains nothing: --epochs is refused
    "imp": ["--model", "mlp:64-32-10", "--epochs", "2", "--imp-rounds", "2"],
    "iterated": ["--model", "mlp:64-32-10", "--epochs", "2"],
    "movement": ["--model", "mlp:64-32-10", "--epochs", "2"],
    "random": ["--model", "mlp:64-32-10"],
    "rigl": ["--model", "mlp:64-32-10", "--epochs", "2"],
    "set": ["--model", "mlp:64-32-10", "--epochs", "2"],
    "snip": ["--model", "mlp:64-32-10+bias"],  # trains nothing: --epochs is refused
    "synflow": ["--model", "mlp:64-32-10"],  # trains nothing: --epochs is refused
}
EXTRA_TICKETS = {
    "resnet-bn": [
        "extract",
        "--method",
        "edge-popup",
        "--model",
        "resnet20",
        "--epochs",
        "1",
        "--n-extract",
        "300",
        "--n-val",
        "100",
    ],
    "mlp-res-norm": ["extract", "--method", "augmented", "--model", "mlp:64-32-32-10+res+norm=layer", "--epochs", "2"],
}
KEYS = ("model", "init", "shapes", "weights_sha256", "method", "data", "sparsity", "masks_sha256")
# wall-clock fields, and whole-file digests of tickets (their metadata records the wall time; masks, metadata and
# metrics are compared separately) and their sizes (the wall time's digits vary); threads: torch's thread count, the
# free cores at the start unless --threads is given, and threads_auto, how it was chosen (facts of the machine and
# its load, like the wall time)
VOLATILE = {"wall_time_s", "seconds", "elapsed_s", "time_s", "ticket_sha256", "file_bytes", "threads", "threads_auto"}


def run(args: list[str], cwd: Path) -> dict:
    """Run `python -m ticketcli ARGS` with this tree's code; return its JSON (stdout) or fail loudly."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "ticketcli", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"ticket {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)


def cases(folder: Path) -> dict[str, list[str]]:
    """Case name -> command line; tickets are written into (and read from) `folder`."""
    out: dict[str, list[str]] = {}
    for method, extra in METHOD_ARGS.items():
        out[method] = ["extract", "--method", method, *extra, *DIGITS, "--out", str(folder / f"{method}.safetensors")]
    for name, extra in EXTRA_TICKETS.items():
        out[name] = [*extra, *DIGITS, "--out", str(folder / f"{name}.safetensors")]
    out["drift"] = [
        "drift",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-32-32-10",
        "--steps",
        "30",
        "--log-every",
        "10",
        "--quiet",
        "--json",
    ]
    out["drift-ticket"] = [
        "drift",
        "--ticket",
        str(folder / "augmented.safetensors"),
        "--steps",
        "20",
        "--log-every",
        "10",
        "--activation",
        "gelu",
        "--quiet",
        "--json",
    ]
    out["train-weak"] = ["train-weak", str(folder / "edge-popup.safetensors"), "--epochs", "2", "--quiet", "--json"]
    out["sweep-k"] = [
        "sweep-k",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-32-10",
        "--epochs",
        "1",
        "--seeds",
        "0,1",
        "--densities",
        "0.3,0.5",
        "--out-dir",
        str(folder / "sweep"),
        "--quiet",
        "--json",
    ]
    for name in ("augmented", "edge-popup", "snip", "resnet-bn"):
        out[f"evaluate-{name}"] = ["evaluate", str(folder / f"{name}.safetensors"), "--json"]
    return out


def strip(doc, folder: Path):
    """The JSON without wall-clock fields, and with the run's folder written as $DIR (paths differ between runs)."""
    if isinstance(doc, dict):
        return {k: strip(v, folder) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [strip(v, folder) for v in doc]
    if isinstance(doc, str):
        return doc.replace(str(folder), "$DIR")
    return doc


def ticket_view(path: Path) -> dict:
    """What must not change in a ticket: masks, the identifying metadata and the metrics."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = f.metadata() or {}
        tensors = {k: f.get_tensor(k).tolist() for k in sorted(f.keys())}
    metrics = json.loads(meta.get("metrics", "{}"))
    return {
        "meta": {k: meta.get(k) for k in KEYS},
        "tensors": tensors,
        "metrics": {
            s: {k: metrics.get(s, {}).get(k) for k in ("correct", "loss", "accuracy")} for s in ("test", "val")
        },
    }


def record(folder: Path) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    views = {}
    for name, args in cases(folder).items():
        print(f"  {name}", file=sys.stderr)
        views[name] = {"json": strip(run(args, folder), folder)}
        ticket = folder / f"{name}.safetensors"
        if args[0] == "extract":
            views[name]["ticket"] = ticket_view(ticket)
    return views


def first_difference(a, b, where: str = "") -> str | None:
    """The path of the first place two JSON values differ (None when equal), to say what changed."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k} (only in {'before' if k in a else 'now'})"
            found = first_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, f"{where}[{i}]"))), None)
    return None if a == b else f"{where}: {str(a)[:60]} -> {str(b)[:60]}"


# drift's statistics are float64 sums of float32 activations and gradients: a measurement that sums them in another
# order (chunks of the probe) moves values that are zero up to rounding in their last digits
DRIFT_REL_TOL = 1e-6


def equal(a, b, rel: float = 0.0) -> bool:
    """Two JSON values equal, floats within `rel` of each other (relative; 0: exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(equal(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y, rel) for x, y in zip(a, b))
    if rel and isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    return a == b


def in_order_of(old, new):
    """`old` with each list of named objects (layers[]) in `new`'s order: the recording wrote the per-layer objects
    these lists come from with sorted keys ("layers.10" before "layers.2"), so only their order was lost."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {k: in_order_of(v, new.get(k)) for k, v in old.items()}
    if not (isinstance(old, list) and isinstance(new, list) and len(old) == len(new)):
        return old
    names = [x.get("name") if isinstance(x, dict) else None for x in new]
    by_name = {x.get("name"): x for x in old if isinstance(x, dict)}
    if None not in names and set(by_name) == set(names) and len(by_name) == len(old):
        return [in_order_of(by_name[n], x) for n, x in zip(names, new)]
    return [in_order_of(a, b) for a, b in zip(old, new)]


def upgrade(name: str, before: dict, now: dict, command: str) -> str:
    """A recording made before the --json contract (no "schema" key) holds each command's core result: turn a plain
    drift run's into the document it prints now, so that the comparison still covers every value; the other commands
    return typed results now, whose documents no longer come from a raw dict (record a new baseline for those).
    layers[] of evaluate and train-weak is new in the contract (counted from the masks, which the ticket comparison
    covers): when the old recording could not hold it, it is left out of the comparison, and the note says so."""
    doc = before.get("json")
    if not isinstance(doc, dict) or "schema" in doc:
        return ""
    sys.path.insert(0, str(ROOT))  # this tree's contract, as the runs use this tree's code
    from ticketcli.contract.schema import SCHEMAS

    if command != "drift":  # typed results now: their documents no longer come from a raw dict
        return " (recorded before the --json contract: not upgraded; record a new baseline)"
    from ticketcli.drift.result import named_layers  # a plain drift run's layers keyed by name become named lists

    upgraded = {"schema": SCHEMAS["drift"], **{k: v for k, v in named_layers(doc).items() if k != "schema"}}
    before["json"] = in_order_of(upgraded, now.get("json"))
    if before["json"].get("layers") == [] and now.get("json", {}).get("layers"):
        before["json"]["layers"] = now["json"]["layers"]
        return " (recorded before the --json contract, upgraded; layers[] is new)"
    return " (recorded before the --json contract, upgraded)"


def added_method_keys(before: dict, now: dict) -> str:
    """A ticket's `method` record may gain keys (a new option of its method, recorded at its default) without any
    mask or metric moving: when every key recorded before is still there with the same value, `before` takes
    now's record and the note names the new keys; any changed or dropped key is left for the comparison to show."""
    old_text = before.get("ticket", {}).get("meta", {}).get("method")
    new_text = now.get("ticket", {}).get("meta", {}).get("method")
    if not (isinstance(old_text, str) and isinstance(new_text, str)) or old_text == new_text:
        return ""
    old, new = json.loads(old_text), json.loads(new_text)
    added = sorted(set(new) - set(old))
    if not added or any(new.get(k) != v for k, v in old.items()):
        return ""
    before["ticket"]["meta"]["method"] = new_text
    return f" (the method record gained {', '.join(added)})"


def added_fields(before: dict, now: dict) -> str:
    """A --json document or a ticket's metadata may gain fields (a new measurement, a recorded choice) without any
    value recorded before moving: each field only `now` has is copied into `before`, and the note names them; a
    changed or dropped field is left for the comparison to show."""
    added: list[str] = []

    def walk(old, new, where: str) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for k in new:
                if k not in old:
                    old[k] = new[k]
                    added.append(f"{where}.{k}")
                else:
                    walk(old[k], new[k], f"{where}.{k}")
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new)):
                walk(a, b, f"{where}[{i}]")

    for part in ("json", "ticket"):
        walk(before.get(part), now.get(part), part)
    return f" (new fields: {', '.join(sorted(set(added))[:6])}{' ...' if len(set(added)) > 6 else ''})" if added else ""


def ticket_method(path: Path) -> dict | None:
    """The method record a ticket file stores (None when there is no such file)."""
    from safetensors import safe_open

    if not path.is_file():
        return None
    with safe_open(str(path), "pt") as f:
        return json.loads((f.metadata() or {}).get("method", "null"))


def ticket_digests(path: Path) -> tuple[str, str | None] | None:
    """A sweep ticket's masks digest as /1 records held it (sweep.records.legacy_masks_sha256) and as the ticket
    records it (what /2 records hold, as inspect reports it); None when there is no such file."""
    if not path.is_file():
        return None
    sys.path.insert(0, str(ROOT))
    from ticketcli.sweep.records import legacy_masks_sha256
    from ticketcli.ticketfile import ticket as ticket_io

    loaded = ticket_io.load(path)
    return legacy_masks_sha256(loaded.masks), loaded.masks_sha256


def pair_records(old, new, fix) -> None:
    """fix(o, n) for every pair of objects at the same place in `old` and `new`."""
    if isinstance(old, dict) and isinstance(new, dict):
        fix(old, new)
        for k in set(old) & set(new):
            pair_records(old[k], new[k], fix)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for a, b in zip(old, new):
            pair_records(a, b, fix)


def method_objects(name: str, before: dict, now: dict, all_before: dict, folder: Path) -> str:
    """A recording of the /1 documents of extract, evaluate, train-weak and sweep-k (method a bare name; extract
    without masks_sha256 and checkpoint; sweep-k records with sweep's own masks digest) compared with the /2 ones:
    a new value is taken only where it is what the baseline's own tickets record (their method record, their masks
    digest), so that every value is still compared; anything else is left for the comparison to show."""
    old, new = before.get("json"), now.get("json")
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return ""
    was, schema = str(old.get("schema")), str(new.get("schema"))
    if not (was.endswith("/1") and schema.endswith("/2") and was[:-2] == schema[:-2]):
        return ""
    old["schema"] = schema
    sweep = schema.startswith("ticket.sweep-k/")
    own = {"evaluate": name.removeprefix("evaluate-"), "train-weak": "edge-popup"}.get(schema[7:-2], name)
    meta = all_before.get(own, {}).get("ticket", {}).get("meta", {})
    top = json.loads(meta["method"]) if isinstance(meta.get("method"), str) else None

    def fix(o: dict, n: dict) -> None:
        path = Path(o["ticket"].replace("$DIR", str(folder))) if sweep and isinstance(o.get("ticket"), str) else None
        m = n.get("method")
        if isinstance(o.get("method"), str) and isinstance(m, dict) and m.get("name") == o["method"]:
            if m == (top if path is None else ticket_method(path)):
                o["method"] = m
        if path is not None and "masks_sha256" in o and o["masks_sha256"] != n.get("masks_sha256"):
            digests = ticket_digests(path)
            if digests is not None and (o["masks_sha256"], n.get("masks_sha256")) == digests:
                o["masks_sha256"] = n["masks_sha256"]

    pair_records(old, new, fix)
    added = ""
    if (
        schema == "ticket.extract/2"
        and "masks_sha256" not in old
        and new.get("masks_sha256") == meta.get("masks_sha256")
    ):
        old["masks_sha256"] = new["masks_sha256"]
        if "checkpoint" not in old and new.get("checkpoint") is None:  # no case extracts from --weights
            old["checkpoint"] = None
            added = "; masks_sha256 and checkpoint added"
    what = "records take their ticket's method record and masks digest" if sweep else "method is the ticket's record"
    return f" ({was} -> {schema}: {what}{added})"


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in ("record", "compare"):
        sys.exit(__doc__)
    folder = Path(sys.argv[2]).resolve()
    if sys.argv[1] == "record":
        views = record(folder)
        (folder / "golden.json").write_text(json.dumps(views, sort_keys=True))
        print(f"recorded {len(views)} cases in {folder}")
        return
    before = strip(json.loads((folder / "golden.json").read_text()), folder)
    with tempfile.TemporaryDirectory() as scratch:
        now = record(Path(scratch))
    bad = 0
    for name in before:
        note = upgrade(name, before[name], now.get(name, {}), cases(folder)[name][0])
        note += added_method_keys(before[name], now.get(name, {}))
        note += method_objects(name, before[name], now.get(name, {}), before, folder)
        note += added_fields(before[name], now.get(name, {}))
        rel = DRIFT_REL_TOL if cases(folder)[name][0] == "drift" else 0.0
        same = {part: equal(before[name].get(part), now.get(name, {}).get(part), rel) for part in ("json", "ticket")}
        ok = all(same.values())
        bad += not ok
        where = "" if ok else first_difference(before[name], now.get(name, {}))
        print(f"{name:20s} {('identical' + note) if ok else 'DIFFERENT at ' + str(where)}")
    print(f"{len(before) - bad}/{len(before)} cases identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
