"""Flags, TOML config files and defaults -> validated, frozen specs: the registry look-ups, the data search path
from the environment, matched sparsity from another ticket. It sits just below the command line; everything under
it takes specs and never reads flags or the environment."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ticketcli.data import places as data_places
from ticketcli.data.registry import DATASETS, DatasetInfo
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.files.bounded import check_user_path, read_regular_file
from ticketcli.files.nesting import toml_nesting
from ticketcli.methods import METHODS
from ticketcli.models import budget
from ticketcli.models.budget import Budget, default_max_memory
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.models.registry import MODELS, parse_model, text_model
from ticketcli.settings.checks import build_spec, check_module_init, method_spec
from ticketcli.settings.lm import text_model_spec
from ticketcli.settings.readers import method_reads
from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Settings, Table
from ticketcli.settings.weak import WEAK
from ticketcli.specs.ranges import show
from ticketcli.specs.run import (
    MAX_PARAMS,
    PAPER_HIDDEN,
    DataSpec,
    InitSpec,
    MethodSpec,
    ModelPolicy,
    ModelSpec,
    RunSpec,
)
from ticketcli.specs.weak import WeakSpec
from ticketcli.ticketfile import ticket as ticket_io

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_CONFIG = 1 << 20  # bytes of a TOML config file
MAX_CONFIG_NESTING = 128  # arrays and tables a config may nest (a run config is flat; tomllib recurses per level)


def build_model_policy(
    *,
    trust_model_code: bool = False,
    model: str | None = None,
    max_params: int | None = None,
    max_memory: int | str | None = None,
) -> ModelPolicy:
    """A validated ModelPolicy from flag values (None: the default limits; --max-memory's is half the machine's
    physical memory, budget.default_max_memory)."""
    limit = MAX_PARAMS if max_params is None else RUN["max_params"].check(max_params)
    memory = default_max_memory() if max_memory is None else RUN["max_memory"].check(max_memory)
    return ModelPolicy(trust_model_code=bool(trust_model_code), model=model, max_params=limit, max_memory=memory)


def _env_path(name: str) -> str | None:
    """A path from the environment, checked like one from the command line (too long, a name over NAME_MAX)."""
    value = os.environ.get(name) or None
    if value is not None:
        check_user_path(value, f"${name}")
    return value


def user_cache_dir() -> Path:
    base = _env_path("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ticketcli"


def data_search_dirs(data_dir: str | None) -> tuple[str, ...]:
    """The data resolution order: --data-dir, $TICKET_DATA, the user cache, then system copies."""
    # read at call time, not import time: data.places.SYSTEM_DIRS is the one list (tests empty it)
    if data_dir is not None:
        check_user_path(data_dir, "--data-dir")  # also from a --config file, where a NUL byte can be written
    dirs = [data_dir, _env_path("TICKET_DATA"), str(user_cache_dir()), *data_places.SYSTEM_DIRS]
    return tuple(str(d) for d in dirs if d)


def data_location(data_dir: str | None, download: bool) -> dict[str, Any]:
    """DataSpec's where-to-find-it fields, resolved from flags and the environment here at the edge."""
    return {
        "search_dirs": data_search_dirs(data_dir),
        "download": bool(download),
        "download_dir": str(user_cache_dir()),
    }


