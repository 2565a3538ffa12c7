"""MLflow: a local store (sqlite:///FILE, or a folder) through mlflow.tracking.MlflowClient, runs in the experiment
`ticket`; parameters, metrics per step, tags, artifacts (a sqlite store keeps them in FILE's folder, in
<FILE stem>-artifacts), a sweep's grid points as child runs of one parent run. `mlflow ui --backend-store-uri URI`
shows them. A run can be reopened by its id (a resumed run): its status goes back to RUNNING, and its child
runs are found again by name."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ticketcli.track.info import RUN_ID, RunInfo, Scalar

EXPERIMENT = "ticket"
MAX_PARAM = 6000  # characters of a parameter value MLflow stores
MAX_METRICS = 1000  # metrics per log_batch
FLUSH_S = 5.0  # metrics are written at most this often while a run goes (and at its end)


def store_uri(target: str) -> tuple[str, str | None]:
    """The tracking URI of a --log-to mlflow: value, and where a new experiment keeps its artifacts (None: the
    store's default, inside a folder store)."""
    if target.startswith("sqlite:///"):
        db = Path(target.removeprefix("sqlite:///")).resolve()  # as SQLAlchemy: sqlite:///rel, sqlite:////abs
        db.parent.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{db}", (db.parent / f"{db.stem}-artifacts").as_uri()
    folder = Path(target.removeprefix("file://")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder.as_uri(), None


class MlflowRun:
    def __init__(
        self, client: Any, experiment: str, info: RunInfo, parent: str | None = None, reopen: Any = None
    ) -> None:
        """A new run, or with `reopen` (the store's run, found by the caller) that run again, RUNNING."""
        tags = {**info.tags, **({"mlflow.parentRunId": parent} if parent else {})}
        self.client, self.experiment, self.resumed = client, experiment, reopen is not None
        self.logged: set[str] = set()
        if reopen is None:
            self.run_id: str = client.create_run(experiment, run_name=info.name, tags=tags).info.run_id
        else:
            self.run_id = reopen.info.run_id
            self.logged = set(reopen.data.params)  # set once: a parameter logged again must not be refused
            client.update_run(self.run_id, status="RUNNING")
        self.pending: list[Any] = []  # metrics not yet written: one write per FLUSH_S, not per step
        self.flushed = time.monotonic()
        self.params(info.params)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.pending += [Metric(k, float(v), now, step) for k, v in values.items()]
        if len(self.pending) >= MAX_METRICS or time.monotonic() - self.flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MAX_METRICS], self.pending[MAX_METRICS:]
            self.client.log_batch(self.run_id, metrics=batch)
        self.flushed = time.monotonic()

    def params(self, params: Mapping[str, Scalar]) -> None:
        from mlflow.entities import Param

        new = {k: str(v)[:MAX_PARAM] for k, v in params.items() if k not in self.logged}  # a parameter is set once
        for i in range(0, len(new), 100):  # log_batch takes at most 100 parameters
            chunk = list(new.items())[i : i + 100]
            self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in chunk])
        self.logged |= set(new)

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        self.params(hparams)
        self.scalars(step, metrics)
        self.flush()

    def tags(self, tags: Mapping[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, v)

    def artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def child(self, info: RunInfo) -> MlflowRun:
        """A child run (a reopened run's child of that name: that run again)."""
        found = None
        if self.resumed:
            kids = self.client.search_runs(
                [self.experiment], filter_string=f"tags.mlflow.parentRunId = '{self.run_id}'", max_results=1000
            )
            found = next((r for r in kids if r.info.run_name == info.name), None)
        return MlflowRun(self.client, self.experiment, info, parent=self.run_id, reopen=found)

    def close(self, status: str) -> None:
        self.flush()
        self.client.set_terminated(self.run_id, status)


class Mlflow:
    def __init__(self, target: str):
        self.target = target

    def open(self, info: RunInfo, resume: str | None = None) -> MlflowRun:
        """A new run, or the run `resume` if the store holds it, live in the experiment (else a new run: its
        `resumed` is False)."""
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # a run reaches no server the user did not name
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # their INFO lines (creating the store's tables) are not the run's output
            logging.getLogger(name).setLevel(logging.WARNING)

        uri, artifacts = store_uri(self.target)
        if uri.startswith("file:"):  # the user asked for a folder store, which MLflow 3.x refuses unless allowed
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(EXPERIMENT)
        experiment = found.experiment_id if found is not None else client.create_experiment(EXPERIMENT, artifacts)
        return MlflowRun(client, experiment, info, reopen=None if resume is None else _run(client, experiment, resume))


def _run(client: Any, experiment: str, run_id: str) -> Any:
    """The store's run `run_id` in `experiment`, not deleted, or None."""
    from mlflow.exceptions import MlflowException

    if not re.fullmatch(RUN_ID, run_id):
        return None
    try:
        run = client.get_run(run_id)
    except MlflowException:  # not in this store (a new store, a deleted run's id purged)
        return None
    live = run.info.experiment_id == experiment and run.info.lifecycle_stage == "active"
    return run if live else None
