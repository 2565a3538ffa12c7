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
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.methods.registry import method_document, own_options
from ticketcli.models.registry import parse_model
from ticketcli.models.user_code import refuse_foreign
from ticketcli.runtime.world import MAX_WORLD_SIZE
from ticketcli.settings.checks import build_spec, check_module_init, method_spec
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Setting
from ticketcli.specs.ranges import show
from ticketcli.specs.run import MODULE_INIT, InitSpec, MethodSpec, ModelSpec
from ticketcli.specs.syntax import spec_text
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MetricsRecord
from ticketcli.version import __version__

ALWAYS = ("method", "sparsity", "model", "dataset", "seed", "epochs", "device")  # in the command even at default
NOT_IMPORTABLE = ("__main__", "__mp_main__", "builtins")  # a module defined in a script or notebook
# the method record's entries that are settings: the method settings (what extract records there, and nothing else)
# (and the options recorded only when set, Option.when_set)
METHOD_KEYS = (frozenset(method_document(MethodSpec())) | {o.name for o in own_options()}) & frozenset(RUN.names())
# the devices a ticket records (torch's str(device)), as the --device extract takes: cuda:N runs as cuda
DEVICE = re.compile(r"(cpu|cuda|mps)(?::[0-9]{1,4})?")


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
            # a default is a tuple, as the checked values (_checked) are
            if not self.full and name not in ALWAYS and value == s.value:
                continue
            words.extend(_flag(s, value))
        words.extend(["--out", self.out_name()])
        return " ".join(shlex.quote(w) for w in words)

    def toml(self) -> str:
        """The equivalent `--config` file: every recorded setting, one `key = value` line each."""
        lines = [
            "# ticket extract --config THIS_FILE --out OUT reproduces the ticket these settings were recorded in",
            *(f"# note: {note}" for note in self.notes),  # what the command cannot promise, as on stderr
        ]
        if self.processes > 1:
            lines.append(f"# under torchrun: torchrun --standalone --nproc-per-node {self.processes} -m ticketcli ...")
        lines.extend(f"{name} = {_toml_value(value)}" for name, value in self.settings.items())
        return "\n".join(lines) + "\n"


def _number(value: Any) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def _flag(s: Setting, value: Any) -> list[str]:
    if s.switch:
        if value is True:
            return [s.flag]
        if value == s.value:
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


def _device(path: Path, metrics: MetricsRecord) -> str:
    device = "cpu" if metrics.device is None else metrics.device
    m = DEVICE.fullmatch(device)
    if m is None:
        raise _refuse(path, f"its recorded device {show(device)} is none of cpu, cuda, cuda:N or mps")
    return m.group(1)


def _model(path: Path, text: str) -> ModelSpec:
    """The recorded model spec as extract's --model reads it: the spec grammar, the registry, and for a factory the
    module extract would import (never one of a script, nor the standard library's or a dependency's)."""
    try:
        if spec_text(text) != text:  # extract strips blanks around a spec: the command would not name this one
            raise UsageError(f"{show(text)} has blanks around it")
        model = parse_model(text)
        if model.arch == "user":
            factory = str(model.factory)
            module = factory.partition(":")[0]
            if module in NOT_IMPORTABLE:
                raise _refuse(
                    path,
                    f"its model is the class {factory}, defined in a script or notebook that no command can import",
                    hint="move the class into an importable module and extract with --model pkg.module:Class",
                )
            refuse_foreign(factory, module)
    except UsageError as e:
        if str(e).startswith(f"{path}: "):
            raise
        raise _refuse(path, f"its recorded model: {e}") from None
    return model


def _checked(path: Path, recorded: dict[str, Any], model: ModelSpec) -> dict[str, object]:
    """The recorded settings (in RUN's order, None left out) as extract would accept them: each value in its
    setting's range and kind (a choice among the registry's names), printable text only, and together through the
    checks extract's resolution runs (the options the method reads, --init module against the model); any other is
    one UsageError naming the field."""
    out: dict[str, object] = {}
    for s in RUN:  # in the declarations' order, as extract --help lists them
        value = recorded.get(s.name)
        if value is None:
            continue
        what = f"its recorded {s.name}"
        try:
            v = s.check(value, what)
            if isinstance(s.kind, tuple) and v not in s.kind:
                raise UsageError(f"{what} must be one of {', '.join(s.kind)}, got {show(value)}")
            if isinstance(v, str) and not v.isprintable():  # a command or TOML line must stay one plain line
                raise UsageError(f"{what} holds control or format characters, got {show(v)}")
        except UsageError as e:
            raise _refuse(path, str(e)) from None
        out[s.name] = v
    values, given = {**RUN.defaults(), **out}, frozenset(out)
    try:  # what extract's resolution checks beyond each value (settings/checks.py)
        method_spec(RUN, values, given, values["betas"])
        check_module_init(build_spec(InitSpec, RUN, values), model, given)
    except UsageError as e:
        raise _refuse(path, f"extract refuses its recorded settings: {e}") from None
    return out


