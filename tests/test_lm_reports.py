"""Language models' tickets (--dataset text) in the commands that report several tickets at once: `evaluate DIR`
(bits per character per ticket, `--max-bits-per-char` as the folder's gate), `compare` (bits per character beside
accuracy, and their change) and `sweep-k` (bits per character per run, in its records, table, document and resume).
Every number is checked against its oracle: what the ticket stores and what `evaluate` re-measures."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
from helpers import TEXT_MODEL, write_text
from typer.testing import CliRunner

from ticketcli.api.schemas import schema_of
from ticketcli.cli.app import app
from ticketcli.ticketfile import ticket as ticket_io

jsonschema = pytest.importorskip("jsonschema")  # the [dev] extra

runner = CliRunner()
TEXT = ["--model", TEXT_MODEL, "--dataset", "text", "--epochs", "1", "--device", "cpu", "--quiet"]
IMAGE = ["--model", "mlp:64-16-10", "--dataset", "digits", "--n-extract", "200", "--n-val", "100", "--epochs", "1"]


def run(*args: str) -> dict:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def valid(command: str, doc: dict) -> None:
    errors = [e.message[:200] for e in jsonschema.Draft202012Validator(schema_of(command)).iter_errors(doc)]
    assert errors == [], errors


def stored_bits(path: Path, split: str = "test") -> float:
    """The oracle: the bits per character the ticket file stores for a split."""
    record = getattr(ticket_io.load(path).metrics, split)
    assert record is not None and record.bits_per_char is not None
    return float(record.bits_per_char)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A text, two language-model tickets of one model (edge-popup, seeds 0 and 1) in a folder, and an image
    ticket beside them in another folder with a copy of the first."""
    d = tmp_path_factory.mktemp("lm")
    text = write_text(d / "a.txt", 0)
    lm = d / "lm"
    for seed in (0, 1):
        out = lm / f"edge-popup-seed-{seed}.safetensors"
        args = ["extract", *TEXT, "--text", str(text), "--method", "edge-popup", "--sparsity", "0.8"]
        r = runner.invoke(app, [*args, "--seed", str(seed), "--out", str(out)])
        assert r.exit_code == 0, r.output
    mixed = d / "mixed"
    mixed.mkdir()
    r = runner.invoke(app, ["extract", *IMAGE, "--quiet", "--out", str(mixed / "image.safetensors")])
    assert r.exit_code == 0, r.output
    shutil.copy(lm / "edge-popup-seed-0.safetensors", mixed / "text.safetensors")
    return {"text": text, "lm": lm, "mixed": mixed, "a": lm / "edge-popup-seed-0.safetensors"}


# ---- evaluate DIR ----


def test_evaluate_folder_reports_each_tickets_bits_per_char(made) -> None:
    doc = run("evaluate", str(made["lm"]), "--json", "--device", "cpu", "--quiet")
    valid("evaluate-folder", doc)
    for t in doc["tickets"]:
        assert t["reproduced"]
        one = run("evaluate", t["ticket"], "--json", "--device", "cpu", "--quiet")
        assert t["metrics"] == one["metrics"]  # what evaluate TICKET reports, split for split
        assert t["metrics"]["test"]["bits_per_char"] == stored_bits(Path(t["ticket"]))
    r = runner.invoke(app, ["evaluate", str(made["lm"]), "--quiet"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "bits/char" in r.stdout
    for t in doc["tickets"]:
        assert f"{t['metrics']['test']['bits_per_char']:.4f}" in r.stdout


def test_evaluate_folder_csv_adds_bits_per_char_only_for_language_models(made) -> None:
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["evaluate", str(made["mixed"]), "--csv"]).stdout)))
    by_name = {Path(row["ticket"]).name: row for row in rows}
    assert by_name["image.safetensors"]["test_bits_per_char"] == ""
    text = by_name["text.safetensors"]
    assert float(text["test_bits_per_char"]) == stored_bits(made["a"])
    assert float(text["val_bits_per_char"]) == stored_bits(made["a"], "val")
    image = made["mixed"] / "image.safetensors"
    only = runner.invoke(app, ["evaluate", str(image), str(image), "--csv"]).stdout.splitlines()[0]
    assert "bits_per_char" not in only  # image tickets alone: the columns they always had


