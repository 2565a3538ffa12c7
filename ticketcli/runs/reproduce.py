"""`ticket inspect --command` and `--toml`: the `ticket extract` command line, or the `--config` TOML file, that
reproduces a ticket from the settings it records (its model, init, data, method record, device and process count).

Torch-free, like runs/inspect.py: the ticket is read with numpy alone and the settings come from the declarations
in settings/run.py, so the flag and config key of each recorded value are the ones `extract` reads. The command
names the settings that differ from this version's defaults, plus the ones that say what the ticket is (method,
sparsity, model, dataset, seed, device, and epochs where the method trains); the TOML names every recorded one. A
ticket made by another version of ticketcli gets every recorded setting in the command too, since a default may
have changed in between."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Setting
from ticketcli.specs.run import MODULE_INIT
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MetricsRecord
from ticketcli.version import __version__

ALWAYS = ("method", "sparsity", "model", "dataset", "seed", "epochs", "device")  # in the command even at default
NOT_IMPORTABLE = ("__main__", "__mp_main__", "builtins")  # a module defined in a script or notebook


@dataclass(frozen=True)
class Reproduction:
    """How to extract a ticket again: the settings (config key -> value, in RUN's order), the torchrun process count
    (1: one process), and notes for the reader (stderr: what the command cannot promise)."""

    ticket: str
    settings: dict[str, Any]
    processes: int
    full: bool  # the command names every setting (another ticketcli version made the ticket)
    notes: tuple[str, ...]

    def out_name(self) -> str:
        return f"{Path(self.ticket).stem}-reproduced.safetensors"

    def command(self) -> str:
        """The `ticket extract ...` command line, shell-quoted (shlex.quote), on one line."""
        prefix = ["ticket", "extract"]
        if self.processes > 1:
            prefix = ["torchrun", "--standalone", "--nproc-per-node", str(self.processes), "-m", "ticketcli", "extract"]
        words = list(prefix)
        for name, value in self.settings.items():
            s = RUN[name]
            if not self.full and name not in ALWAYS and value == _default(s):
                continue
            words.extend(_flag(s, value))
        words.extend(["--out", self.out_name()])
        return " ".join(shlex.quote(w) for w in words)

    def toml(self) -> str:
        """The equivalent `--config` file: every recorded setting, one `key = value` line each."""
        lines = [
            "# ticket extract --config THIS_FILE --out OUT reproduces the ticket these settings were recorded in",
        ]
        if self.processes > 1:
            lines.append(f"# under torchrun: torchrun --standalone --nproc-per-node {self.processes} -m ticketcli ...")
        lines.extend(f"{name} = {_toml_value(value)}" for name, value in self.settings.items())
        return "\n".join(lines) + "\n"


def _default(s: Setting) -> Any:
    value = s.value
    return list(value) if isinstance(value, tuple) else value


def _number(value: Any) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _flag(s: Setting, value: Any) -> list[str]:
    if s.switch:
        if value is True:
            return [s.flag]
        if value == _default(s):
            return []
        raise UsageError(f"cannot write {s.flag} off on the command line (its default is on); use --toml")
    if isinstance(value, (list, tuple)):
        return [s.flag, ",".join(_number(v) for v in value)]
    return [s.flag, _number(value)]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    # a TOML basic string: JSON's escapes are TOML's, less DEL, which TOML wants escaped
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")


def _refuse(path: Path, why: str, hint: str | None = None) -> UsageError:
    return UsageError(f"{path}: no command reproduces this ticket: {why}", hint=hint)


def _device(metrics: MetricsRecord) -> str:
    device = "cpu" if metrics.device is None else metrics.device
    return device.split(":")[0] if device.startswith("cuda") else device


def reproduction(path: str | Path) -> Reproduction:
    """The settings that extract `path` again; a ticket no command line can make again (the caller's in-memory data,
    a module class defined in a script) is one UsageError saying why."""
    path = Path(path)
    tk = ticket_io.scan(path).ticket  # validated like inspect: a bad file is one line, exit 2
    dataset = tk.data.dataset
    if not isinstance(dataset, str) or dataset not in DATASETS:
        raise _refuse(
            path,
            f"its data came from the caller ({dataset!r}), not a dataset the command line can load",
            hint="extract it again in Python with tc.extract(..., data=...) on the same data and seed",
        )
    model = tk.model
    factory = model.factory or ""
    module = factory.split(":")[0]
    if model.arch == "user" and (module in NOT_IMPORTABLE or "<" in factory):
        raise _refuse(
            path,
            f"its model is the class {factory}, defined in a script or notebook that no command can import",
            hint="move the class into an importable module and extract with --model pkg.module:Class",
        )
    init, data = tk.init, tk.data
    if data.split_seed != init.seed:
        raise _refuse(path, f"its split seed {data.split_seed} is not its seed {init.seed}")
    method = tk.method
    settings: dict[str, Any] = {}
    recorded: dict[str, Any] = {
        "method": method.name,
        **{k: v for k, v in method.options().items() if k in RUN and k not in ("method", "model", "dataset", "seed")},
        "seed": init.seed,
        "model": model.spec,
        "init": init.scheme,
        "dataset": dataset,
        "n_extract": data.n_extract,
        "n_val": data.n_val,
        "device": _device(tk.metrics),
    }
    if init.scheme != MODULE_INIT:
        recorded["init_k"] = init.k
    notes: list[str] = []
    if tk.checkpoint:
        recorded["weights"] = str(path.parent / str(tk.checkpoint.path))
        notes.append(f"the ticket's weights came from {recorded['weights']}, which must hold the same weights")
    if model.arch == "user":
        notes.append(f"the model factory {factory} must be importable where the command runs")
    for s in RUN:  # in the declarations' order, as extract --help lists them
        if s.name in recorded and recorded[s.name] is not None:
            settings[s.name] = recorded[s.name]
    made_by = tk.created_by.ticketcli
    full = made_by != __version__
    entry = DATASETS.get(dataset)
    for name, default in (("n_extract", entry.n_extract), ("n_val", entry.n_val)):
        if settings.get(name) == default and not full:
            settings.pop(name)  # the dataset's own default (RUN's is None: "the dataset's")
    if full:
        notes.append(f"the ticket was made by ticketcli {made_by}, this is {__version__}: every setting is named")
    processes = tk.metrics.processes
    return Reproduction(
        ticket=str(path),
        settings=settings,
        processes=1 if processes is None else processes,
        full=full,
        notes=tuple(notes),
    )
