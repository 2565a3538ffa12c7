"""A run as the trackers name it (RunInfo) and the values they take: torch-free, imported by every tracker."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

Scalar = float | int | str | bool
RUN_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"  # a run id to reopen: an MLflow run id, a TensorBoard run folder's name


@dataclass(frozen=True)
class RunInfo:
    """One run as a tracker names it: `name` (a folder name: letters, digits, . _ -), its parameters and tags."""

    name: str
    params: Mapping[str, Scalar] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


def run_name(*parts: object) -> str:
    """A run's name from its parts (method, model, seed, density): safe as a folder name and an MLflow run name."""
    text = "_".join(str(p) for p in parts if p is not None and str(p) != "")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:200] or "run"


class StoreError(Exception):
    """A tracker's error as one line made elsewhere (the MLflow writer process: its exception's type and message),
    reported as it is."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line
