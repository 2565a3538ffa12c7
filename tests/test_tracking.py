"""--log-to: what extract, train-weak, sweep-k and drift write to TensorBoard and MLflow, read back with the trackers'
own readers (TensorBoard's EventAccumulator and HTTP API, MlflowClient on a sqlite store); a tracker that fails is
one warning and the run goes on; a bad destination or a missing extra is one error line (exit 2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.settings.track import LOG_TO, parse_destination
from ticketcli.track import base as track

runner = CliRunner()
DATA = ["--dataset", "digits", "--n-extract", "200", "--n-val", "100"]
EPOCHS = 3
TINY = [*DATA, "--model", "mlp:64-16-16-10", "--epochs", str(EPOCHS), "--batch-size", "64"]
LAYERS = ["layers.0.weight", "layers.1.weight", "layers.2.weight"]


def events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of one TensorBoard run folder: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def hparams(folder: Path) -> dict[str, object]:
    """The hyperparameters the hparams plugin reads from a run folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(folder))
    acc.Reload()
    content = acc.SummaryMetadata("_hparams_/session_start_info").plugin_data.content
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in info.hparams.items()}


def client(db: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{db}")


def mlflow_runs(db: Path) -> list:
    c = client(db)
    experiment = c.get_experiment_by_name("ticket")
    return c.search_runs([experiment.experiment_id], max_results=1000)


def invoke(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r


# destinations ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["wandb:x", "tensorboard", "tensorboard:", "mlflow: ", "mlflow:http://host:5000", "mlflow:sqlite://rel.db", "x"],
)
def test_a_bad_destination_is_refused(text):
    with pytest.raises(UsageError):
        parse_destination(text)


def test_destinations_parse_and_normalise():
    assert parse_destination("tensorboard:runs/a").target == "runs/a"
    assert parse_destination("mlflow:sqlite:////tmp/m.db").target == "sqlite:////tmp/m.db"
    assert parse_destination("mlflow:store").kind == "mlflow"
    assert LOG_TO.check("tensorboard:a") == ("tensorboard:a",)  # a TOML string
    assert LOG_TO.check(["tensorboard:a", "mlflow:b"]) == ("tensorboard:a", "mlflow:b")  # a TOML array
    for bad in (["tensorboard:a", "tensorboard:a"], ["tensorboard:a"] * 9, 3, [["tensorboard:a"]]):
        with pytest.raises(UsageError):
            LOG_TO.check(bad)


def test_a_bad_destination_is_one_error_line(tmp_path):
    r = runner.invoke(app, ["extract", *TINY, "--out", str(tmp_path / "t.safetensors"), "--log-to", "wandb:x"])
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: --log-to must be tensorboard:DIR")
    assert not (tmp_path / "t.safetensors").exists()


def test_a_bad_config_value_is_one_error_line(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('log_to = ["mlflow:http://server"]\n')
    r = runner.invoke(app, ["sweep-k", *TINY, "--seeds", "0", "--config", str(config)])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0


def test_a_missing_extra_is_one_error_line_naming_it(tmp_path, monkeypatch):
    import importlib.util

    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else find(name, *a))
    r = runner.invoke(app, ["extract", *TINY, "--out", str(tmp_path / "t.safetensors"), "--log-to", "mlflow:m"])
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and "ticketcli[track]" in r.stderr and "mlflow" in r.stderr


# a tracker that fails ---------------------------------------------------------------------------------------------


class Failing:
    """A RunLog whose scalars fail from the second call on."""

    def __init__(self) -> None:
        self.calls = 0

    def scalars(self, step, values):
        self.calls += 1
        if self.calls > 1:
            raise OSError("disk full")

    def close(self, status):
        self.closed = status


class Recording:
    def __init__(self) -> None:
        self.steps: list[int] = []

    def scalars(self, step, values):
        self.steps.append(step)

    def close(self, status):
        self.closed = status


def test_a_failing_tracker_is_one_warning_and_the_others_go_on():
    warnings: list[str] = []
    failing, recording = Failing(), Recording()
    runs = [track.Guarded("a", warnings.append), track.Guarded("b", warnings.append)]
    runs[0].log, runs[1].log = failing, recording
    tracking = track.Tracking(track.Writer(), runs)
    for step in range(1, 5):
        tracking.scalars(step, {"loss": 1.0})
    tracking.close("FINISHED")
    assert tracking.writer.stop(60)
    assert warnings == ["--log-to a: OSError: disk full; the run goes on without it"]
    assert failing.calls == 2 and not hasattr(failing, "closed")  # left alone after its error
    assert recording.steps == [1, 2, 3, 4] and recording.closed == "FINISHED"


@pytest.mark.slow
def test_trackers_that_cannot_write_are_warnings_and_the_run_goes_on(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "m.db").write_text("not a folder")  # where the store's folder would be made
    args = ["extract", *TINY, "--out", str(tmp_path / "t.safetensors"), "--quiet", "--json"]
    args += ["--log-to", f"mlflow:sqlite:///{tmp_path / 'store' / 'm.db' / 'x.db'}"]
    r = invoke(args)
    assert json.loads(r.stdout)["metrics"]["test"]["n"] > 0 and (tmp_path / "t.safetensors").exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and all(line.startswith("warning: --log-to ") for line in lines), lines
    assert all("the run goes on without it" in line for line in lines)


def test_a_destination_that_is_not_a_store_of_its_tracker_is_one_line_before_any_work(tmp_path):
    """A file where a TensorBoard folder should be, a file that is not an MLflow store: refused (exit 2), not
    written."""
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "bad.db").write_bytes(b"not a sqlite database" * 100)
    for dest in (f"tensorboard:{tmp_path / 'file'}", f"mlflow:sqlite:///{tmp_path / 'bad.db'}"):
        r = runner.invoke(app, ["extract", *TINY, "--out", str(tmp_path / "t.safetensors"), "--log-to", dest])
        assert r.exit_code == 2 and r.stderr.startswith(f"error: --log-to {dest}: "), r.output
        assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "t.safetensors").exists()
    assert (tmp_path / "bad.db").read_bytes() == b"not a sqlite database" * 100


