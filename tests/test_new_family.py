"""A new model family is one declaration (its Family: grammar, cost, description, examples, builder) plus one registry
line: registered here for one test at a time (the registry's state restored after), it is listed, parsed, costed,
held to the budget and built by every path that serves the built-in ones, with nothing else taught about it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.models import budget, registry
from ticketcli.models.build import build_model
from ticketcli.models.family import Family, Shape
from ticketcli.models.mlp_family import mlp_cost
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.specs.run import ModelSpec

NAME = "toy-wide"
runner = CliRunner()
WIDE = {"COLUMNS": "200"}


# ---- the one file a family is: its grammar, its cost and its builder (torch imported only there) ----------------


def toy_arguments(text: str, name: str, body: str | None, suffix: dict[str, Any]) -> dict[str, Any]:
    """toy-wide:w<width>: one hidden layer of that width."""
    m = re.fullmatch(r"w([0-9]+)", body or "")
    if not m or int(m.group(1)) <= 0:
        raise UsageError(f"invalid model spec {text!r}: {name} takes w<width>, e.g. {name}:w16")
    return {"layers": (m.group(0),)}


def toy_cost(spec: ModelSpec, shape: Shape, classes: int) -> Any:
    c, h, w = shape
    return mlp_cost((c * h * w, int(spec.layers[0][1:]), classes), spec.bias)


def build_toy(spec: ModelSpec, shape: Shape, classes: int) -> Any:
    from ticketcli.models.mlp import MLP

    c, h, w = shape
    return MLP((c * h * w, int(spec.layers[0][1:]), classes), spec.bias)


TOY = Family(
    description="A toy MLP with one hidden layer of the spec's width.",
    build=f"{__name__}:build_toy",
    parse=toy_arguments,
    cost=toy_cost,
    examples=("toy-wide:w8@1x8x8-10",),
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(MODELS._items, NAME, TOY)  # what its one line in models/registry.py does, undone after
    return NAME


# ---- what follows from that line --------------------------------------------------------------------------------


def test_it_is_listed_with_its_description(toy):
    table = runner.invoke(app, ["list", "models"], env=WIDE)
    assert table.exit_code == 0 and NAME in table.stdout and TOY.description in table.stdout
    doc = json.loads(runner.invoke(app, ["list", "models", "--json"]).stdout)
    assert {"name": NAME, "description": TOY.description} in doc["items"]
    assert [i["name"] for i in doc["items"]] == MODELS.names()


def test_its_spec_is_parsed_by_its_own_grammar(toy):
    spec = parse_model(f"{NAME}:w8+bias")
    assert (spec.arch, spec.layers, spec.bias, spec.resolved) == (NAME, ("w8",), True, False)
    assert spec.with_data((1, 8, 8), 10).to_string() == f"{NAME}:w8@1x8x8-10+bias"
    with pytest.raises(UsageError, match=f"{NAME} takes w<width>"):
        parse_model(f"{NAME}:x8")
    with pytest.raises(UsageError, match=r"\+res and \+norm apply to mlp specs only"):
        parse_model(f"{NAME}:w8+res")


def test_unregistered_it_is_an_unknown_model():
    with pytest.raises(UsageError, match=f"unknown model '{NAME}'"):
        parse_model(f"{NAME}:w8")


def test_its_cost_is_its_family_s_and_exact(toy):
    spec = parse_model(TOY.examples[0])
    est = registry.estimate(spec)
    assert est is not None and est.params == 64 * 8 + 8 * 10
    assert est.params == sum(p.numel() for p in build_model(spec).parameters())
    assert registry.declared_params(TOY.examples[0]) == est.params


def test_the_budget_refuses_it_from_its_cost(toy):
    spec = parse_model(f"{NAME}:w100000@1x8x8-10")  # 64 * 100000 + 100000 * 10 parameters
    with pytest.raises(UsageError, match="has 7,400,000 parameters, more than the limit of 1,000"):
        budget.check(spec, budget.Budget(max_params=1000))
    with pytest.raises(UsageError, match="needs about .* of memory"):
        budget.check(spec, budget.Budget(max_memory=1 << 20))


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--max-params", "1000"], "has 7,400,000 parameters, more than the limit of 1,000"),
        (["--max-memory", "1M"], "of memory at"),
    ],
)
def test_extract_takes_it_and_refuses_it_over_the_budget(toy, tmp_path, flags, needle):
    out = tmp_path / "t.safetensors"
    args = ["extract", "--model", f"{NAME}:w100000", "--dataset", "digits", "--out", str(out), *flags]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and needle in r.output, r.output
    assert not out.exists()


def test_extract_refuses_a_spec_its_grammar_refuses(toy, tmp_path):
    r = runner.invoke(app, ["extract", "--model", f"{NAME}:zz", "--dataset", "digits", "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and f"{NAME} takes w<width>" in r.output, r.output


def test_extract_help_still_shows_with_it_registered(toy):
    r = runner.invoke(app, ["extract", "--help"], env=WIDE)
    assert r.exit_code == 0 and "--model" in r.stdout
