"""The Python API covers every command: `Ticket.export`, `tc.train_weak`, `tc.sweep_k`, `tc.drift` and `tc.inspect`
(and `Ticket.inspect`) each return the typed result whose document the command prints with `--json`, equal to it
apart from wall-clock times; each checks its destination before the work, and its errors name keywords. Only
public names (`import ticketcli as tc`) are used for the API; tiny models on digits keep each case a few seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from helpers import invoke

import ticketcli as tc
from ticketcli.contract.result import Result

REPO = Path(__file__).resolve().parent.parent
QUICK = dict(method="augmented", sparsity=0.5, epochs=1, seed=0, progress=False, device="cpu")
# the documents' wall-clock field (schemas/), and the threads --threads auto chose from the load when the run
# started (threads_auto: how): facts of the moment, which differ from run to run
CLOCK = {"wall_time_s", "threads", "threads_auto"}


def timeless(doc: object) -> object:
    """A document without its wall-clock times and auto's thread count, at any depth."""
    if isinstance(doc, dict):
        return {k: timeless(v) for k, v in doc.items() if k not in CLOCK}
    if isinstance(doc, list):
        return [timeless(v) for v in doc]
    return doc


def cli_json(*args: str) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def same_document(result: Result, *args: str) -> None:
    """The API's typed result and the command's --json document are one document, times aside, valid against the
    schema tc.schema_of names."""
    assert isinstance(result, Result)
    assert timeless(result.to_document()) == timeless(cli_json(*args))
    jsonschema.validate(result.to_document(), tc.schema_of(result.COMMAND))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("api") / "t.safetensors"
    tc.extract("mlp:64-16-10", "digits", out=path, **QUICK)
    return path


# ---- the destination is checked before the work, and the hint names the keyword ----


def test_extract_out_writes_the_ticket_and_an_existing_file_is_refused_before_any_epoch(saved, tmp_path):
    out = tmp_path / "mine.safetensors"
    t = tc.extract("mlp:64-16-10", "digits", out=out, **QUICK)
    assert t.path == out and tc.load(out).masks.keys() == t.masks.keys()
    before = out.read_bytes()
    epochs: list[dict] = []
    with pytest.raises(tc.UsageError, match="already exists") as caught:
        tc.extract("mlp:64-16-10", "digits", out=out, **{**QUICK, "epochs": 20, "progress": epochs.append})
    assert epochs == [] and out.read_bytes() == before  # refused before the first epoch, the file untouched
    assert caught.value.hint == "pass overwrite=True to overwrite it"
    again = tc.extract("mlp:64-16-10", "digits", out=out, overwrite=True, **{**QUICK, "seed": 1})
    assert tc.load(out).seed == again.seed == 1


def test_extract_out_keeps_a_file_that_appeared_during_the_run_and_writes_the_ticket_beside_it(tmp_path):
    out = tmp_path / "t.safetensors"

    def appears(stats: dict) -> None:
        out.write_bytes(b"theirs")

    with pytest.raises(tc.UsageError) as caught:
        tc.extract("mlp:64-16-10", "digits", out=out, **{**QUICK, "progress": appears})
    beside = [p for p in tmp_path.iterdir() if p != out]
    assert out.read_bytes() == b"theirs" and len(beside) == 1 and beside[0].name in str(caught.value)
    assert tc.load(beside[0]).seed == 0  # the run's ticket, whole


def test_extract_out_refuses_a_name_that_is_not_a_ticket_before_the_work(tmp_path):
    epochs: list[dict] = []
    with pytest.raises(tc.UsageError, match="safetensors") as caught:
        tc.extract("mlp:64-16-10", "digits", out=tmp_path / "t.pt", **{**QUICK, "progress": epochs.append})
    assert epochs == [] and not (tmp_path / "t.pt").exists()
    assert "--format masked --out t.pt`" in caught.value.hint  # a quoted command line is left as it runs


def test_ticket_save_names_overwrite_not_force(saved):
    with pytest.raises(tc.UsageError) as caught:
        tc.load(saved).save(saved)
    assert caught.value.hint == "pass overwrite=True to overwrite it"


@pytest.mark.parametrize("flag", ["force", "out_dir"])
def test_a_flag_name_is_mapped_to_its_keyword(flag):
    meant = {"force": "overwrite", "out_dir": "out_dir"}[flag]
    call = tc.train_weak if flag == "force" else tc.extract
    with pytest.raises(tc.UsageError, match=f"unknown keyword '{flag}'") as caught:
        call("t.safetensors", **{flag: True})
    if flag == "force":
        assert caught.value.hint.startswith(f"did you mean {meant}=?")


# ---- Ticket.export ----