# extract -----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """One double-scoring extraction logged to both trackers, the tensorboard one from a config file."""
    d = tmp_path_factory.mktemp("extract")
    config = d / "c.toml"
    config.write_text(f'log_to = ["tensorboard:{d / "tb"}", "mlflow:sqlite:///{d / "m.db"}"]\n')
    out = d / "t.safetensors"
    r = invoke(["extract", *TINY, "--method", "augmented", "--out", str(out), "--config", str(config), "--json"])
    args = ["extract", *TINY, "--method", "edge-popup", "--out", str(d / "t2.safetensors"), "--quiet", "--json"]
    r2 = invoke([*args, "--config", str(config)])
    return d, json.loads(r.stdout), r, json.loads(r2.stdout), r2


@pytest.mark.slow
def test_extract_writes_every_tag_at_every_step(extracted):
    d, doc, *_ = extracted
    folders = sorted(p.name for p in (d / "tb").iterdir())
    # one folder per run, named from method, model, seed and keep density
    assert folders == ["augmented_mlp-64-16-16-10_seed0_d0.1", "edge-popup_mlp-64-16-16-10_seed0_d0.1"]
    series = events(d / "tb" / folders[0])
    per_epoch = ["train/loss", "train/accuracy", "train/sparsity", *(f"train/density/{n}" for n in LAYERS)]
    final = ["test/accuracy", "test/loss", "val/accuracy", "val/loss", "sparsity/achieved", "sparsity/requested"]
    final += [f"density/{n}" for n in LAYERS] + ["aux_share"] + [f"aux_share/{n}" for n in LAYERS]
    assert sorted(series) == sorted(per_epoch + final)
    for tag in per_epoch:
        assert [s for s, _ in series[tag]] == list(range(1, EPOCHS + 1)), tag
    for tag in final:
        assert [s for s, _ in series[tag]] == [EPOCHS], tag
    # the values are the run's own: the final ones as --json printed them
    assert series["test/accuracy"][0][1] == pytest.approx(doc["metrics"]["test"]["accuracy"])
    assert series["sparsity/achieved"][0][1] == pytest.approx(doc["sparsity"]["achieved"])
    assert series["aux_share"][0][1] == pytest.approx(doc["sparsity"]["aux_share"])
    for layer in doc["layers"]:
        assert series[f"density/{layer['name']}"][0][1] == pytest.approx(layer["density"])
    hp = hparams(d / "tb" / folders[0])
    assert hp["method.name"] == "augmented" and hp["method.lr"] == pytest.approx(doc["method"]["lr"])
    assert hp["model"] == doc["model"] and hp["data.dataset"] == "digits"