def load_config(path: str | Path | None, table: Table = RUN) -> Settings:
    """Read a flat TOML run config; keys are the config keys of `table`'s settings (dashes or underscores), each
    value checked against its setting's range. Only a regular file of at most 1 MiB is read (no FIFO, no device)."""
    if path is None:
        return Settings()
    p = Path(path)
    raw = read_regular_file(p, MAX_CONFIG, "config file")
    too_deep = f"config file {p} nests arrays or tables too deeply (a run config is flat)"
    try:
        text = raw.decode("utf-8")
        if toml_nesting(text, MAX_CONFIG_NESTING) > MAX_CONFIG_NESTING:  # before tomllib recurses into it
            raise UsageError(too_deep)
        data = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise UsageError(f"config file {p} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"config file {p} is not valid TOML: {str(e).splitlines()[0][:200]}") from None
    except RecursionError:  # tomllib recurses once per level: a recursion limit lowered below MAX_CONFIG_NESTING's
        raise UsageError(too_deep) from None
    out = Settings()
    keys = table.config_keys()
    for key, value in data.items():
        k = key.replace("-", "_")
        if k not in keys:
            raise UsageError(f"unknown key {show(key)} in {p}", hint=suggest(k, keys, "valid keys"))
        if k in out:
            raise UsageError(f"{p} sets {k} twice (with dashes and with underscores)")
        table[k].check(value, f"{p}: {k}")
        out[k] = value
    out.given = frozenset(out)
    return out


def merge_settings(flags: dict[str, Any], config_path: str | Path | None, table: Table = RUN) -> Settings:
    """Defaults <- config file <- explicitly given flags (None means 'not given'), for `table`'s settings."""
    config = load_config(config_path, table)
    given = {k: v for k, v in flags.items() if v is not None}
    merged = Settings({**table.defaults(), **config, **given})
    merged.given = frozenset(config) | frozenset(given)
    return merged


def suggest(name: str, valid: Collection[str], what: str) -> str:
    """The hint for a mistyped setting: the closest valid name first (a typo such as epochss or sparsty), then all
    of them."""
    close = difflib.get_close_matches(name.replace("-", "_"), list(valid), n=1, cutoff=0.6)
    listed = f"{what}: {', '.join(sorted(valid))}"
    return f"did you mean {close[0]}? {listed}" if close else listed


def checked(table: Table, settings: Mapping[str, Any]) -> Settings:
    """`settings` with every value of one of `table`'s settings checked against its range and normalised (None: not
    given, left for the builder's default rules), knowing which were given if `settings` does."""
    out = Settings({k: v if v is None or k not in table else table[k].check(v) for k, v in settings.items()})
    out.given = settings.given if isinstance(settings, Settings) else frozenset()
    return out


def check_keywords(table: Table, options: Collection[str], command: str, reserved: Collection[str] = ()) -> None:
    """The Python API's keyword arguments: each must be a config key of `table` (`reserved`: those the function
    takes as named parameters)."""
    valid = sorted(set(table.config_keys()) - set(reserved))
    unknown = sorted(set(options) - set(valid))
    if unknown:
        close = difflib.get_close_matches(unknown[0], [*valid, *reserved], n=1, cutoff=0.6)  # the named ones too
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"unknown option {unknown[0]!r} for {command}", hint=hint + f"options: {', '.join(valid)}")


def build_weak_spec(settings: dict[str, Any]) -> WeakSpec:
    """train-weak's settings (settings/weak.py; None = not given) checked and frozen into a WeakSpec, the way
    build_extract_spec freezes extract's."""
    return build_spec(WeakSpec, WEAK, merge_settings(settings, None, WEAK))


def build_extract_spec(
    settings: dict[str, Any], dataset: DatasetInfo | None = None, module: str | None = None
) -> RunSpec:
    """Validate merged settings and freeze them into a RunSpec; `dataset`: the caller's in-memory data (the Python
    API) in place of the registered dataset settings["dataset"] names; `module`: the factory name
    ("pkg.module:Class") a caller's own nn.Module (the Python API) is recorded under, in place of settings["model"]:
    every option is checked against it exactly as against --model naming that factory (--bias, --init module,
    --init-k), so the API and the command line accept and refuse the same things. It is never imported."""
    s = checked(RUN, settings)
    METHODS.get(s["method"])
    INIT_SCHEMES.get(s["init"])
    info = DATASETS.get(s["dataset"]) if dataset is None else dataset
    text_fields: dict[str, Any] = {}

    if module is not None:  # already built by the caller: nothing to size, nothing to import
        model = parse_model(module, bias=bool(s["bias"]))
        if model.arch != "user":
            raise UsageError(f"the module's class {module[:80]} reads as a built-in model spec, not a factory")
    elif info.text or (s["model"] is not None and text_model(parse_model(str(s["model"])).arch)):
        given_model = None if s["model"] is None else parse_model(str(s["model"]), bias=bool(s["bias"]))
        location = data_location(s["data_dir"], s["download"])
        model, text_fields = text_model_spec(info, given_model, s["text"], location["search_dirs"], bias=s["bias"])
    elif s["model"] is None:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes), bias=s["bias"])
    else:
        model = parse_model(str(s["model"]), bias=bool(s["bias"])).with_data(info.shape, info.classes)
        if model.arch == "user" and model.classes is None:
            from ticketcli.models.user import import_factory, takes_num_classes  # the factory is imported: torch too

            if takes_num_classes(import_factory(str(model.factory))):
                # e.g. torchvision.models:resnet18 -> torchvision.models:resnet18@3x32x32-10, with num_classes=10
                model = replace(model, input=info.shape, classes=info.classes)  # a registered shape is a tuple
    if model.arch != "user" and model.arch not in MODELS:
        raise UsageError(
            f"invalid model spec {s['model']!r}: unknown model {model.arch!r}",
            hint=f"models: {', '.join(MODELS.names())}, or a factory my_pkg.my_module:build_net",
        )
    memory = default_max_memory() if s["max_memory"] is None else s["max_memory"]  # max_params: merged, never None
    # from the spec alone: refused before any data is loaded or anything built
    budget.check(model, Budget(max_params=s["max_params"], max_memory=memory, train_batch=s["batch_size"]))
    given = settings.given if isinstance(settings, Settings) else None
    method = method_spec(RUN, s, given, settings["betas"])
    if s["match_sparsity"] is not None:
        match = str(s["match_sparsity"])
        if Path(match).is_dir():  # a folder: this seed's ticket of this model in it
            match = ticket_for_seed(match, seed=int(s["seed"]), model=model.to_string())
        method = matched_sparsity(method, match, per_layer=s["match_sparsity_per_layer"])
    elif s["match_sparsity_per_layer"]:
        raise UsageError("--match-sparsity-per-layer needs --match-sparsity TICKET")
    location = data_location(s["data_dir"], s["download"])
    if not info.text and s["text"] is not None:
        raise UsageError(f"--text is read with --dataset text, not {info.name}", hint="add --dataset text")
    data = build_spec(DataSpec, RUN, s, name=info.name, split_seed=s["seed"], **location, **text_fields)
    init = build_spec(InitSpec, RUN, s)
    check_module_init(init, model, given or frozenset())
    return build_spec(RunSpec, RUN, s, model=model, init=init, data=data, method=method, max_memory=memory)


