"""The Python API's types, over its whole public surface: every keyword annotated bool takes only True or False
(never 'no', 'yes', 0, 1, or None where None is not its documented value), every int or float keyword only a number
of its kind (a bool is no int), each refused as one UsageError naming the keyword before the call does anything. A
caller's data (tensors, Datasets, DataLoaders) is checked before anything is built: class labels are integers
bounded by the data (a huge label never sizes a model), inputs are finite, shapes agree with each other and with the
model. Whatever the API raises for bad input is one of its typed errors, never an IndexError, ValueError, TypeError
or RuntimeError from inside.

The keywords are found by inspecting the public signatures: a new public function or keyword is covered (and a
public function with a typed keyword that no test knows how to call fails test_every_typed_keyword_is_called)."""

from __future__ import annotations

import inspect
import math
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

import ticketcli as tc

PEAK = 64 << 20  # Python-level allocations of one refused call
FAST = {"method": "random", "progress": False}
# the commands' runs at their smallest, for the calls whose every keyword is tried
TINY_SWEEP = {"seeds": [0], "densities": [0.5], "layerwise": 0, "epochs": 1, "n_extract": 50, "n_val": 20}
TINY_SWEEP |= {"progress": False}
TINY_DRIFT = {"steps": 1, "log_every": 1, "batch_size": 8, "probe_size": 8, "inputs": "gaussian", "progress": False}


def public_calls() -> dict[str, Callable[..., Any]]:
    """Every public function and every public method of Ticket, by the name a user writes."""
    out: dict[str, Callable[..., Any]] = {}
    for name in tc.__all__:
        obj = getattr(tc, name)
        if inspect.isfunction(obj):
            out[name] = obj
    for name, member in vars(tc.Ticket).items():
        if not name.startswith("_") and inspect.isfunction(member):
            out[f"Ticket.{name}"] = member
    return out


def kind(annotation: object) -> str | None:
    """'bool', 'int' or 'float' for an annotation that names one of them (as a string or a type), else None."""
    parts = {p.strip() for p in str(getattr(annotation, "__name__", annotation)).split("|")}
    return next((k for k in ("bool", "int", "float") if k in parts), None)


def typed_keywords() -> list[tuple[str, str, str, bool]]:
    """(call, keyword, kind, None allowed) for every bool/int/float parameter of the public surface."""
    out = []
    for call, fn in public_calls().items():
        for p in inspect.signature(fn).parameters.values():
            k = kind(p.annotation)
            if k is not None and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                out.append((call, p.name, k, "None" in str(p.annotation)))
    return out


def tensors(n: int = 60, features: int = 8, classes: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, features, generator=g), torch.arange(n) % classes