@pytest.mark.slow
def test_extract_logs_params_metrics_tags_and_the_ticket_to_mlflow(extracted):
    d, doc, _, doc2, r2 = extracted
    runs = {r.info.run_name: r for r in mlflow_runs(d / "m.db")}
    run = runs["augmented_mlp-64-16-16-10_seed0_d0.1"]
    assert run.info.status == "FINISHED"
    assert run.data.params["method.name"] == "augmented" and run.data.params["method.epochs"] == str(EPOCHS)
    assert run.data.params["seed"] == "0" and run.data.params["model"] == doc["model"]
    assert run.data.tags["masks_sha256"] == doc["masks_sha256"] and run.data.tags["schema"] == doc["schema"]
    c = client(d / "m.db")
    history = c.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, EPOCHS + 1))
    assert run.data.metrics["test/accuracy"] == pytest.approx(doc["metrics"]["test"]["accuracy"])
    artifacts = [a.path for a in c.list_artifacts(run.info.run_id)]
    assert artifacts == ["t.safetensors"]
    local = Path(c.download_artifacts(run.info.run_id, "t.safetensors", str(d / "download")))
    assert local.read_bytes() == (d / "t.safetensors").read_bytes()
    assert runs["edge-popup_mlp-64-16-16-10_seed0_d0.1"].data.tags["masks_sha256"] == doc2["masks_sha256"]
    assert r2.stderr == ""  # --quiet --json: the trackers add nothing to stderr (mlflow's own log lines included)


@pytest.mark.slow
def test_the_api_extract_logs_to_every_tracker_log_to_names(tmp_path):
    """tc.extract(log_to=...) takes what --log-to takes and logs the same series and final metrics."""
    import ticketcli as tc

    db = tmp_path / "m.db"
    t = tc.extract(
        "mlp:64-16-10",
        "digits",
        epochs=2,
        n_extract=200,
        n_val=100,
        progress=False,
        device="cpu",
        log_to=[f"tensorboard:{tmp_path / 'tb'}", f"mlflow:sqlite:///{db}"],
    )
    (run,) = mlflow_runs(db)
    saved = tc.load(t.save(tmp_path / "t.safetensors"))
    assert run.info.status == "FINISHED" and run.data.tags["masks_sha256"] == saved.metadata["masks_sha256"]
    assert [m.step for m in client(db).get_metric_history(run.info.run_id, "train/loss")] == [1, 2]
    (folder,) = (tmp_path / "tb").iterdir()
    assert [step for step, _ in events(folder)["train/loss"]] == [1, 2]
    with pytest.raises(tc.UsageError, match="log_to= must be tensorboard:DIR"):
        tc.extract("mlp:64-16-10", log_to="wandb:x", progress=False)


def test_a_rerun_gets_a_folder_of_its_own(tmp_path):
    from ticketcli.track.tb import unique

    (tmp_path / "run").mkdir()
    (tmp_path / "run_2").mkdir()
    assert unique(tmp_path / "run") == tmp_path / "run_3" and unique(tmp_path / "new") == tmp_path / "new"


@pytest.mark.slow
def test_a_folder_store_and_the_steps_of_scalars_read_back(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from ticketcli.track.info import RunInfo

    warnings: list[str] = []
    with track.tracked(
        [parse_destination(f"mlflow:{tmp_path}/store")], lambda: RunInfo("r", {"a": 1}), warnings.append
    ) as t:
        assert t is not None
        for step in (1, 2, 3):
            t.scalars(step, {"x": step / 10})
        t.finish(3, {"y": 2.0}, {"b": "c"})
    assert warnings == []
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a folder store only when allowed
    c = MlflowClient((tmp_path / "store").as_uri())
    (run,) = c.search_runs([c.get_experiment_by_name("ticket").experiment_id])
    assert run.data.params == {"a": "1", "b": "c"} and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in c.get_metric_history(run.info.run_id, "x")] == [(1, 0.1), (2, 0.2), (3, 0.3)]


@pytest.mark.slow
def test_an_interrupted_run_keeps_every_logged_metric(tmp_path, monkeypatch):
    """Ctrl-C before the store has even opened (importing mlflow and creating its tables takes seconds): every
    scalar logged so far still reaches the store, and the run is KILLED, not left RUNNING."""
    from ticketcli.track import mlflow_process
    from ticketcli.track.info import RunInfo

    command = mlflow_process.writer_command

    def slow():  # a writer that takes longer to open its store than an interrupted run waits for its writes
        python, flag, code, *args = command()
        return [python, flag, f"import time; time.sleep({track.WAIT_INTERRUPTED_S + 1}); {code}", *args]

    monkeypatch.setattr(track, "WAIT_INTERRUPTED_S", 2.0)
    monkeypatch.setattr(mlflow_process, "writer_command", slow)
    db = tmp_path / "m.db"
    warnings: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with track.tracked([parse_destination(f"mlflow:sqlite:///{db}")], lambda: RunInfo("r"), warnings.append) as t:
            assert t is not None
            for step in range(1, 51):
                t.scalars(step, {"x": step / 10, "y": -step})
            raise KeyboardInterrupt
    assert warnings == []
    (run,) = mlflow_runs(db)
    assert run.info.status == "KILLED"
    for name, scale in (("x", 0.1), ("y", -1)):
        history = client(db).get_metric_history(run.info.run_id, name)
        assert sorted((m.step, m.value) for m in history) == [(i, pytest.approx(i * scale)) for i in range(1, 51)]


