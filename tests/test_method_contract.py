"""The method contract: every registered method declares every capability of methods.base.Method with a value
of the right kind, takes the same extract(...) arguments, and its declarations are what runs act on. A new
method, written as one class and registered, goes through a whole run without touching anything else."""

from __future__ import annotations

import inspect
import json
from dataclasses import fields

import pytest
from helpers import for_method

from ticketcli.errors import UsageError
from ticketcli.methods.base import ExtractResult, Method
from ticketcli.methods.registry import METHODS, MethodInfo
from ticketcli.runs.evaluate import evaluate_ticket
from ticketcli.runs.extract import extract_ticket
from ticketcli.runtime import distributed
from ticketcli.selection.exact import keep_count, topk_mask
from ticketcli.selection.groups import param_densities
from ticketcli.settings.readers import method_options
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.run import METHOD_OPTIONS
from ticketcli.specs.run import DataSpec, MethodSpec, ReaderSpec
from ticketcli.ticketfile.ticket import load

CONTRACT = list(Method.__annotations__)  # the class attributes every method sets
BOOLEANS = ("resumable", "data_parallel", "uses_epochs", "seeded")
SETTINGS = {
    "dataset": "digits",
    "model": "mlp:64-24-10",
    "n_extract": 200,
    "n_val": 100,
    "epochs": 1,
    "batch_size": 128,
    "device": "cpu",
}


def spec_for(method: str, **kw):
    return build_extract_spec(merge_settings({**for_method(method, SETTINGS), "method": method, **kw}, None))


def test_the_contract_lists_what_callers_read():
    assert set(CONTRACT) == {"name", "trains", *BOOLEANS, "default_scope", "score_init"}


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_declares_the_whole_contract(name):
    cls = METHODS.get(name).load()
    assert issubclass(cls, Method) and not inspect.isabstract(cls)
    missing = [a for a in CONTRACT if not hasattr(cls, a)]
    assert missing == [], f"{name} does not declare {missing}"
    assert cls.name == name
    assert cls.trains <= {"scores", "weights"} and isinstance(cls.trains, frozenset)
    assert all(isinstance(getattr(cls, a), bool) for a in BOOLEANS)
    assert cls.default_scope in ("global", "layer")
    # a method that trains scores records how they start; one that trains none has no score init
    assert (cls.score_init is not None) == ("scores" in cls.trains)


@pytest.mark.parametrize("name", METHODS.names())
def test_options_are_method_spec_fields_that_only_some_methods_read(name):
    spec_fields = {f.name for f in fields(MethodSpec)} | {o.name for o in METHODS.get(name).options}
    options = method_options(name)
    assert options <= spec_fields, f"{name} declares options that are neither a MethodSpec field nor its own"
    assert options <= set(METHOD_OPTIONS), f"{name}: {sorted(options - set(METHOD_OPTIONS))} not in METHOD_OPTIONS"


def test_every_method_specific_option_is_read_by_some_method():
    read = set().union(*(method_options(n) for n in METHODS.names()))
    assert read == set(METHOD_OPTIONS)


@pytest.mark.parametrize("name", METHODS.names())
def test_extract_takes_the_same_arguments_everywhere(name):
    expected = inspect.signature(Method.extract).parameters
    got = inspect.signature(METHODS.get(name).load().extract).parameters
    assert list(got) == list(expected)
    assert all(got[p].kind == expected[p].kind and got[p].default == expected[p].default for p in expected)


NOT_RESUMABLE = [n for n in METHODS.names() if not METHODS.get(n).load().resumable]
NOT_PARALLEL = [n for n in METHODS.names() if not METHODS.get(n).load().data_parallel]


@pytest.mark.parametrize("name", NOT_RESUMABLE)
@pytest.mark.parametrize("flags", [{"resume": True}, {"checkpoint_every": 1}])
def test_a_method_not_resumable_is_refused_checkpoint_options(tmp_path, name, flags):
    resumable = ", ".join(n for n in METHODS.names() if METHODS.get(n).load().resumable)
    with pytest.raises(UsageError, match=f"do not apply to method '{name}'") as e:
        extract_ticket(spec_for(name), out=tmp_path / "t.safetensors", **flags)
    assert e.value.hint == f"they apply to: {resumable}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", NOT_PARALLEL)
def test_a_method_not_data_parallel_is_refused_under_torchrun(tmp_path, monkeypatch, name):
    monkeypatch.setattr(distributed, "_WORLD", distributed.World(rank=0, size=2, local_rank=0))
    with pytest.raises(UsageError, match=f"method '{name}' does not run data-parallel under torchrun"):
        extract_ticket(spec_for(name), out=tmp_path / "t.safetensors")


# ---- a new method: one class, one registry line ----------------------------------------------------------------


class Magnitude(Method):
    """Toy method: keep the largest |w| of each layer at its density; nothing trained, nothing drawn."""

    name = "toy-magnitude"
    trains = frozenset()
    resumable = False
    data_parallel = True
    uses_epochs = False
    seeded = False
    default_scope = "layer"
    score_init = None

    def extract(self, net, data, spec, *, device, generator, progress, checkpoint=None) -> ExtractResult:
        densities = param_densities(net, spec)
        masks = {n: topk_mask(w.abs(), keep_count(densities[n], w.numel())) for n, w in net.weights.items()}
        return ExtractResult(masks)


@pytest.fixture
def toy(monkeypatch):
    # what its registry line does (its options: none of the declarations can name it), undone after
    info = MethodInfo("Toy magnitude.", f"{__name__}:Magnitude", frozenset({"layer_densities"}))
    monkeypatch.setitem(METHODS._items, Magnitude.name, info)
    return Magnitude.name


def test_a_new_method_runs_end_to_end_from_its_class_alone(tmp_path, toy):
    spec = spec_for(toy, sparsity=0.75, layer_densities="0.5,0.25")
    summary = extract_ticket(spec, out=tmp_path / "t.safetensors")
    tk = load(tmp_path / "t.safetensors")
    assert tk.method.name == toy and tk.method.option("score_init") is None
    for n, m in tk.masks.items():
        assert int(m.sum()) == keep_count(0.5 if n.startswith("layers.0") else 0.25, m.numel())
    assert summary["sparsity"]["requested_layer_densities"] == [0.5, 0.25]
    again = evaluate_ticket(tmp_path / "t.safetensors", ReaderSpec(data=DataSpec(), device="cpu"))
    assert again["reproduced"] is True


def test_a_new_method_gets_the_capability_checks_and_option_refusals(tmp_path, toy):
    with pytest.raises(UsageError, match="do not apply to method 'toy-magnitude'") as e:
        extract_ticket(spec_for(toy), out=tmp_path / "t.safetensors", resume=True)
    assert toy not in e.value.hint
    with pytest.raises(UsageError, match="--aux-width applies to .* only, not toy-magnitude"):
        spec_for(toy, aux_width=2)


def test_a_new_method_is_listed_and_its_registry_options_are_read(toy):
    from typer.testing import CliRunner

    from ticketcli.cli.app import app
    from ticketcli.settings.readers import method_reads

    doc = json.loads(CliRunner().invoke(app, ["list", "methods", "--json"]).stdout)
    assert {"name": toy, "description": "Toy magnitude."} in doc["items"]
    assert method_options(toy) == {"layer_densities"}
    assert method_reads(toy, "layer_densities") and not method_reads(toy, "lr")