class Items(Dataset):  # type: ignore[type-arg]
    """A map-style Dataset of (x, y) items, as a caller writes one."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i >= len(self.y):
            raise IndexError(i)
        return self.x[i], self.y[i]


def forms(x: torch.Tensor, y: torch.Tensor) -> dict[str, object]:
    """The same examples in every form the data argument takes."""
    n = len(y)
    a, b = n // 2, 3 * n // 4
    return {
        "tensors": (x, y),
        "Dataset": Items(x, y),
        "DataLoader": DataLoader(Items(x, y), batch_size=7),
        "train/test": {"train": (x[:b], y[:b]), "test": (x[b:], y[b:])},
        "three splits": {"extract": (x[:a], y[:a]), "val": (x[a:b], y[a:b]), "test": (x[b:], y[b:])},
    }


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Callable[..., Any]]:
    """How to call each public function with valid arguments and extra keywords."""
    d = tmp_path_factory.mktemp("types")
    x, y = tensors()
    t = tc.extract("mlp:8-4", (x, y), **FAST)  # type: ignore[arg-type]
    t.save(d / "t.safetensors")
    digits = tc.extract("mlp:64-10", "digits", n_extract=50, n_val=20, **FAST).save(d / "digits.safetensors")
    m = nn.Sequential(nn.Linear(8, 4))
    return {
        "load": lambda **kw: tc.load(d / "t.safetensors", **kw),
        "extract": lambda **kw: tc.extract("mlp:8-4", (x, y), **{**FAST, **kw}),
        "compare": lambda **kw: tc.compare(d / "t.safetensors", d / "t.safetensors", **kw),
        "apply_masks": lambda **kw: tc.apply_masks(
            nn.Linear(2, 2), {"weight": torch.ones(2, 2, dtype=torch.bool)}, **kw
        ),
        "remove_masks": lambda **kw: tc.remove_masks(nn.Linear(2, 2), **kw),
        "load_pruned": lambda **kw: tc.load_pruned(nn.Linear(2, 2), nn.Linear(2, 2).state_dict(), **kw),
        "Ticket.save": lambda **kw: t.save(d / "t.safetensors", **kw),
        "Ticket.build": lambda **kw: t.build(**{"data": (x, y), **kw}),
        "Ticket.apply": lambda **kw: t.apply(m, **{"data": (x, y), **kw}),
        "Ticket.splits": lambda **kw: t.splits(**{"data": (x, y), **kw}),
        "Ticket.evaluate": lambda **kw: t.evaluate(**{"data": (x, y), **kw}),
        "Ticket.export": lambda **kw: t.export("masked", d / "e.safetensors", **{"overwrite": True, **kw}),
        "train_weak": lambda **kw: tc.train_weak(digits, **{"epochs": 1, "progress": False, **kw}),
        "sweep_k": lambda **kw: tc.sweep_k("mlp:64-10", **{**TINY_SWEEP, **kw}),
        "drift": lambda **kw: tc.drift("mlp:64-4-10", **{**TINY_DRIFT, **kw}),
        "load_sparse": lambda **kw: tc.load_sparse(digits, **{"measure": False, **kw}),
        "sparse_module": lambda **kw: tc.sparse_module(
            nn.Sequential(nn.Linear(8, 4)), {"0.weight": torch.eye(4, 8, dtype=torch.bool)}, **kw
        ),
        "Ticket.bench": lambda **kw: tc.load(digits).bench(**{"batch": [1], "repeats": 3, "forms": ["sparse"], **kw}),
    }


def bad_values(k: str, none_ok: bool) -> list[object]:
    """Values that are not of kind k: for a bool the words and numbers a caller may mean as one."""
    common: list[object] = ["1", "true", [True], object()] + ([] if none_ok else [None])
    if k == "bool":
        return [*common, "no", "yes", "False", 0, 1, 0.0, 1.0, -1, torch.tensor(True)]
    if k == "int":
        return [*common, True, False, 1.5, float("nan"), 2.0]
    return [*common, True, False, "0.5"]


def refused(call: Callable[..., Any], *args: Any, **kw: Any) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(tc.TicketCliError) as caught:
            call(*args, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(caught.value, tc.UsageError), repr(caught.value)
    message = str(caught.value)
    assert message and "\n" not in message, message
    assert peak < PEAK, peak
    return message


@pytest.mark.parametrize("value", [5, None, True, b"csr", "CSR", ["csr"], "bsr ", object()])
def test_load_sparse_takes_a_layout_name_only(calls, value):
    """layout= (a str keyword, which the typed checks above do not cover): a name of --layout's, or one UsageError
    naming the keyword, before the ticket is read."""
    assert "layout=" in refused(calls["load_sparse"], layout=value)


def test_the_surface_has_typed_keywords():
    """The inspection finds them (a rename that hid them from it would make the tests below vacuous)."""
    found = {(c, k) for c, k, _, _ in typed_keywords()}
    assert {("Ticket.save", "overwrite"), ("extract", "progress"), ("Ticket.evaluate", "trust_model_code")} <= found
    assert {("apply_masks", "strict"), ("remove_masks", "bake"), ("extract", "seed")} <= found


def test_every_typed_keyword_is_called(calls):
    """A public function with a bool/int/float keyword gets a way to call it here."""
    assert {c for c, _, _, _ in typed_keywords()} <= set(calls)


@pytest.mark.parametrize("call,keyword,k,none_ok", typed_keywords(), ids=lambda v: str(v))
def test_a_typed_keyword_of_another_type_is_one_usage_error_naming_it(calls, call, keyword, k, none_ok, tmp_path):
    saved = calls["load"]().path
    before = saved.stat().st_mtime_ns
    for value in bad_values(k, none_ok):
        message = refused(calls[call], **{keyword: value})
        assert f"{keyword}=" in message, (value, message)
    assert saved.stat().st_mtime_ns == before  # overwrite='no' replaced nothing


@pytest.mark.parametrize("label", [2**62, 2**40, 2**31, 10**7, 70_000])
@pytest.mark.parametrize("form", list(forms(*tensors())))
def test_a_label_beyond_the_data_sizes_nothing(form, label):
    x, y = tensors()
    y = y.clone()
    y[5] = label
    for model in ("mlp:8-4", nn.Sequential(nn.Linear(8, 3))):
        message = refused(tc.extract, model, forms(x, y)[form], **FAST)  # type: ignore[arg-type]
        assert str(label) in message, (model, message)


@pytest.mark.parametrize("label", [4, 9, 1000])
def test_a_label_beyond_the_models_outputs_is_one_usage_error(label):
    x, y = tensors()
    y = y.clone()
    y[0] = label
    for model in ("mlp:8-4", nn.Sequential(nn.Linear(8, 4))):
        refused(tc.extract, model, (x, y), **FAST)  # type: ignore[arg-type]
    ticket = tc.extract("mlp:8-4", tensors(), **FAST)  # type: ignore[arg-type]
    for call in (ticket.evaluate, ticket.splits):
        refused(call, data=(x, y))


def test_labels_of_another_kind_are_refused():
    x, y = tensors()
    for labels in (y.float(), y.bool(), y - 5, y.double() + 0.5):
        for name, form in forms(x, labels).items():
            try:
                refused(tc.extract, "mlp:8-4", form, **FAST)  # type: ignore[arg-type]
            except BaseException as e:
                raise AssertionError(f"{labels.dtype} as {name}") from e
    refused(tc.extract, "mlp:8-4", (x, y[:, None]), **FAST)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "poison",
    [
        lambda x: x.fill_(math.inf),
        lambda x: x.fill_(-math.inf),
        lambda x: x.fill_(math.nan),
        lambda x: x.__setitem__((7, 3), math.nan),
        lambda x: x.__setitem__((59, 0), -math.inf),
    ],
    ids=["all +inf", "all -inf", "all NaN", "one NaN", "one -inf"],
)
def test_non_finite_inputs_are_refused(poison):
    x, y = tensors()
    x = x.clone()
    poison(x)
    for form in forms(x, y).values():
        message = refused(tc.extract, "mlp:8-4", form, **FAST)  # type: ignore[arg-type]
        assert "finite" in message, message
    ticket = tc.extract("mlp:8-4", tensors(), **FAST)  # type: ignore[arg-type]
    for call in (ticket.evaluate, ticket.splits):
        refused(call, data=(x, y))
    huge = tensors()[0].double() * 1e300  # finite in float64, infinite as the float32 the model computes in
    refused(tc.extract, "mlp:8-4", (huge, y), **FAST)  # type: ignore[arg-type]


def test_shapes_that_disagree_are_one_usage_error():
    x, y = tensors()
    x9 = tensors(features=9)[0]
    cases: dict[str, object] = {
        "a split of other features": {"extract": (x[:30], y[:30]), "val": (x9[30:45], y[30:45]), "test": (x, y)},
        "a test set of other features": {"train": (x, y), "test": (x9, y)},
        "fewer labels than inputs": (x, y[:-1]),
        "a Dataset of ragged items": Items([*x[:5], x9[0]], y[:6]),  # type: ignore[arg-type]
        "a DataLoader of ragged batches": DataLoader(Items([*x[:5], x9[0]], y[:6]), batch_size=2),  # type: ignore[arg-type]
        "a Dataset of strings": Items(["a"] * 6, y[:6]),  # type: ignore[arg-type]
        "inputs the model does not take": (x9, y),
        "no examples": (x[:0], y[:0]),
    }
    for what, data in cases.items():
        with pytest.raises(tc.UsageError, match="."):
            try:
                tc.extract("mlp:8-4", data, **FAST)  # type: ignore[arg-type]
            except tc.TicketCliError:
                raise
            except Exception as e:
                raise AssertionError(f"{what}: {type(e).__name__}: {e}") from e
    ticket = tc.extract("mlp:8-4", tensors(), **FAST)  # type: ignore[arg-type]
    refused(ticket.evaluate, data=(x9, y))


class Endless(IterableDataset):  # type: ignore[type-arg]
    """An IterableDataset that never ends."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield torch.zeros(64), torch.tensor(0)