@pytest.mark.parametrize("margin, code", [(1e-9, 0), (-1e-9, 1)])
def test_max_bits_per_char_gates_a_folder(made, margin, code) -> None:
    """The folder's gate on the test bits per character: a bound just above the worst ticket passes them all
    (exit 0), one just below it fails that ticket (exit 1), as --min-accuracy does on a folder."""
    worst = max(stored_bits(p) for p in made["lm"].glob("*.safetensors"))
    bound = str(worst + margin)
    r = runner.invoke(app, ["evaluate", str(made["lm"]), "--max-bits-per-char", bound, "--json", "--quiet"])
    assert r.exit_code == code, r.output
    doc = json.loads(r.stdout)
    valid("evaluate-folder", doc)
    assert doc["gate"] == {"max_bits_per_char": float(bound), "passed": code == 0}
    failed = [t["ticket"] for t in doc["tickets"] if not t["gate"]["passed"]]
    assert failed == (
        [] if code == 0 else [str(p) for p in made["lm"].glob("*.safetensors") if stored_bits(p) == worst]
    )


def test_an_image_ticket_fails_the_bits_gate_of_a_folder(made) -> None:
    """Under --max-bits-per-char, an image model's ticket (no bits per character) fails the gate in one clause,
    its re-measured accuracy still shown; the language model's ticket beside it passes."""
    r = runner.invoke(app, ["evaluate", str(made["mixed"]), "--max-bits-per-char", "100", "--quiet"])
    assert r.exit_code == 1
    assert "FAILED" in r.stdout and "not a language model's ticket" in r.stdout
    assert "image.safetensors (gate)" in r.output  # the one error line names it
    doc = json.loads(
        runner.invoke(app, ["evaluate", str(made["mixed"]), "--max-bits-per-char", "100", "--json"]).stdout
    )
    gates = {Path(t["ticket"]).name: t["gate"]["passed"] for t in doc["tickets"]}
    assert gates == {"image.safetensors": False, "text.safetensors": True}


# ---- compare ----


def test_compare_shows_stored_bits_per_char_and_their_change(made) -> None:
    a, b = sorted(made["lm"].glob("*.safetensors"))
    doc = run("compare", str(a), str(b), "--json")
    valid("compare", doc)
    for ticket, path in zip(doc["tickets"], (a, b)):
        for split in ("test", "val"):
            stored = getattr(ticket_io.load(path).metrics, split)
            assert ticket["metrics"][split]["bits_per_char"] == stored.bits_per_char
            assert ticket["metrics"][split]["perplexity"] == stored.perplexity
    change = doc["pairs"][0]["change"]["bits_per_char"]
    assert change == {s: stored_bits(b, s) - stored_bits(a, s) for s in ("test", "val")}
    text = runner.invoke(app, ["compare", str(a), str(b)], env={"COLUMNS": "200"}).stdout
    assert "test bits/char (stored)" in text and f"{stored_bits(a):.4f}" in text and f"{change['test']:+.4f}" in text
    many = runner.invoke(app, ["compare", str(a), str(b), str(a)], env={"COLUMNS": "200"}).stdout
    assert "test bits/char" in many and f"{stored_bits(b):.4f}" in many


def test_compare_of_image_tickets_has_no_bits_per_char(made) -> None:
    image = str(made["mixed"] / "image.safetensors")
    doc = run("compare", image, image, "--json")
    assert "bits_per_char" not in doc["pairs"][0]["change"]
    assert all("bits_per_char" not in t["metrics"]["test"] for t in doc["tickets"])
    assert "bits/char" not in runner.invoke(app, ["compare", image, image, image]).stdout