def ticket_for_seed(folder: str, *, seed: int, model: str) -> str:
    """The one ticket in `folder` (its *.safetensors files, not its subfolders) drawn with `seed` for `model`: the
    paper's matched protocol runs each seed's baseline at the achieved sparsity of the same seed's ticket. No such
    ticket, or several, is a usage error that names what the folder holds."""
    found: list[str] = []
    models: set[str] = set()
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            tk = ticket_io.scan(path).ticket
        except (TicketFileError, OSError):  # not a ticket this run can match: skipped, as inspect DIR lists it
            continue
        if tk.init.seed == seed:
            models.add(tk.model.spec)
            if tk.model.spec == model:
                found.append(str(path))
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(Path(f).name for f in found)
        raise UsageError(
            f"--match-sparsity {folder}: {len(found)} tickets of seed {seed} and model {model} ({names})",
            hint="keep one ticket per seed and model in the folder, or name the ticket to match",
        )
    other = f" (seed {seed} has {', '.join(sorted(models))})" if models else ""
    raise UsageError(
        f"--match-sparsity {folder}: no ticket of seed {seed} and model {model}{other}",
        hint="extract that seed's ticket into the folder first, or name the ticket to match",
    )


def matched_sparsity(method: MethodSpec, path: str, *, per_layer: bool) -> MethodSpec:
    """The method at another ticket's achieved sparsity: global, or per layer as --layer-densities (Appendix G)."""
    if method.layer_densities is not None:
        raise UsageError("--match-sparsity sets the densities itself; drop --layer-densities")
    if method.options.get("structure") is not None:
        raise UsageError(f"--structure {method.options['structure']} sets the sparsity itself; drop --match-sparsity")
    if per_layer and not method_reads(method.name, "layer_densities"):
        raise UsageError(
            f"--match-sparsity-per-layer needs per-layer densities, which {method.name} does not take",
            hint="use --match-sparsity alone (global)",
        )
    counts = ticket_io.scan(path).counts  # counted from the packed bits: nothing imported, built or unpacked
    if per_layer:
        from ticketcli.models.masked import layer_of  # (torch with it)

        kept: dict[str, list[int]] = {}
        for name, (k_, n_) in counts.items():  # in named_parameters order, so layers come out in order
            k = kept.setdefault(layer_of(name), [0, 0])
            k[0], k[1] = k[0] + k_, k[1] + n_
        densities = tuple(a / b for a, b in kept.values())
        return replace(
            method,
            sparsity=1.0 - sum(a for a, _ in kept.values()) / sum(b for _, b in kept.values()),
            layer_densities=densities,
            matched_to=path,
        )
    kept_total = sum(k for k, _ in counts.values())
    total = sum(n for _, n in counts.values())
    if kept_total == 0:
        raise UsageError(f"{path} keeps no weights; there is no sparsity to match")
    return replace(method, sparsity=1.0 - kept_total / total, matched_to=path)