def test_export_is_the_commands_document_and_refuses_an_existing_file_by_keyword(saved, tmp_path):
    t = tc.load(saved)
    out = tmp_path / "m.safetensors"
    result = t.export("masked", out)
    assert (result.format, result.out, result.kept) == ("masked", str(out), sum(int(m.sum()) for m in t.masks.values()))
    with pytest.raises(tc.UsageError, match="already exists") as caught:
        t.export("masked", out)
    assert caught.value.hint == "pass overwrite=True to overwrite it"
    again = t.export("masked", out, overwrite=True)
    r = invoke("export", str(saved), "--format", "masked", "--out", str(out), "--force", "--json", "--quiet")
    assert r.exit_code == 0, r.output
    assert timeless(again.to_document()) == timeless(json.loads(r.stdout))


def test_export_names_keywords_and_needs_a_saved_ticket(saved, tmp_path):
    t = tc.load(saved)
    with pytest.raises(tc.UsageError, match="with_preprocessing= applies to fmt='onnx' only"):
        t.export("masked", tmp_path / "m.safetensors", with_preprocessing=True)
    with pytest.raises(tc.UsageError, match="^fmt='masked' cannot be written to ") as caught:
        t.export("masked", tmp_path / "m.onnx")
    assert caught.value.hint.startswith("fmt='onnx' path='NAME.onnx'; ")  # the keywords with their values
    with pytest.raises(tc.UsageError, match="has no file") as caught:
        tc.extract("mlp:64-16-10", "digits", **QUICK).export("masked", tmp_path / "u.safetensors")
    assert "t.save(" in caught.value.hint
    with pytest.raises(tc.UsageError, match="unknown keyword 'format'"):
        t.export(format="masked", path=tmp_path / "x.safetensors")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_export_onnx_passes_with_preprocessing_through(saved, tmp_path):
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    t = tc.load(saved)
    raw = t.export("onnx", tmp_path / "raw.onnx", with_preprocessing=True)
    plain = t.export("onnx", tmp_path / "plain.onnx")
    doc, cli_doc = (
        raw.to_document(),
        cli_json(
            "export",
            str(saved),
            "--format",
            "onnx",
            "--out",
            str(tmp_path / "raw.onnx"),
            "--with-preprocessing",
            "--force",
        ),
    )
    assert timeless(doc) == timeless(cli_doc)
    assert doc["inputs"] != plain.to_document()["inputs"]  # the normalisation is in the graph, or not


# ---- train_weak, sweep_k, drift, inspect ----


def test_train_weak_is_the_commands_document(saved, tmp_path):
    result = tc.train_weak(saved, epochs=1, progress=False, device="cpu")
    same_document(result, "train-weak", str(saved), "--epochs", "1", "--device", "cpu", "--quiet")
    assert result.masked.final.test.n > 0 and result.dense is None


def test_train_weak_checks_its_outputs_before_the_work(saved, tmp_path):
    taken = tmp_path / "w.safetensors"
    taken.write_bytes(b"mine")
    epochs: list[dict] = []
    for where in ({"out": taken}, {"plot": taken}):
        with pytest.raises(tc.UsageError, match="already exists") as caught:
            tc.train_weak(saved, epochs=3, progress=epochs.append, **where)
        assert caught.value.hint == "pass overwrite=True to overwrite it"
    with pytest.raises(tc.UsageError, match="epochs= must be"):
        tc.train_weak(saved, epochs=0)
    assert epochs == [] and taken.read_bytes() == b"mine"
    result = tc.train_weak(saved, epochs=1, progress=False, out=taken, overwrite=True)
    assert result.out is not None and result.out.path == str(taken) and taken.stat().st_size == result.out.file_bytes


SWEEP = ["--model", "mlp:64-16-10", "--dataset", "digits", "--epochs", "1", "--n-extract", "200", "--n-val", "100"]


def test_sweep_k_is_the_commands_document(tmp_path):
    result = tc.sweep_k(
        "mlp:64-16-10", "digits", seeds=[0], densities=[0.5], layerwise=0, epochs=1, n_extract=200, n_val=100,
        progress=False,
    )  # fmt: skip
    same_document(result, "sweep-k", *SWEEP, "--seeds", "0", "--densities", "0.5", "--layerwise", "0", "--quiet")
    assert (result.settings.seeds, result.settings.densities, result.settings.layerwise) == ((0,), (0.5,), 0)