def test_a_text_and_an_image_ticket_are_refused_in_one_line(made) -> None:
    """Their masks cover other parameters (an embedding and attention against an MLP's layers): no overlap to
    count, so compare refuses the pair in one line naming both models, as for any two architectures."""
    r = runner.invoke(app, ["compare", str(made["a"]), str(made["mixed"] / "image.safetensors")])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and "mlp:64-16-10" in lines[0] and TEXT_MODEL in lines[0]


# ---- sweep-k ----

SWEEP = ["sweep-k", *TEXT, "--seeds", "0", "--densities", "0.1,0.3", "--layerwise", "0"]


@pytest.fixture(scope="module")
def swept(made, tmp_path_factory) -> tuple[Path, dict]:
    """A language model's sweep in a folder (edge-popup at two densities, fixed, random and double-scoring) and its
    --json document."""
    out = tmp_path_factory.mktemp("sweep") / "runs"
    return out, run(*SWEEP, "--text", str(made["text"]), "--out-dir", str(out), "--json")


def lm_plan(made):
    from ticketcli.settings.resolve import build_extract_spec, merge_settings
    from ticketcli.sweep.plan import build_plan, double_scoring_methods

    settings = dict(method="edge-popup", dataset="text", text=str(made["text"]), model=TEXT_MODEL, epochs=1)
    base = build_extract_spec(merge_settings({**settings, "device": "cpu"}, None))
    return build_plan(base, seeds=(0,), densities=(0.1, 0.3), layerwise=0, double_scoring=double_scoring_methods())


def test_sweep_records_carry_their_tickets_bits_per_char(swept) -> None:
    out, doc = swept
    valid("sweep-k", doc)
    for record in doc["records"]:
        ticket = out / f"{record['id']}.safetensors"
        for split in ("test", "val"):
            assert record["metrics"][split]["bits_per_char"] == stored_bits(ticket, split)
        stored = json.loads((out / f"{record['id']}.json").read_text())["record"]
        assert stored["metrics"] == record["metrics"]  # the record file holds the document's record


def test_sweep_summary_of_bits_per_char(swept) -> None:
    """Each group's test bits per character are its runs' (mean, min, max); the oracles pick the lowest validation
    bits per character among the edge-popup sweep's runs (the unconstrained one among all of them)."""
    _, doc = swept
    records, summary = doc["records"], doc["summary"]
    sweep = [r for r in records if r["group"] == "edge-popup"]
    bits = [r["metrics"]["test"]["bits_per_char"] for r in sweep]
    stats = summary["edge_popup"]["metrics"]["test"]["bits_per_char"]
    assert (stats["n"], stats["min"], stats["max"]) == (len(sweep), min(bits), max(bits))
    assert stats["mean"] == pytest.approx(sum(bits) / len(bits))
    best = min(sweep, key=lambda r: (r["metrics"]["val"]["bits_per_char"], -r["sparsity"]["achieved"]))
    pick = summary["oracle_unconstrained"]["per_seed"]["0"]
    assert pick["id"] == best["id"] and pick["metrics"]["test"] == {
        "accuracy": best["metrics"]["test"]["accuracy"],
        "bits_per_char": best["metrics"]["test"]["bits_per_char"],
    }
    random = next(r for r in records if r["group"] == "random")
    assert (
        summary["methods"]["random"]["metrics"]["test"]["bits_per_char"]["mean"]
        == (random["metrics"]["test"]["bits_per_char"])
    )


def test_a_saved_language_model_sweep_summarizes_again_to_itself(swept) -> None:
    """A record read back from the document keeps its bits per character, and the summary made again from the
    records is the document's (its bits per character statistics and oracle picks included)."""
    from ticketcli.sweep.result import SweepRecord, SweepResult, SweepSummary

    _, doc = swept
    records = tuple(SweepRecord.from_document(r) for r in doc["records"])
    assert all(r.test_bits_per_char is not None for r in records)
    band = tuple(doc["settings"]["band"])
    again = SweepResult(records=records, resumed=(), summary=SweepSummary.of_records(records, band)).to_document()
    assert again["records"] == doc["records"] and again["summary"] == doc["summary"]


