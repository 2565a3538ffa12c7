"""The --json contract (docs/json.md): every command's document validates against its shipped JSON Schema, the same
number sits at the same path in every command (extract's metrics.test.accuracy is evaluate's, a sweep record's is
its ticket's), and a schema rejects a document whose keys moved."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import tomllib
import typer.main
from helpers import flags_for
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.contract.schema import SCHEMAS, SPARSITY_KEYS, schema_of
from ticketcli.runtime import threads as torch_threads
from ticketcli.sweep.result import SweepRecord, SweepResult, SweepSummary

jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "300", "--n-val", "100", "--quiet"]
MODEL = ["--model", "mlp:64-16-10", "--epochs", "2", "--batch-size", "128"]
EXTRACTS = {  # case -> extract flags: a score method, double-scoring, a weight-training baseline, random
    "augmented": ["--method", "augmented"],
    "edge-popup": ["--method", "edge-popup", "--sparsity", "0.7"],
    "imp": ["--method", "imp", "--imp-rounds", "2"],
    "random": ["--method", "random"],
}
DRIFT = ["drift", "--dataset", "digits", "--model", "mlp:64-16-16-10", "--batch-size", "64", "--probe-size", "100"]
DRIFT += ["--steps", "4", "--log-every", "2", "--quiet", "--json"]


def run(*args: str) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """Case -> (command, its --json document), for every command and the drift features."""
    d = tmp_path_factory.mktemp("contract")
    out: dict[str, tuple[str, dict]] = {}
    for case, flags in EXTRACTS.items():
        t = str(d / f"{case}.safetensors")
        args = flags_for(case, [*DATA, *MODEL, *flags])  # less the options the method does not read
        out[f"extract-{case}"] = ("extract", run("extract", *args, "--out", t, "--json"))
        out[f"evaluate-{case}"] = ("evaluate", run("evaluate", t, "--json", "--min-accuracy", "0"))
        out[f"inspect-{case}"] = ("inspect", run("inspect", t, "--json"))
    ticket = {case: str(d / f"{case}.safetensors") for case in EXTRACTS}
    out["compare"] = ("compare", run("compare", ticket["augmented"], ticket["random"], "--json"))
    out["compare-3"] = ("compare", run("compare", *(ticket[c] for c in ("augmented", "edge-popup", "imp")), "--json"))
    aug = str(d / "augmented.safetensors")
    weak = ["train-weak", aug, "--epochs", "2", "--dense-baseline", "--quiet", "--json"]
    out["train-weak"] = ("train-weak", run(*weak, "--out", str(d / "w.safetensors")))
    for fmt in ("csr", "masked"):
        out[f"export-{fmt}"] = ("export", run("export", aug, "--format", fmt, "--out", str(d / f"{fmt}.st"), "--json"))
    out["export-onnx"] = ("export", run("export", aug, "--format", "onnx", "--out", str(d / "m.onnx"), "--json"))
    bench = ["bench", "--batch", "1,16", "--repeats", "3", "--json"]
    out["bench"] = ("bench", run(*bench, "--forms", "sparse,bsr,2:4", aug))  # with ONNX: tests/test_bench.py
    out["bench-folder"] = (
        "bench",
        run(*bench, "--forms", "sparse,bsr", str(d / "augmented.safetensors"), ticket["random"]),
    )
    sweep = ["sweep-k", *DATA, *MODEL, "--seeds", "0", "--densities", "0.1,0.3", "--layerwise", "0"]
    out["sweep-k"] = ("sweep-k", run(*sweep, "--out-dir", str(d / "sweep"), "--json"))
    out["drift"] = ("drift", run(*DRIFT))
    out["drift-ticket"] = ("drift", run("drift", *DRIFT[5:], "--ticket", aug))
    out["drift-control"] = ("drift-control", run(*DRIFT, "--act-sparsity", "percentile", "--act-target", "0.6"))
    out["drift-relufy"] = ("drift-relufy", run(*DRIFT, "--relufy", "--from", "silu", "--to", "relu"))
    out["drift-tradeoff"] = ("drift-tradeoff", run(*DRIFT, "--tradeoff", "0.5,0.9"))
    return out


def json_commands() -> set[str]:
    """The commands that take --json."""
    group = typer.main.get_command(app)
    return {
        name
        for name, cmd in group.commands.items()  # type: ignore[attr-defined]
        if any("--json" in p.opts for p in cmd.params)
    }


def errors(command: str, doc: dict) -> list[str]:
    v = jsonschema.Draft202012Validator(schema_of(command))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in v.iter_errors(doc)]


CASES = [
    *(f"{c}-{m}" for c in ("extract", "evaluate", "inspect") for m in EXTRACTS),
    "train-weak",
    "export-csr",
    "export-masked",
    "export-onnx",
    "sweep-k",
    "drift",
    "drift-ticket",
    "drift-control",
    "drift-relufy",
    "drift-tradeoff",
    "compare",
    "compare-3",
    "bench",
    "bench-folder",
]


# --- every document validates ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_every_document_validates_against_its_schema(docs, case):
    command, doc = docs[case]
    assert doc["schema"] == SCHEMAS[command]
    assert errors(command, doc) == []


def test_every_json_command_has_a_schema_and_is_run_here(docs):
    def base(command: str) -> str:  # drift's feature documents are drift's
        return "drift" if command.startswith("drift") else command

    commands = json_commands()
    assert {"extract", "evaluate", "inspect", "train-weak", "sweep-k", "drift", "export"} <= commands
    assert commands <= {base(c) for c in SCHEMAS}
    assert commands <= {base(command) for command, _ in docs.values()} | {"list"}  # list: its own test below


def test_schemas_are_valid_2020_12_and_share_one_definition_of_each_shape():
    shared = ("split", "metrics", "sparsity", "layer", "layers", "method")
    first = schema_of("extract")["$defs"]
    for command in SCHEMAS:
        s = schema_of(command)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["properties"]["schema"] == {"const": SCHEMAS[command]}
        defs = s.get("$defs", {})  # each file is self-contained: it holds the shared shapes it uses, unchanged
        assert {k: defs[k] for k in shared if k in defs} == {k: first[k] for k in shared if k in defs}, command


def test_inspect_takes_exactly_the_shared_sparsity_keys_from_a_file():
    assert SPARSITY_KEYS == set(schema_of("inspect")["$defs"]["sparsity"]["properties"])


# --- the same number at the same path -------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(EXTRACTS))
def test_extract_evaluate_and_inspect_agree_path_for_path(docs, method):
    ex, ev, info = (docs[f"{c}-{method}"][1] for c in ("extract", "evaluate", "inspect"))
    for split in ("test", "val"):
        assert ev["metrics"][split] == ex["metrics"][split] == info["metrics"][split]
        assert ev["stored"]["metrics"][split]["accuracy"] == ex["metrics"][split]["accuracy"]
    for key in ("achieved", "requested"):
        assert ex["sparsity"][key] == ev["sparsity"][key] == info["sparsity"][key]
    assert ev["layers"] == ex["layers"]
    assert [{k: v for k, v in la.items() if k != "shape"} for la in info["layers"]] == ex["layers"]
    assert ex["device"] == info["device"] == "cpu" and ("trained" in ex) == (method == "imp") == ("trained" in info)


@pytest.mark.parametrize("method", list(EXTRACTS))
def test_method_masks_digest_and_checkpoint_read_the_same_everywhere(docs, method):
    """`method` is the ticket's method record (an object with its name and every option it read) in every
    document; extract reports the masks digest and checkpoint that inspect then reads from the written file."""
    ex, ev, info = (docs[f"{c}-{method}"][1] for c in ("extract", "evaluate", "inspect"))
    assert isinstance(ex["method"], dict) and ex["method"]["name"] == method
    assert ex["method"] == ev["method"] == info["method"]
    assert ex["masks_sha256"] == info["masks_sha256"] and len(ex["masks_sha256"]) == 64
    assert ex["checkpoint"] is None and info["checkpoint"] is None  # weights from the seed, not a file
    if method == "augmented":
        assert docs["train-weak"][1]["method"] == info["method"]
        assert ex["score_params"] == ex["method"]["score_params"]


def test_a_sweep_records_method_and_masks_digest_are_its_tickets(docs):
    for record in docs["sweep-k"][1]["records"]:
        info = run("inspect", record["ticket"], "--json")
        assert record["method"] == info["method"] and record["masks_sha256"] == info["masks_sha256"]
    assert {r["method"]["name"] for r in docs["sweep-k"][1]["records"]} >= {"edge-popup", "augmented"}


def test_a_bare_method_name_is_rejected(docs):
    for case, command in (("extract-random", "extract"), ("evaluate-random", "evaluate"), ("train-weak", "train-weak")):
        doc = docs[case][1]
        assert errors(command, moved(doc, lambda d: d.update(method=d["method"]["name"])))
    sweep = docs["sweep-k"][1]
    assert errors("sweep-k", moved(sweep, lambda d: d["records"][0].update(method=d["records"][0]["method"]["name"])))


@pytest.mark.parametrize("method", list(EXTRACTS))
def test_layers_add_up_to_the_global_sparsity(docs, method):
    ex = docs[f"extract-{method}"][1]
    kept, total = (sum(la[k] for la in ex["layers"]) for k in ("kept", "total"))
    assert (kept, total) == (ex["sparsity"]["kept"], ex["sparsity"]["total"])
    assert ex["sparsity"]["achieved"] == pytest.approx(1 - kept / total)
    for la in ex["layers"]:
        assert la["density"] == la["kept"] / la["total"] and la["sparsity"] == pytest.approx(1 - la["density"])


def test_train_weak_starts_from_what_evaluate_measures(docs):
    weak, ev = docs["train-weak"][1], docs["evaluate-augmented"][1]
    assert weak["masked"]["initial"]["metrics"] == ev["metrics"]
    assert weak["metrics"] == weak["masked"]["metrics"] and weak["layers"] == ev["layers"]
    assert weak["sparsity"]["achieved"] == pytest.approx(ev["sparsity"]["achieved"])
    assert weak["dense"]["initial"]["metrics"] != weak["masked"]["initial"]["metrics"]
    assert [p["epoch"] for p in weak["masked"]["curve"]] == [1, 2]
    best = max(weak["masked"]["curve"], key=lambda p: p["metrics"]["val"]["accuracy"])
    assert weak["masked"]["best"]["metrics"]["val"]["accuracy"] == best["metrics"]["val"]["accuracy"]


def test_export_counts_are_the_tickets(docs):
    ex = docs["extract-augmented"][1]
    csr = docs["export-csr"][1]
    assert csr["sparsity"]["kept"] == ex["sparsity"]["kept"]
    assert [(la["name"], la["nnz"]) for la in csr["layers"]] == [(la["name"], la["kept"]) for la in ex["layers"]]
    assert docs["export-masked"][1]["layers"] == []


def test_a_sweep_record_is_its_tickets_extract_document(docs):
    doc = docs["sweep-k"][1]
    record = next(r for r in doc["records"] if r["group"] == "edge-popup")
    ev = run("evaluate", record["ticket"], "--json")
    assert record["metrics"]["test"]["accuracy"] == ev["metrics"]["test"]["accuracy"]
    assert record["metrics"]["val"]["accuracy"] == ev["metrics"]["val"]["accuracy"]
    assert record["sparsity"] == {k: ev["sparsity"][k] for k in ("achieved", "requested")}


def test_a_saved_sweep_document_summarizes_again_to_itself(docs):
    doc = docs["sweep-k"][1]
    records = tuple(SweepRecord.from_document(r) for r in doc["records"])
    band = tuple(doc["settings"]["band"])
    again = SweepResult(records=records, resumed=(), summary=SweepSummary.of_records(records, band)).to_document()
    assert again["records"] == doc["records"]
    assert again["summary"] == doc["summary"]


def test_drift_layers_are_named_lists_in_every_run_and_the_summary(docs):
    for case in ("drift", "drift-ticket", "drift-control", "drift-relufy"):
        doc = docs[case][1]
        names = [la["name"] for la in doc["summary"]["layers"]]
        assert names and all([la["name"] for la in r["layers"]] == names for r in doc["runs"]), case
    sites = docs["drift-control"][1]["act_control"]["sites"]
    assert [s["name"] for s in sites] == ["layers.0", "layers.1"]
    for point in next(iter(docs["drift-tradeoff"][1]["models"].values()))["curve"]:
        assert point["sparsity"]["requested"] == point["target"]


def test_every_computing_command_reports_the_threads_it_ran_with(docs):
    """No --threads given: a run takes --threads auto's count, within this process's cores (extract's as its
    threads_auto says it chose); a sweep-k run and a --tradeoff run use one thread each (so that their numbers do
    not depend on --workers), at the top and in every record."""
    for case in CASES:
        command, doc = docs[case]
        if command in ("inspect", "compare"):  # read files, compute nothing
            assert "threads" not in doc
            continue
        if command in ("sweep-k", "drift-tradeoff"):
            assert doc["threads"] == 1, case
            continue
        assert 1 <= doc["threads"] <= torch_threads.cores(), case
        if command == "extract":
            auto = doc["threads_auto"]
            by_work = max(1, auto["work_per_step"] // torch_threads.GRAIN)
            assert doc["threads"] == max(1, min(auto["cores"] - round(auto["others_running"]), by_work)), case
    assert {r["threads"] for r in docs["sweep-k"][1]["records"]} == {1}
    assert docs["sweep-k"][1]["settings"]["threads"] == 1
    bad = moved(docs["extract-augmented"][1], lambda d: d.update(threads=0))
    assert errors("extract", bad)  # the schema holds threads to a count of at least one


def test_every_document_has_one_typed_result():
    """Each command's --json document is made by exactly one Result subclass (result.Result), none by a dict."""
    import ticketcli.drift.result
    import ticketcli.export.run
    import ticketcli.runs.compare
    import ticketcli.runs.evaluate
    import ticketcli.runs.evaluate_folder
    import ticketcli.runs.folder
    import ticketcli.runs.inspect
    import ticketcli.runs.summary
    import ticketcli.settings.listing
    import ticketcli.sweep.result
    import ticketcli.weak.run  # noqa: F401  (the modules that define the result classes)
    from ticketcli.contract.result import Result

    def subclasses(cls: type) -> list[type]:
        return [c for s in cls.__subclasses__() for c in (s, *subclasses(s))]

    typed = [c.COMMAND for c in subclasses(Result) if "COMMAND" in vars(c)]
    assert sorted(typed) == sorted(SCHEMAS), "a command without a typed result, or two for one"


