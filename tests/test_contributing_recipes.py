"""CONTRIBUTING.md's recipes run: each code block marked `<!-- recipe: NAME -->` is executed as the file or the line
the recipe says to write, against the registries of this process (every registry's dict is restored after each
test, failed or not), and the new method, model, dataset or option then shows up where the recipe promises."""

from __future__ import annotations

import json
import re
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ticketcli.cli import extract as cli_extract
from ticketcli.cli.app import app
from ticketcli.cli.declared import declared
from ticketcli.data import datasets
from ticketcli.data import registry as data_registry
from ticketcli.data.registry import DATASETS
from ticketcli.errors import UsageError
from ticketcli.methods import registry as method_registry
from ticketcli.methods.registry import METHODS, option
from ticketcli.models import registry as model_registry
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.runs.extract import extract_ticket
from ticketcli.selection.exact import keep_count
from ticketcli.settings import run as run_settings
from ticketcli.settings.flags import EXTRACT_FLAGS
from ticketcli.settings.readers import method_options
from ticketcli.settings.resolve import build_extract_spec, check_keywords, merge_settings
from ticketcli.settings.run import RUN
from ticketcli.settings.track import TRACK
from ticketcli.specs.run import DataSpec, InitSpec
from ticketcli.ticketfile.ticket import load

DOC = Path(__file__).resolve().parent.parent / "CONTRIBUTING.md"
MARK = re.compile(r"^<!-- recipe: ([\w-]+) -->\n```python\n(.*?)^```$", re.M | re.S)
runner = CliRunner()
WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}
QUICK = {"dataset": "digits", "model": "mlp:64-16-10", "n_extract": 200, "n_val": 100, "device": "cpu"}


def recipes(text: str) -> dict[str, str]:
    """Every marked block of `text` by its recipe name (a name used twice is an error)."""
    found: dict[str, str] = {}
    for name, code in MARK.findall(text):
        assert name not in found, f"recipe {name!r} is marked twice"
        found[name] = textwrap.dedent(code)
    return found


RECIPES = recipes(DOC.read_text(encoding="utf-8"))


def module_from(recipe: str, name: str) -> types.ModuleType:
    """The recipe's file as the module `name` (what writing ticketcli/<...>.py would make importable)."""
    module = types.ModuleType(name)
    module.__file__ = f"<CONTRIBUTING.md recipe {recipe}>"
    sys.modules[name] = module
    exec(compile(RECIPES[recipe], module.__file__, "exec"), module.__dict__)
    return module


@dataclass
class Saved:
    """A registry's dict and its contents, put back as they were."""

    items: dict[str, Any]
    copy: dict[str, Any]

    def restore(self) -> None:
        self.items.clear()
        self.items.update(self.copy)


@pytest.fixture
def registries() -> Iterator[None]:
    """The methods, models, datasets and extract's settings as shipped, restored after the test even when it fails
    (after monkeypatch's own undoing, which a test requests after this), and the modules a recipe added dropped."""
    saved = [Saved(d, dict(d)) for d in (METHODS._items, MODELS._items, DATASETS._items, RUN._by_name)]
    modules = set(sys.modules)
    try:
        yield
    finally:
        for s in saved:
            s.restore()
        for name in set(sys.modules) - modules:
            if name.startswith("ticketcli."):
                del sys.modules[name]
    assert "magnitude" not in METHODS and "shallow" not in MODELS and "iris" not in DATASETS
    assert "probe_rate" not in RUN


def test_every_recipe_is_marked():
    expected = {
        "method",
        "method-registry",
        "model-network",
        "model-family",
        "model-registry",
        "dataset",
        "dataset-registry",
        "option-setting",
    }
    assert set(RECIPES) == expected


def test_the_parser_finds_a_marked_block_and_only_it():
    text = "<!-- recipe: a -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    assert recipes(text) == {"a": "x = 1\n"}


# ---- a method -----------------------------------------------------------------------------------------------------