def reproduction(path: str | Path) -> Reproduction:
    """The settings that extract `path` again, each checked as extract checks it; a ticket no command line can make
    again (the caller's in-memory data, a module class defined in a script, a recorded value extract refuses) is
    one UsageError saying why."""
    path = Path(path)
    tk = ticket_io.scan(path).ticket  # validated like inspect: a bad file is one line, exit 2
    dataset = tk.data.dataset
    if not isinstance(dataset, str) or dataset not in DATASETS:
        raise _refuse(
            path,
            f"its data came from the caller ({show(dataset)}), not a dataset the command line can load",
            hint="extract it again in Python with tc.extract(..., data=...) on the same data and seed",
        )
    if not path.stem.isprintable():  # the command's --out is named after it
        raise _refuse(path, "its file name holds control or format characters", hint="rename the file")
    model = _model(path, tk.model.spec)
    init, data = tk.init, tk.data
    if data.split_seed != init.seed:
        raise _refuse(path, f"its split seed {data.split_seed} is not its seed {init.seed}")
    method = tk.method
    recorded: dict[str, Any] = {"method": method.name}
    for key, value in method.options().items():
        if key in RUN and key not in METHOD_KEYS:  # e.g. data_dir or weights: never a method's, never recorded so
            raise _refuse(path, f"its method record holds {key}, which is no method setting")
        if key in METHOD_KEYS:
            recorded[key] = value
    recorded.update(
        seed=init.seed,
        model=tk.model.spec,
        init=init.scheme,
        dataset=dataset,
        n_extract=data.n_extract,
        n_val=data.n_val,
        device=_device(path, tk.metrics),
    )
    if init.scheme != MODULE_INIT:
        recorded["init_k"] = init.k
    text = data.stored.get("text")
    if dataset == "text" and isinstance(text, dict) and isinstance(text.get("sources"), list):
        if len(text["sources"]) == 1 and isinstance(text["sources"][0], str):  # --text FILE (else: the fortunes)
            recorded["text"] = text["sources"][0]
            # (the text's digest in the ticket says whether it is still the same text)
    notes: list[str] = []
    if model.arch == "user":
        notes.append(
            f"reproducing runs the model factory {model.factory}: --model naming it trusts that code as "
            "--trust-model-code does, so run this only where it is your own module"
        )
    if tk.checkpoint:
        if tk.checkpoint.path is None:
            raise _refuse(path, "it records a checkpoint without its path")
        recorded["weights"] = str(path.parent / tk.checkpoint.path)
        notes.append(f"reproducing needs --weights {recorded['weights']}, holding the weights the ticket was made from")
    settings = _checked(path, recorded, model)
    made_by = tk.created_by.ticketcli
    full = made_by != __version__
    entry = DATASETS.get(dataset)
    for name, default in (("n_extract", entry.n_extract), ("n_val", entry.n_val)):
        if settings.get(name) == default and not full:
            settings.pop(name)  # the dataset's own default (RUN's is None: "the dataset's")
    if full:
        if not str(made_by).isprintable():
            raise _refuse(path, f"its created_by.ticketcli {show(made_by)} holds control or format characters")
        notes.append(f"the ticket was made by ticketcli {made_by}, this is {__version__}: every setting is named")
    processes = 1 if tk.metrics.processes is None else tk.metrics.processes
    if not 1 <= processes <= MAX_WORLD_SIZE:
        raise _refuse(path, f"its recorded processes {show(processes)} is not in [1, {MAX_WORLD_SIZE}]")
    return Reproduction(ticket=str(path), settings=settings, processes=processes, full=full, notes=tuple(notes))
