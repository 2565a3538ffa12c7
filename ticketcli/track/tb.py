"""TensorBoard: event files through torch.utils.tensorboard, one run folder per run (a child run in a folder under
its parent's), scalars per step, the final metrics with the hyperparameters in the hparams plugin, tags as text.
`tensorboard --logdir DIR` shows them. A run is known by its folder's name; reopening it (a resumed run) adds
an event file to the same folder, and its children's, which TensorBoard reads as one run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ticketcli.track.info import RUN_ID, RunInfo, Scalar


def unique(folder: Path) -> Path:
    """`folder`, or folder_2, folder_3, ... if it exists (one run folder per run: a rerun does not mix its events
    into an earlier run's)."""
    candidate, n = folder, 1
    while candidate.exists():
        n += 1
        candidate = folder.with_name(f"{folder.name}_{n}")
    return candidate


def hparam_value(v: Scalar) -> Scalar:
    return v if isinstance(v, (int, float, str, bool)) else str(v)


class TensorBoardRun:
    def __init__(self, folder: Path, info: RunInfo, *, reopen: bool = False):
        """A new run folder (`folder` or the next free name), or with `reopen` the run folder `folder` itself,
        whose tags are already written."""
        from torch.utils.tensorboard import SummaryWriter

        self.folder, self.resumed = (folder if reopen else unique(folder)), reopen
        if not reopen:
            self.folder.mkdir(parents=True)  # not exist_ok: a folder made since unique() looked is another run's
        self.run_id = self.folder.name
        self.writer: Any = SummaryWriter(log_dir=str(self.folder))
        self.hparams: dict[str, Scalar] = dict(info.params)
        self.children: list[TensorBoardRun] = []
        if info.tags and not reopen:
            self.tags(info.tags)

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def params(self, params: Mapping[str, Scalar]) -> None:
        self.hparams.update(params)

    def finish(self, step: int, metrics: Mapping[str, float], hparams: Mapping[str, Scalar]) -> None:
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        self.scalars(step, metrics)
        hp = {k: hparam_value(v) for k, v in {**self.hparams, **hparams}.items()}
        experiment, start, end = hparams_summary(hp, dict(metrics))  # type: ignore[no-untyped-call]
        writer = self.writer._get_file_writer()  # add_hparams would write them to another run folder
        for summary in (experiment, start, end):
            writer.add_summary(summary)

    def tags(self, tags: Mapping[str, str]) -> None:
        for k, v in tags.items():
            self.writer.add_text(k, v)

    def artifact(self, path: Path) -> None:
        self.writer.add_text("artifacts", str(path))  # TensorBoard keeps no files: where it is

    def child(self, info: RunInfo) -> TensorBoardRun:
        """A child run in a folder under this one's (a reopened run's child of that name: that folder again)."""
        folder = self.folder / info.name
        child = TensorBoardRun(folder, info, reopen=self.resumed and _run_folder(folder))
        self.children.append(child)
        return child

    def close(self, status: str) -> None:
        for child in self.children:  # a child left open (a killed run's) still writes what it was given
            child.writer.close()
        self.writer.add_text("status", status)
        self.writer.close()


def _run_folder(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink()


class TensorBoard:
    def __init__(self, root: Path):
        self.root = root

    def open(self, info: RunInfo, resume: str | None = None) -> TensorBoardRun:
        """A new run, or the run folder `resume` names under the root if it is one (else a new run: its
        `resumed` is False)."""
        if resume is not None and re.fullmatch(RUN_ID, resume) and _run_folder(self.root / resume):
            return TensorBoardRun(self.root / resume, info, reopen=True)
        return TensorBoardRun(self.root / info.name, info)