class Failing(Items):
    """A Dataset whose own code fails on one item."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == 3:
            raise KeyError(i)
        return super().__getitem__(i)


def test_a_dataset_that_never_ends_or_fails_is_one_usage_error(monkeypatch):
    monkeypatch.setattr("ticketcli.api.data.default_max_memory", lambda: 1 << 20)
    x, y = tensors()
    for data in (Endless(), DataLoader(Endless(), batch_size=16), Failing(x, y), DataLoader(Failing(x, y))):
        refused(tc.extract, "mlp:64-4", data, **FAST)


HOSTILE: list[object] = [object(), "no", -1, 2**62, float("nan"), float("inf"), [], {}, (1, 2), b"x", True]


STUDIES = ("train_weak", "sweep_k", "drift")  # each accepted value runs a command's whole (tiny) study: seconds


def escaped(calls: dict[str, Callable[..., Any]], names: set[str]) -> list[str]:
    """What escaped other than a TicketCliError when each keyword of the calls `names` got each hostile value."""
    out = []
    for call, fn in public_calls().items():
        if call not in calls or call not in names:
            continue
        for p in inspect.signature(fn).parameters.values():
            if p.name == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.default is p.empty:
                continue
            if p.name in ("progress", "epochs", "seed", "sparsity", "method", "lr"):  # runs: covered by the typed test
                values = [object(), "no", float("nan"), []]
            else:
                values = HOSTILE
            for value in values:
                try:
                    calls[call](**{p.name: value})
                except tc.TicketCliError:
                    pass
                except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
                    out.append(f"{call}({p.name}={value!r}): {type(e).__name__}: {str(e)[:100]}")
    return out


def test_no_untyped_exception_escapes_any_keyword(calls, tmp_path, monkeypatch):
    """Every keyword of every public call, given each hostile value: success or a TicketCliError, nothing else."""
    monkeypatch.chdir(tmp_path)  # an output keyword given "no" writes there
    assert not escaped(calls, set(calls) - set(STUDIES))


@pytest.mark.slow
def test_no_untyped_exception_escapes_any_keyword_of_a_study(calls, tmp_path, monkeypatch):
    """The same for train_weak, sweep_k and drift, whose accepted values each run a tiny study."""
    monkeypatch.chdir(tmp_path)
    assert not escaped(calls, set(STUDIES))