def test_sweep_table_and_plot_show_bits_per_char(made, swept, tmp_path) -> None:
    out, doc = swept
    png = tmp_path / "sweep.png"
    args = [*SWEEP, "--text", str(made["text"]), "--out-dir", str(out), "--plot", str(png)]
    r = runner.invoke(app, args, env={"COLUMNS": "80"})  # every run resumed from the folder: no training
    assert r.exit_code == 0, r.output
    assert "test bits/char" in r.stdout and "lowest validation bits per character" in r.stdout
    stats = doc["summary"]["edge_popup"]["metrics"]["test"]["bits_per_char"]
    assert f"{stats['min']:.4f} – {stats['max']:.4f}" in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines() if "│" in line)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_record_without_bits_per_char_resumes_with_its_tickets(made, swept) -> None:
    """A language model's record written before records had bits per character resumes: the sweep reads them from
    its ticket, as it reads the method record and the masks digest."""
    from ticketcli.sweep import records as sweep_records

    out, doc = swept
    task = lm_plan(made)[0]
    _, path = sweep_records.paths(out, task)
    original = path.read_text()
    stored = json.loads(original)
    try:
        for split in ("test", "val"):
            del stored["record"]["metrics"][split]["bits_per_char"]
        path.write_text(json.dumps(stored))
        record, why = sweep_records.finished(out, task)
        assert why is None and record is not None
        assert record.test_bits_per_char == stored_bits(out / f"{task.id}.safetensors")
        assert record.to_dict() == next(r for r in doc["records"] if r["id"] == task.id)
    finally:
        path.write_text(original)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda m: m["test"].update(bits_per_char="4.2"), "test_bits_per_char is not a"),
        (lambda m: m["test"].update(bits_per_char=-1.0), "negative"),
        (lambda m: m["val"].pop("bits_per_char"), "not a sweep-k record's"),
        (lambda m: m["test"].update(bits_per_char=m["test"]["bits_per_char"] + 0.5), "differ from its record's"),
        (lambda m: m["test"].update(bits_per_char=[1.0]), "test_bits_per_char is not a"),
    ],
)
def test_a_hostile_bits_per_char_is_one_line_and_recomputed(made, swept, change, words) -> None:
    from ticketcli.sweep import records as sweep_records

    out, _ = swept
    task = lm_plan(made)[0]
    _, path = sweep_records.paths(out, task)
    original = path.read_text()
    stored = json.loads(original)
    change(stored["record"]["metrics"])
    try:
        path.write_text(json.dumps(stored))
        record, why = sweep_records.finished(out, task)
        assert record is None and why is not None and len(why.splitlines()) == 1
        assert words in why, why
    finally:
        path.write_text(original)


def test_an_image_sweeps_record_has_no_bits_per_char() -> None:
    from helpers import full_record

    hand_made = {"id": "r0", "seed": 0, "group": "random", "config": "random", "fixed": False}
    record = full_record({**hand_made, "val_accuracy": 0.5, "test_accuracy": 0.5, "achieved_sparsity": 0.9})
    doc = record.to_dict()
    assert doc["metrics"] == {"val": {"accuracy": 0.5}, "test": {"accuracy": 0.5, "loss": 1.0}}
    assert "test_bits_per_char" not in record.flat()


# ---- --aggregate (inspect DIR, evaluate DIR, compare) ----


