"""`ticket drift --run-dir` and `--resume`: the flags a run dir records (run.json's `flags`), checked back on a
resume (every value of the kind its setting takes, or the run dir is refused) and merged with the flags given to
--resume, where a flag that differs from the recorded one is refused, so that a resumed run is the run that was
started. Torch-free, like settings.py; rundir.py reads and writes the file itself."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ticketcli.drift.settings import DRIFT, DRIFT_FLAGS, DRIFT_READER, FEATURES
from ticketcli.errors import UsageError
from ticketcli.settings.setting import Setting, Table
from ticketcli.settings.track import TRACK_FLAG

# run.json's flags: the group -> the table whose settings it holds, by name (None: not given, as given_settings)
GROUPS: dict[str, Table] = {
    "run": DRIFT,
    "features": FEATURES,
    "reader": DRIFT_READER,
    "track": TRACK_FLAG,
    "inputs": DRIFT_FLAGS.pick("ticket", "weights", "checkpoint_every"),
}
MAX_LIST = 64  # entries of a repeatable flag (--log-to)
Groups = dict[str, dict[str, Any]]  # the command's flags by group (GROUPS' names), each by setting (None: not given)


def record(groups: Mapping[str, Mapping[str, Any]]) -> Groups:
    """The flags as run.json keeps them: every group's every setting (None: not given), as plain JSON values."""
    return {g: {s.name: _plain(groups[g].get(s.name)) for s in table} for g, table in GROUPS.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return value


def _fits(s: Setting, v: Any) -> bool:
    """A recorded value of the kind the setting's flag parses (its range is checked again when the flags are)."""
    if v is None:
        return True
    if s.kind is bool:
        return v is True
    if s.kind is int:
        return type(v) is int
    if s.kind is float:
        return type(v) in (int, float)
    if s.kind is list:
        return isinstance(v, list) and len(v) <= MAX_LIST and all(isinstance(x, str) for x in v)
    return isinstance(v, str) or (type(v) in (int, float) and s.kind not in (str, Path))


def resumed(doc: Mapping[str, Any], given: Mapping[str, Mapping[str, Any]], where: Path) -> Groups:
    """run.json's flags, each group holding exactly its settings with values of their kinds (one line if not), with
    each flag given to --resume checked to say the same (None: not given)."""
    flags = doc.get("flags")
    if not isinstance(flags, dict) or set(flags) != set(GROUPS):
        raise UsageError(f"{where} does not record a drift run's flags")
    for g, table in GROUPS.items():
        values = flags[g]
        if not isinstance(values, dict) or set(values) != {s.name for s in table}:
            raise UsageError(f"{where}: flags.{g} does not hold this version's drift settings")
        bad = [s.flag for s in table if not _fits(s, values[s.name])]
        if bad:
            raise UsageError(f"{where}: the recorded {bad[0]} is not a value that flag takes")
    for g, table in GROUPS.items():
        for s in table:
            new, old = _plain(given.get(g, {}).get(s.name)), flags[g][s.name]
            same = {type(new), type(old)} <= {int, float} and float(new) == float(old)  # 3 and 3.0 alike
            if new is not None and new != old and not same:
                was = "not given" if old is None else f"{s.flag} {_shown(old)}"
                raise UsageError(
                    f"{s.flag} {_shown(new)} conflicts with the run in {where} ({was})",
                    hint="a resumed run keeps its recorded settings: drop the flag",
                )
    return {g: dict(v) for g, v in flags.items()}


def _shown(v: Any) -> str:
    text = " ".join(v) if isinstance(v, list) else "" if v is True else str(v)
    return text[:80]


def check_features(features: Mapping[str, Any]) -> None:
    """What a run dir keeps: plain drift and one controlled run (--act-sparsity), not ReLUfication's two phases or
    the trade-off's pool of runs."""
    for name, flag in (("relufy", "--relufy"), ("tradeoff", "--tradeoff")):
        if features.get(name) not in (None, False):
            raise UsageError(f"--run-dir does not go with {flag}", hint="--run-dir keeps plain and --act-sparsity runs")