def redeclare(monkeypatch: pytest.MonkeyPatch) -> None:
    """Extract's settings and flags declared again from the registry, as importing the edited registry would."""
    monkeypatch.setattr(RUN, "_by_name", run_settings.with_options(run_settings.SHARED)._by_name)
    monkeypatch.delattr(cli_extract.extract, "__signature__")  # restored after the test
    declared(RUN, TRACK, flags=EXTRACT_FLAGS)(cli_extract.extract)


def register_method(monkeypatch: pytest.MonkeyPatch) -> str:
    """The method's file and its registry entry (the call the registry makes for each method)."""
    module_from("method", "ticketcli.methods.magnitude")
    exec(RECIPES["method-registry"], dict(vars(method_registry)))
    redeclare(monkeypatch)
    return "magnitude"


def test_the_method_recipe_lists_loads_and_extracts(registries, monkeypatch, tmp_path):
    name = register_method(monkeypatch)
    doc = json.loads(runner.invoke(app, ["list", "methods", "--json"]).stdout)
    assert name in [i["name"] for i in doc["items"]]
    cls = METHODS.get(name).load()
    assert cls.name == name
    spec = parse_model("mlp:64-16-10")
    module = build_model(spec)
    net = MaskedNet(module, spec)
    net.load_weights(init_weights(module, InitSpec(seed=0)))
    from ticketcli.specs.run import MethodSpec

    for invert in (False, True):
        method = MethodSpec(name=name, sparsity=0.75, options={"magnitude_invert": invert})
        result = cls().extract(net, None, method, device=None, generator=None, progress=None)
        for n, w in net.weights.items():
            kept, big = result.masks[n], w.abs()
            assert int(kept.sum()) == keep_count(0.25, w.numel())
            if invert:  # its option: the smallest |W| of each layer
                big = -big
            assert big[kept].min() >= big[~kept].max()  # the largest |W| of each layer

    # a whole run, with the options it reads; one it does not read is refused, and its own for the other methods
    assert method_options(name) == {"layer_densities", "magnitude_invert"}
    settings = {**QUICK, "method": name, "layer_densities": "0.5,0.25", "magnitude_invert": True}
    run = build_extract_spec(merge_settings(settings, None))
    extract_ticket(run, out=tmp_path / "t.safetensors")
    ticket = load(tmp_path / "t.safetensors")
    assert ticket.method.name == name and ticket.method.option("magnitude_invert") is True
    with pytest.raises(UsageError, match=f"--lr applies to .* only, not {name}"):
        build_extract_spec(merge_settings({**QUICK, "method": name, "lr": 0.1}, None))
    refused = runner.invoke(app, ["extract", "--method", "snip", "--magnitude-invert", "--dataset", "digits"])
    assert refused.exit_code == 2 and "--magnitude-invert applies to magnitude only, not snip" in refused.output
    row = next(
        i
        for i in json.loads(runner.invoke(app, ["list", "settings", "--json"]).stdout)["items"]
        if i["name"] == "magnitude_invert"
    )
    assert row["methods"] == ["magnitude"] and row["flag"] == "--magnitude-invert"


# ---- a model family -----------------------------------------------------------------------------------------------


def test_the_model_recipe_parses_builds_costs_and_lists(registries):
    module_from("model-network", "ticketcli.models.shallow")
    family = module_from("model-family", "ticketcli.models.shallow_family")
    exec(RECIPES["model-registry"], {**vars(model_registry), "shallow_family": family})
    assert "shallow" in MODELS

    table = runner.invoke(app, ["list", "models"], env=WIDE)
    assert table.exit_code == 0 and family.SHALLOW.description in table.stdout
    for example in family.SHALLOW.examples:
        spec = parse_model(example)
        est = model_registry.estimate(spec)
        built = build_model(spec)
        assert est is not None and est.params == sum(p.numel() for p in built.parameters())
    with pytest.raises(UsageError, match="shallow takes w<width>"):
        parse_model("shallow:x8")
    assert parse_model("shallow:w8").with_data((1, 8, 8), 10).to_string() == "shallow:w8@1x8x8-10"