@pytest.mark.parametrize("command", ["inspect", "evaluate", "compare"])
def test_aggregate_over_seeds_has_bits_per_char(made, command) -> None:
    """The two seeds' group: the mean and sample std of their stored (inspect, compare) or re-measured (evaluate,
    reproduced exactly) test bits per character; an image model's group has none."""
    tickets = sorted(made["lm"].glob("*.safetensors"))
    image = made["mixed"] / "image.safetensors"
    paths = [*map(str, tickets), str(image)] if command != "compare" else list(map(str, tickets))
    doc = run(
        command, *paths, "--aggregate", "--json", *(["--device", "cpu", "--quiet"] if command == "evaluate" else [])
    )
    valid({"inspect": "inspect-folder", "evaluate": "evaluate-folder"}.get(command, command), doc)
    groups = {g["model"]: g for g in doc["aggregate"]}
    bits = [stored_bits(t) for t in tickets]
    lm = groups[next(m for m in groups if m.startswith("gpt-nano"))]["bits_per_char"]["test"]
    assert lm["n"] == 2 and lm["mean"] == pytest.approx(sum(bits) / 2)
    assert lm["std"] == pytest.approx(abs(bits[0] - bits[1]) / 2**0.5)
    if command != "compare":
        assert "bits_per_char" not in groups["mlp:64-16-10"]
        header = runner.invoke(app, [command, *paths, "--aggregate", "--csv"]).stdout.splitlines()[0]
        assert "test_bits_per_char_mean" in header
    text = runner.invoke(app, [command, *paths, "--aggregate"], env={"COLUMNS": "200"}).stdout
    assert f"{lm['mean']:.4f} ± {lm['std']:.4f}" in text


def test_inspect_folder_table_shows_stored_bits_per_char(made) -> None:
    text = runner.invoke(app, ["inspect", str(made["mixed"])], env={"COLUMNS": "200"}).stdout
    assert "bits/char" in text and f"{stored_bits(made['a']):.4f}" in text
    image = str(made["mixed"] / "image.safetensors")
    assert "bits/char" not in runner.invoke(app, ["inspect", image, image], env={"COLUMNS": "200"}).stdout


# ---- trackers (--log-to) ----


def scalars(folder: Path) -> dict[str, float]:
    """The last value of every scalar series in one TensorBoard run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: acc.Scalars(tag)[-1].value for tag in acc.Tags()["scalars"]}


@pytest.mark.slow  # an extraction and a sweep of their own, each logged and read back
def test_trackers_log_bits_per_char_of_a_ticket_and_of_every_sweep_run(made, tmp_path) -> None:
    pytest.importorskip("tensorboard")
    tb = tmp_path / "tb"
    args = ["extract", *TEXT, "--text", str(made["text"]), "--method", "edge-popup", "--sparsity", "0.5"]
    doc = run(*args, "--out", str(tmp_path / "t.safetensors"), "--log-to", f"tensorboard:{tb}", "--json")
    (folder,) = tb.iterdir()
    logged = scalars(folder)
    for split in ("test", "val"):
        assert logged[f"{split}/bits_per_char"] == pytest.approx(doc["metrics"][split]["bits_per_char"], rel=1e-6)
    sweep_tb = tmp_path / "sweep-tb"
    sweep = ["sweep-k", *TEXT, "--text", str(made["text"]), "--seeds", "0", "--densities", "0.5", "--layerwise", "0"]
    doc = run(*sweep, "--log-to", f"tensorboard:{sweep_tb}", "--json")
    (parent,) = sweep_tb.iterdir()
    for record in doc["records"]:
        logged = scalars(parent / record["id"])
        assert logged["test_bits_per_char"] == pytest.approx(record["metrics"]["test"]["bits_per_char"], rel=1e-6)
        assert logged["val_bits_per_char"] == pytest.approx(record["metrics"]["val"]["bits_per_char"], rel=1e-6)


@pytest.mark.parametrize(
    "args",
    [
        ["evaluate", "{lm}"],
        ["evaluate", "{mixed}", "--max-bits-per-char", "100"],
        ["inspect", "{mixed}"],
        ["inspect", "{lm}", "--aggregate"],
        ["compare", "{a}", "{b}"],
        ["compare", "{a}", "{b}", "{a}"],
    ],
)
def test_language_model_tables_fit_80_columns(made, args) -> None:
    a, b = sorted(made["lm"].glob("*.safetensors"))
    names = {"lm": made["lm"], "mixed": made["mixed"], "a": a, "b": b}
    r = runner.invoke(app, [x.format(**names) for x in args] + ["--quiet"], env={"COLUMNS": "80"})
    assert r.exit_code in (0, 1), r.output
    assert "…" not in r.stdout and "bits/char" in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines() if any(c in line for c in "┃│━─")), r.stdout