def remote(tracking) -> object:
    """The writer process behind the (only) MLflow run of `tracking`, once its store is open."""
    assert tracking.ready.wait(120)
    return tracking.runs[0].log.channel.proc


@pytest.mark.slow
def test_the_training_process_never_imports_mlflow_and_a_writer_left_alone_still_writes(tmp_path):
    """mlflow lives in the writer process only; when the training process ends without closing its run (killed),
    the writer still writes every metric it was sent and closes the run as KILLED."""
    db = tmp_path / "m.db"
    code = f"""
import os, sys
from ticketcli.settings.track import parse_destination
from ticketcli.track import base as track
from ticketcli.track.info import RunInfo
t = track.open_tracking([parse_destination("mlflow:sqlite:///{db}")], RunInfo("r", {{"a": 1}}), print)
for step in range(1, 31):
    t.scalars(step, {{"x": step / 10}})
assert t.ready.wait(120)
t.writer.submit(lambda: print("sent", "mlflow" in sys.modules, flush=True))
t.writer.stop(60)
os._exit(0)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(track.__file__).parents[2]), *sys.path])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0 and done.stdout == "sent False\n", (done.stdout, done.stderr)
    deadline, runs = time.monotonic() + 120, []
    while time.monotonic() < deadline:
        runs = mlflow_runs(db) if db.exists() else []
        if runs and runs[0].info.status != "RUNNING":
            break
        time.sleep(0.5)
    (run,) = runs
    assert run.info.status == "KILLED" and run.data.params == {"a": "1"}
    history = client(db).get_metric_history(run.info.run_id, "x")
    assert sorted((m.step, m.value) for m in history) == [(i, pytest.approx(i / 10)) for i in range(1, 31)]


@pytest.mark.slow
def test_a_dead_writer_is_one_warning_not_a_hang(tmp_path):
    from ticketcli.track.info import RunInfo

    warnings: list[str] = []
    t0 = time.monotonic()
    with track.tracked(
        [parse_destination(f"mlflow:sqlite:///{tmp_path / 'm.db'}")], lambda: RunInfo("r"), warnings.append
    ) as t:
        assert t is not None
        proc = remote(t)
        proc.kill()
        proc.wait()
        for step in range(1, 20):
            t.scalars(step, {"x": 1.0})
        t.finish(20, {"y": 1.0}, {"b": 2})
    assert time.monotonic() - t0 < 100
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("--log-to mlflow:sqlite:///") and "exit code -9" in warnings[0]
    assert warnings[0].endswith("; the run goes on without it")


@pytest.mark.slow
def test_the_writer_ignores_a_ctrl_c_the_training_process_decides(tmp_path):
    """A Ctrl-C reaches the writer only if sent to it: it goes on, and the run ends as the training process says."""
    import signal

    from ticketcli.track.info import RunInfo

    db = tmp_path / "m.db"
    warnings: list[str] = []
    with track.tracked([parse_destination(f"mlflow:sqlite:///{db}")], lambda: RunInfo("r"), warnings.append) as t:
        assert t is not None
        t.scalars(1, {"x": 1.0})
        os.kill(remote(t).pid, signal.SIGINT)
        time.sleep(0.5)
        t.scalars(2, {"x": 2.0})
    assert warnings == []
    (run,) = mlflow_runs(db)
    assert run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client(db).get_metric_history(run.info.run_id, "x")] == [(1, 1.0), (2, 2.0)]


# train-weak, drift, sweep-k -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_weak_logs_both_runs_curves(extracted, tmp_path):
    d, doc, *_ = extracted
    tb = tmp_path / "tb"
    args = ["train-weak", str(d / "t.safetensors"), "--epochs", "2", "--batch-size", "64", "--dense-baseline"]
    out = json.loads(invoke([*args, "--quiet", "--json", "--log-to", f"tensorboard:{tb}"]).stdout)
    (folder,) = tb.iterdir()
    assert folder.name == "weak_augmented_mlp-64-16-16-10_seed0_d0.1"
    series = events(folder)
    for run in ("masked", "dense"):
        for tag in ("train_loss", "train_accuracy", "val_accuracy", "val_loss"):
            assert [s for s, _ in series[f"{run}/{tag}"]] == [1, 2]
        assert [s for s, _ in series[f"{run}/test_accuracy"]] == [0, 2]  # before and after training
        assert series[f"{run}/test_accuracy"][1][1] == pytest.approx(out[run]["metrics"]["test"]["accuracy"])
        assert [s for s, _ in series[f"{run}/gain"]] == [2]


@pytest.mark.slow
def test_drift_logs_every_sites_series_per_seed(tmp_path):
    tb, db = tmp_path / "tb", tmp_path / "m.db"
    args = [
        "drift",
        "--dataset",
        "digits",
        "--model",
        "mlp:64-16-16-10",
        "--seeds",
        "0,1",
        "--steps",
        "4",
        "--log-every",
        "2",
    ]
    args += ["--batch-size", "64", "--log-to", f"tensorboard:{tb}", "--log-to", f"mlflow:sqlite:///{db}"]
    doc = json.loads(invoke([*args, "--quiet", "--json"]).stdout)
    (folder,) = tb.iterdir()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["seed0", "seed1"]
    steps = doc["runs"][0]["steps"]
    series = events(folder / "seed0")
    for site in doc["runs"][0]["layers"]:
        for key in ("weight_mean", *(("neg_preact_share", "sparsity", "spike_ratio") if "sparsity" in site else ())):
            assert [s for s, _ in series[f"{site['name']}/{key}"]] == steps, (site["name"], key)
            assert [v for _, v in series[f"{site['name']}/{key}"]] == pytest.approx(site[key])
    assert [v for _, v in series["loss"]] == pytest.approx(doc["runs"][0]["loss"])
    runs = mlflow_runs(db)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = sorted(r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id)
    assert children == ["seed0", "seed1"] and parent.data.tags["schema"] == doc["schema"]


@pytest.mark.slow
def test_sweep_is_a_parent_run_with_a_child_per_grid_point(tmp_path):
    tb, db = tmp_path / "tb", tmp_path / "m.db"
    args = ["sweep-k", *DATA, "--model", "mlp:64-16-10", "--epochs", "1", "--batch-size", "64", "--seeds", "0"]
    args += ["--densities", "0.5", "--layerwise", "1", "--out-dir", str(tmp_path / "runs")]
    args += ["--log-to", f"tensorboard:{tb}", "--log-to", f"mlflow:sqlite:///{db}", "--quiet", "--json"]
    doc = json.loads(invoke(args).stdout)
    ids = sorted(r["id"] for r in doc["records"])
    runs = mlflow_runs(db)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 1 + len(ids) and sorted(r.info.run_name for r in children) == ids
    assert parent.data.params["seeds"] == "0" and parent.data.tags["schema"] == doc["schema"]
    c = client(db)
    by_id = {r["id"]: r for r in doc["records"]}
    for child in children:
        record = by_id[child.info.run_name]
        assert child.data.metrics["test_accuracy"] == pytest.approx(record["metrics"]["test"]["accuracy"])
        assert child.data.tags["masks_sha256"] == record["masks_sha256"]
        assert [a.path for a in c.list_artifacts(child.info.run_id)] == [Path(record["ticket"]).name]
    (folder,) = tb.iterdir()
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ids
    for grid_point in ids:
        assert set(events(folder / grid_point)) == {"test_accuracy", "val_accuracy", "test_loss", "achieved_sparsity"}


# a real TensorBoard server -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_tensorboard_serves_the_logged_series(extracted):
    d, *_ = extracted
    run = "augmented_mlp-64-16-16-10_seed0_d0.1"
    port = free_port()
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(d / "tb"), "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--load_fast", "false"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline, runs = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stderr.read().decode() if server.stderr else "tensorboard exited"
            try:
                runs = get_json(f"{base}/data/runs")
                if run in runs:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert runs is not None and run in runs, runs
        query = urllib.parse.urlencode({"run": run, "tag": "train/loss"})
        served = get_json(f"{base}/data/plugin/scalars/scalars?{query}")
        logged = events(d / "tb" / run)["train/loss"]
        assert [(step, value) for _, step, value in served] == [(s, pytest.approx(v)) for s, v in logged]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def test_help_imports_no_tracker():
    code = "import sys\nfrom ticketcli.cli.app import app\ntry: app(['extract', '--help'], prog_name='ticket')\n"
    code += "except SystemExit: pass\n"
    code += "print('loaded', sorted(m for m in ('torch', 'mlflow', 'tensorboard') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "--log-to" in done.stdout and done.stdout.strip().endswith("loaded []")