# ---- a dataset ----------------------------------------------------------------------------------------------------


def test_the_dataset_recipe_loads_splits_and_lists(registries, monkeypatch, tmp_path):
    ns = dict(vars(datasets))
    exec(RECIPES["dataset"], ns)
    monkeypatch.setattr(datasets, "load_iris", ns["load_iris"], raising=False)  # its place: data/datasets.py
    exec(RECIPES["dataset-registry"], dict(vars(data_registry)))
    info = DATASETS.get("iris")

    doc = json.loads(runner.invoke(app, ["list", "datasets", "--json"]).stdout)
    assert {"name": "iris", "description": info.description} in doc["items"]
    splits = datasets.load_splits(DataSpec(name="iris"))
    assert tuple(splits.x_extract.shape) == (info.n_extract, *info.shape)
    assert tuple(splits.x_val.shape) == (info.n_val, *info.shape)
    run = build_extract_spec(
        merge_settings({"dataset": "iris", "model": "mlp:4-8-3", "method": "random", "device": "cpu"}, None)
    )
    summary = extract_ticket(run, out=tmp_path / "t.safetensors")
    assert load(tmp_path / "t.safetensors").data.dataset == "iris" and summary is not None


# ---- an option ----------------------------------------------------------------------------------------------------


def declare_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Option in snip's registry entry; extract's settings and flags declared again from the registry."""
    value = eval(RECIPES["option-setting"], dict(vars(method_registry)))
    option = value[0] if isinstance(value, tuple) else value  # a line of an entry ends with a comma
    snip = METHODS.get("snip")
    monkeypatch.setitem(METHODS._items, "snip", replace(snip, options=(*snip.options, option)))
    redeclare(monkeypatch)


def test_the_option_recipe_is_a_flag_a_config_key_a_keyword_and_refused_where_unread(registries, monkeypatch):
    declare_option(monkeypatch)
    doc = json.loads(runner.invoke(app, ["list", "settings", "--json"]).stdout)
    row = next(i for i in doc["items"] if i["name"] == "probe_rate")
    assert row["flag"] == "--probe-rate" and row["default"] == "0.25" and row["methods"] == ["snip"]

    help_text = runner.invoke(app, ["extract", "--help"], env=WIDE).stdout
    assert "--probe-rate" in help_text
    assert "snip: The fraction of minibatches probed. Default: 0.25." in " ".join(help_text.split())

    assert method_options("snip") >= {"probe_rate"} and "probe_rate" not in method_options("augmented")
    assert option(build_extract_spec(merge_settings({**QUICK, "method": "snip"}, None)).method, "probe_rate") == 0.25
    given = build_extract_spec(merge_settings({**QUICK, "method": "snip", "probe_rate": 0.5}, None))
    assert option(given.method, "probe_rate") == 0.5
    check_keywords(RUN, ["probe_rate"], "extract")  # the API's keyword

    refused = runner.invoke(app, ["extract", "--method", "augmented", "--probe-rate", "0.5", "--dataset", "digits"])
    assert refused.exit_code == 2 and "--probe-rate applies to snip only, not augmented" in refused.output
    out_of_range = runner.invoke(app, ["extract", "--method", "snip", "--probe-rate", "1.5", "--dataset", "digits"])
    assert out_of_range.exit_code == 2 and "--probe-rate" in out_of_range.output


def test_the_option_s_config_key_is_read(registries, monkeypatch, tmp_path):
    declare_option(monkeypatch)
    config = tmp_path / "run.toml"
    config.write_text('method = "snip"\nprobe_rate = 0.75\n')
    assert option(build_extract_spec(merge_settings(dict(QUICK), config)).method, "probe_rate") == 0.75
    config.write_text('method = "augmented"\nprobe_rate = 0.75\n')
    with pytest.raises(UsageError, match="--probe-rate applies to snip only, not augmented"):
        build_extract_spec(merge_settings(dict(QUICK), config))
