"""`ticket drift --run-dir ... --log-to` across a resume: the run stopped part way (a real SIGTERM after a step) and
resumed with `--resume` is ONE tracked run in a real MLflow sqlite store and in real TensorBoard event files, whose
series hold every logged step exactly once; a recorded run the store no longer holds is one warning and a new run
(recorded in trackers.json), never a traceback."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.drift import keep

if not all(importlib.util.find_spec(m) for m in ("mlflow", "tensorboard")):  # found, not imported: seconds each
    pytest.skip("needs the track extra (pip install -e '.[track]')", allow_module_level=True)

runner = CliRunner()
STEPS, LOG_EVERY = 60, 10
ARGS = ["drift", "--dataset", "digits", "--model", "mlp:64-16-10", "--batch-size", "32", "--probe-size", "64"]
ARGS += ["--steps", str(STEPS), "--log-every", str(LOG_EVERY), "--checkpoint-every", "20"]
LOGGED = list(range(0, STEPS + 1, LOG_EVERY))

# each test starts MLflow's writer process (importing mlflow, creating a store) twice: seconds on a loaded machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def events(folder: Path) -> dict[str, list[int]]:
    """The steps of every scalar series of one TensorBoard run folder, as its reader sees them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [e.step for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def client(db: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{db}")


def again(tb: Path, db: Path) -> list[str]:
    """The --log-to flags the run was started with: a resume writes outside its run dir only where they are repeated."""
    return ["--log-to", f"tensorboard:{tb}", "--log-to", f"mlflow:sqlite:///{db}"]


def stopped(tmp_path: Path, monkeypatch, at: int) -> tuple[Path, Path, Path]:
    """A run dir whose run got SIGTERM right after step `at` (after its checkpoint at 20, before the next): its
    folder, TensorBoard root and MLflow store."""
    folder, tb, db = tmp_path / "run", tmp_path / "tb", tmp_path / "m.db"
    after_step = keep.RunKeeper.after_step

    def stop(self: keep.RunKeeper, step: int) -> None:
        after_step(self, step)
        if step == at:
            os.kill(os.getpid(), signal.SIGTERM)

    with monkeypatch.context() as m:
        m.setattr(keep.RunKeeper, "after_step", stop)
        args = [*ARGS, "--run-dir", str(folder), "--log-to", f"tensorboard:{tb}", "--log-to", f"mlflow:sqlite:///{db}"]
        r = runner.invoke(app, [*args, "--quiet"])
    assert r.exit_code == 143, r.output
    return folder, tb, db


def test_a_resumed_run_continues_its_tracked_runs_each_step_logged_once(tmp_path, monkeypatch):
    folder, tb, db = stopped(tmp_path, monkeypatch, at=35)  # measured 30, kept up to 20: the tracker has 0..20
    ids = json.loads((folder / "trackers.json").read_text())["ids"]
    r = runner.invoke(app, ["drift", "--resume", str(folder), *again(tb, db), "--json"])
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr and "drift step 20/60 restored" in r.stderr
    doc = json.loads(r.stdout)
    assert doc["runs"][0]["steps"] == LOGGED

    (run,) = tb.iterdir()  # one TensorBoard run, continued in its own folder
    assert ids[f"tensorboard:{tb}"] == run.name and sorted(p.name for p in run.iterdir() if p.is_dir()) == ["seed0"]
    assert len(list(run.glob("seed0/events.out.tfevents.*"))) == 2  # one event file per process, one run
    series = events(run / "seed0")
    sites = {site["name"] for site in doc["runs"][0]["layers"]}
    assert {tag.split("/")[0] for tag in series if "/" in tag} == sites and "loss" in series
    assert all(steps == LOGGED for steps in series.values()), series
    assert events(run)["loss"] == [STEPS]  # the parent's final metric, once

    c = client(db)
    runs = c.search_runs([c.get_experiment_by_name("ticket").experiment_id], max_results=100)
    (parent,) = [x for x in runs if "mlflow.parentRunId" not in x.data.tags]
    (child,) = [x for x in runs if x.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 2 and ids[f"mlflow:sqlite:///{db}"] == parent.info.run_id
    assert parent.info.status == "FINISHED" and child.info.status == "FINISHED" and child.info.run_name == "seed0"
    history = c.get_metric_history(child.info.run_id, "loss")
    assert sorted(m.step for m in history) == LOGGED
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(doc["runs"][0]["loss"])
    for key in child.data.metrics:
        assert sorted(m.step for m in c.get_metric_history(child.info.run_id, key)) == LOGGED, key
    assert [m.step for m in c.get_metric_history(parent.info.run_id, "loss")] == [STEPS]


def test_a_recorded_run_the_store_no_longer_holds_is_one_warning_and_a_new_run(tmp_path, monkeypatch):
    folder, tb, db = stopped(tmp_path, monkeypatch, at=25)
    gone = {f"tensorboard:{tb}": "gone", f"mlflow:sqlite:///{db}": "0" * 32}
    (folder / "trackers.json").write_text(json.dumps({"ids": gone}))
    r = runner.invoke(app, ["drift", "--resume", str(folder), *again(tb, db), "--quiet"])
    assert r.exit_code == 0, r.output
    named, lines = r.stderr.strip().splitlines()[:2], r.stderr.strip().splitlines()[2:]
    assert all(x.startswith("drift: --resume logs to its recorded --log-to ") for x in named), named
    assert len(lines) == 2 and all("is no longer in the store; logging to a new run" in x for x in lines), lines
    assert "Traceback" not in r.output
    ids = json.loads((folder / "trackers.json").read_text())["ids"]
    assert set(ids) == set(gone) and all(ids[k] != gone[k] for k in ids)
    assert (tb / ids[f"tensorboard:{tb}"]).is_dir()
    assert client(db).get_run(ids[f"mlflow:sqlite:///{db}"]).info.status == "FINISHED"