# --- a schema catches a moved key -----------------------------------------------------------------------------


def moved(doc: dict, edit) -> dict:
    d = copy.deepcopy(doc)
    edit(d)
    return d


MOVES = {
    "test accuracy back at the top": lambda d: d.update(test=d["metrics"].pop("test")),
    "layers back in sparsity.per_layer": lambda d: d["sparsity"].update(per_layer=d.pop("layers")),
    "device back in metrics": lambda d: d["metrics"].update(device=d.pop("device")),
    "an accuracy above 1": lambda d: d["metrics"]["test"].update(accuracy=1.5),
    "no schema key": lambda d: d.pop("schema"),
    "another command's schema": lambda d: d.update(schema="ticket.evaluate/1"),
    "a layer without its name": lambda d: d["layers"][0].pop("name"),
}


@pytest.mark.parametrize("what", list(MOVES))
def test_the_extract_schema_rejects_a_moved_key(docs, what):
    doc = docs["extract-augmented"][1]
    assert errors("extract", doc) == []
    assert errors("extract", moved(doc, MOVES[what]))


def test_the_old_shapes_are_rejected(docs):
    ev = docs["evaluate-augmented"][1]
    old_eval = moved(ev, lambda d: d.update(test=d["metrics"]["test"], val=d["metrics"].pop("val")))
    assert errors("evaluate", old_eval)
    sweep = docs["sweep-k"][1]
    flat = SweepRecord.from_document(sweep["records"][0]).flat()
    assert errors("sweep-k", moved(sweep, lambda d: d["records"].__setitem__(0, flat)))
    weak = docs["train-weak"][1]
    assert errors("train-weak", moved(weak, lambda d: d["sparsity"].update(d.pop("weights_check"))))


def test_the_list_command_prints_its_schema():
    if "list" not in json_commands():
        pytest.skip("no `ticket list` command in this checkout")
    doc = run("list", "methods", "--json")
    assert doc["schema"] == "ticket.list/1" and errors("list", doc) == []


def test_list_schema_takes_the_agreed_shape():
    doc = {"schema": "ticket.list/1", "kind": "methods", "items": [{"name": "augmented", "description": "x"}]}
    assert errors("list", doc) == []
    assert errors("list", {**doc, "items": [{"name": "augmented"}]})


def test_schema_files_ship_in_the_package():
    root = Path(__file__).resolve().parent.parent
    shipped = {p.stem for p in (root / "ticketcli").glob("**/schemas/*.json")}
    assert shipped == {SCHEMAS[c].split("/")[0].removeprefix("ticket.") for c in SCHEMAS}
    package_data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "schemas/*.json" in package_data["ticketcli"]