def test_sweep_k_plot_is_checked_before_the_work_and_drawn_after(tmp_path):
    png = tmp_path / "s.png"
    png.write_bytes(b"mine")
    done: list[dict] = []
    tiny = dict(seeds=[0], densities=[0.5], layerwise=0, epochs=1, n_extract=200, n_val=100)
    with pytest.raises(tc.UsageError, match="already exists") as caught:
        tc.sweep_k("mlp:64-16-10", "digits", plot=png, progress=done.append, **tiny)
    assert caught.value.hint == "pass overwrite=True to overwrite it" and done == [] and png.read_bytes() == b"mine"
    result = tc.sweep_k("mlp:64-16-10", "digits", plot=png, overwrite=True, progress=done.append, **tiny)
    assert result.plot == str(png) and png.read_bytes().startswith(b"\x89PNG") and len(done) == len(result.records)


def test_sweep_k_names_keywords(tmp_path):
    with pytest.raises(tc.UsageError, match="seeds= must be distinct"):
        tc.sweep_k(seeds=[0, 0])
    with pytest.raises(tc.UsageError, match="band= must be LO-HI"):
        tc.sweep_k(band=(0.9, 0.8))
    with pytest.raises(tc.UsageError, match="unknown keyword 'method'"):
        tc.sweep_k(method="snip")


DRIFT = ["--dataset", "digits", "--model", "mlp:64-16-16-10", "--batch-size", "64", "--probe-size", "100"]


def test_drift_is_the_commands_document():
    result = tc.drift(
        "mlp:64-16-16-10", "digits", steps=4, log_every=2, batch_size=64, probe_size=100, seeds=[0, 1],
        inputs="gaussian", progress=False,
    )  # fmt: skip
    args = ("--steps", "4", "--log-every", "2", "--seeds", "0,1", "--inputs", "gaussian", "--quiet")
    same_document(result, "drift", *DRIFT, *args)


def test_tc_drift_stays_the_function_when_the_drift_package_is_imported():
    import ticketcli.drift.command  # noqa: F401  (the import system names a subpackage on its parent)
    from ticketcli.drift import result

    assert tc.drift.__module__ == "ticketcli.api.drift" and tc.drift.__name__ == "drift"
    assert result.DriftResult.COMMAND == "drift"  # the package is still imported as modules are


def test_drift_of_a_ticket_and_its_plot_destination(saved, tmp_path):
    t = tc.load(saved)
    result = tc.drift(ticket=t, steps=2, log_every=1, batch_size=64, progress=False)
    same_document(result, "drift", "--ticket", str(saved), "--steps", "2", "--log-every", "1", "--batch-size", "64")
    with pytest.raises(tc.UsageError, match="already exists") as caught:
        tc.drift(ticket=t, steps=2, plot=saved)
    assert caught.value.hint == "pass overwrite=True to overwrite it"
    with pytest.raises(tc.UsageError, match="seeds= cannot be combined with ticket="):
        tc.drift(ticket=t, seeds=[1])


def test_inspect_a_ticket_and_a_folder(saved):
    one = tc.inspect(saved)
    same_document(one, "inspect", str(saved))
    assert one.to_document() == tc.load(saved).inspect().to_document()
    folder = tc.inspect(saved.parent)
    same_document(folder, "inspect", str(saved.parent))
    assert [row.ticket for row in folder.tickets] == [str(saved)]


@pytest.mark.slow
def test_inspect_and_schema_of_import_no_torch(saved):
    code = (
        "import sys, ticketcli as tc\n"
        f"r = tc.inspect({str(saved)!r})\n"
        "assert tc.schema_of('inspect')['type'] == 'object'\n"
        "assert 'torch' not in sys.modules, 'tc.inspect or tc.schema_of imported torch'\n"
        "print(r.density)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout) == tc.inspect(saved).density


def folders(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


@pytest.mark.slow
def test_train_weak_and_sweep_k_log_the_runs_the_commands_log(saved, tmp_path):
    pytest.importorskip("tensorboard", reason="the track extra is not installed")
    api, cli = tmp_path / "api", tmp_path / "cli"
    tc.train_weak(saved, epochs=1, progress=False, log_to=f"tensorboard:{api}")
    r = invoke("train-weak", str(saved), "--epochs", "1", "--quiet", "--log-to", f"tensorboard:{cli}")
    assert r.exit_code == 0, r.output
    tiny = dict(seeds=[0], densities=[0.5], layerwise=0, epochs=1, n_extract=200, n_val=100, progress=False)
    tc.sweep_k("mlp:64-16-10", "digits", log_to=[f"tensorboard:{api}"], **tiny)
    flags = ("--seeds", "0", "--densities", "0.5", "--layerwise", "0", "--quiet", "--log-to", f"tensorboard:{cli}")
    r = invoke("sweep-k", *SWEEP, *flags)
    assert r.exit_code == 0, r.output
    assert folders(api) == folders(cli) and len(folders(api)) > 2  # the same runs, by name
