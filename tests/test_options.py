"""Options mean what they say: for every registered method and every method option, setting it (by flag or config
file, default value or not) is refused exactly when the method does not declare it in Method.options, naming
exactly the methods that do; each declaration is true (changing a declared option changes the ticket's masks or
metrics on a tiny run); and a ticket records only the options its method read, while older tickets that recorded
every setting still load, inspect and evaluate."""

from __future__ import annotations

import json
import re

import pytest
from helpers import for_method
from safetensors import safe_open
from safetensors.torch import save_file
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.methods.registry import method_document, own_options
from ticketcli.runs.evaluate import evaluate_ticket
from ticketcli.runs.extract import extract_ticket
from ticketcli.runs.inspect import inspect_ticket
from ticketcli.settings.readers import method_options
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.run import EXTRACT_DEFAULTS, METHOD_OPTIONS, RUN
from ticketcli.settings.setting import option_flag
from ticketcli.specs.run import DataSpec, ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io

# A valid value other than the default for every method option, as each declares it (test_values_cover_every_option
# keeps it whole). Large where the effect must show after a few steps (eps, weight_decay, betas).
OTHER = {s.name: s.example for s in RUN if s.methods}
TINY = {"dataset": "digits", "model": "mlp:64-16-10", "n_extract": 200, "n_val": 100, "device": "cpu", "seed": 0}
# small settings, given only to the methods that read them: 2 epochs of 4 steps, updates and rounds that happen
SMALL = {"epochs": 2, "batch_size": 64, "imp_rounds": 1, "synflow_rounds": 3, "regrow_every": 1, "max_rounds": 2}
TRAINING = ("epochs", "lr", "batch_size", "betas", "eps", "weight_decay", "weight_lr", "precision")
DECLARED = [(m, o) for m in METHODS.names() for o in METHOD_OPTIONS if o in method_options(m)]
runner = CliRunner()


def users(option: str) -> set[str]:
    return {m for m in METHODS.names() if option in method_options(m)}


def spec_of(method: str, **settings):
    return build_extract_spec(merge_settings({**TINY, **for_method(method, SMALL), "method": method, **settings}, None))


def named_in(message: str) -> set[str]:
    """The methods an 'X applies to a, b only, not c' message names."""
    m = re.search(r"applies to (.+) only, not ", message)
    assert m, message
    return set(m.group(1).split(", "))


def test_values_cover_every_option():
    assert set(OTHER) == set(METHOD_OPTIONS)
    assert all(OTHER[o] != EXTRACT_DEFAULTS[o] for o in OTHER)


@pytest.mark.parametrize("option", METHOD_OPTIONS)
@pytest.mark.parametrize("method", METHODS.names())
def test_an_option_is_refused_iff_the_method_does_not_declare_it(method, option):
    declared = option in method_options(method)
    for value in (OTHER[option], EXTRACT_DEFAULTS[option]):  # set explicitly, even to its default
        if value is None or (value is False and option in ("frozen_aux", "signed_scores", "project_final")):
            continue  # None and off-switches are 'not given' on the command line
        if declared:
            spec_of(method, **{option: value})
            continue
        with pytest.raises(UsageError) as e:
            spec_of(method, **{option: value})
        assert named_in(str(e.value)) == users(option) and str(e.value).endswith(f"not {method}")
        assert str(e.value).startswith(option_flag(option))


@pytest.mark.parametrize("method", METHODS.names())
def test_a_config_file_setting_is_refused_like_a_flag(tmp_path, method):
    unread = [o for o in METHOD_OPTIONS if o not in method_options(method)]
    for option in unread[:3]:
        value = OTHER[option]
        path = tmp_path / f"{option}.toml"
        path.write_text(f"{option} = {json.dumps(value)}\n")
        with pytest.raises(UsageError) as refused:
            build_extract_spec(merge_settings({**TINY, "method": method}, path))
        # the message itself ends there (pytest's match= also reads the hint, which follows as a note)
        assert str(refused.value).endswith(f"not {method}"), str(refused.value)


def test_defaults_that_nobody_set_are_never_refused():
    for method in METHODS.names():  # every default of every option, none given
        assert spec_of(method).method.name == method


def test_the_hint_names_the_sibling_option_the_method_reads():
    with pytest.raises(UsageError) as e:
        spec_of("rigl", lr=0.1)
    assert e.value.hint == "use --weight-lr"
    with pytest.raises(UsageError) as e:
        spec_of("edge-popup", weight_lr=0.1)
    assert e.value.hint == "use --lr"
    with pytest.raises(UsageError) as e:
        spec_of("imp", max_rounds=3)
    assert e.value.hint == "use --imp-rounds"
    with pytest.raises(UsageError) as e:
        spec_of("snip", epochs=50)
    assert e.value.hint == "drop --epochs; snip does not read it"


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["--method", "rigl", "--lr", "0.1"],
            "--lr applies to augmented, edge-popup, iterated, movement only, not rigl",
        ),
        (["--method", "snip", "--epochs", "50"], "--epochs applies to augmented, edge-popup, imp, iterated, movement"),
        (["--method", "rigl", "--lr", "0.01"], "--lr applies to"),  # the default value, but given: still refused
    ],
)
def test_the_command_line_refuses_an_unused_option_in_one_line(tmp_path, args, needle):
    r = runner.invoke(app, ["extract", "--dataset", "digits", "--out", str(tmp_path / "t.safetensors"), *args])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and needle in err and len(err.splitlines()) == 1 and "Traceback" not in r.output
    assert "rigl" not in args or "(hint: use --weight-lr)" in err
    assert not (tmp_path / "t.safetensors").exists()


# ---- every declaration is true: the option changes what the method produces (masks, metrics or training) ----

_runs: dict[tuple, tuple] = {}


def outcome(tmp_path_factory, method: str, **settings) -> tuple:
    """(masks, metrics, training losses, ticket) of a tiny extraction, cached per settings. The metrics include
    those of the trained weights of weight-training methods; wall time and the precision label are left out."""
    key = (method, *sorted(settings.items()))
    if key not in _runs:
        out = tmp_path_factory.mktemp("run") / "t.safetensors"
        losses: list = []
        extract_ticket(spec_of(method, **settings), out=out, progress=lambda r: losses.append(r["loss"]))
        tk = ticket_io.load(out)
        metrics = {k: v for k, v in tk.metrics.to_json().items() if k not in ("wall_time_s", "precision")}
        _runs[key] = ({n: m.tolist() for n, m in tk.masks.items()}, metrics, losses, tk)
    return _runs[key]


# a declared option whose effect needs another option set first, to stand out from a tiny run
NEEDS = {
    ("augmented", "frozen_aux"): {"weight_decay": 0.5},  # auxiliary scores only move with weight decay
    ("iterated", "frozen_aux"): {"weight_decay": 5.0, "lr": 0.5},
    ("iterated", "iter_tolerance"): {"max_rounds": 4},
}
# an option that has nothing to change in the base run itself: checked by the value that matters
VALUES = {
    ("edge-popup", "layer_densities"): "0.5,0.1",  # one density per layer of mlp:64-16-10
    ("random", "layer_densities"): "0.5,0.1",
    ("snip", "layer_densities"): "0.5,0.1",
    ("grasp", "layer_densities"): "0.5,0.1",
    ("synflow", "layer_densities"): "0.5,0.1",
    ("imp", "layer_densities"): "0.5,0.1",
    ("set", "layer_densities"): "0.5,0.1",
    ("rigl", "layer_densities"): "0.5,0.1",
    ("movement", "layer_densities"): "0.5,0.1",
    ("iterated", "max_rounds"): 1,
    ("imp", "imp_rounds"): 2,
    ("imp", "epochs"): 4,
    ("synflow", "synflow_rounds"): 1,
    ("grasp", "grasp_temperature"): 0.01,
}
# training options on every method that declares them; the others one in two (the matrix is slow on 2 cores)
CHECKED = [(m, o) for i, (m, o) in enumerate(DECLARED) if o in TRAINING or i % 2 == 0]


@pytest.mark.parametrize("method, option", CHECKED)
@pytest.mark.slow
def test_a_declared_option_changes_the_ticket(tmp_path_factory, method, option):
    base = NEEDS.get((method, option), {})
    value = VALUES.get((method, option), OTHER[option])
    before = outcome(tmp_path_factory, method, **base)[:3]
    after = outcome(tmp_path_factory, method, **base, **{option: value})[:3]
    assert after != before, f"{method} declares {option} but {option}={value} changed nothing"


# ---- the ticket records only the settings that shaped it ----

RECORDED_ALWAYS = {"name", "sparsity", "score_init"}


@pytest.mark.parametrize("method", METHODS.names())
def test_a_ticket_records_only_the_options_its_method_read(tmp_path_factory, method):
    tk = outcome(tmp_path_factory, method)[3]
    options = set(tk.method.to_json()) - RECORDED_ALWAYS - {"score_params"}
    when_set = {o.name for o in own_options() if o.when_set}  # left at their default: not recorded (Option.when_set)
    assert options == set(method_options(method)) - when_set
    assert {k: tk.method.option(k) for k in for_method(method, SMALL)} == for_method(method, SMALL)


def test_inspect_shows_the_recorded_options(tmp_path):
    out = tmp_path / "rigl.safetensors"
    extract_ticket(spec_of("rigl", weight_lr=0.01), out=out)
    r = runner.invoke(app, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    method = json.loads(r.stdout)["method"]
    assert method["weight_lr"] == 0.01 and "lr" not in method and "aux_width" not in method
    table = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "400"}).stdout
    assert "weight_lr=0.01" in table and " lr=" not in table and "aux_width" not in table


@pytest.mark.slow
def test_inspect_shows_which_grasp_reading_a_ticket_used(tmp_path):
    out = tmp_path / "grasp.safetensors"
    extract_ticket(spec_of("grasp", grasp_direction="original", grasp_data="shared"), out=out)
    method = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)["method"]
    assert (method["grasp_direction"], method["grasp_data"]) == ("original", "shared")
    table = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "400"}).stdout
    assert "grasp_direction=original, grasp_data=shared" in table and "written before" not in table
    # a grasp ticket written before the two readings existed recorded neither: it used the paper's, separate data
    old = {k: v for k, v in ticket_io.load(out).method.to_json().items() if k not in ("grasp_direction", "grasp_data")}
    rewrite_method(out, old)
    table = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "400"}).stdout
    assert "(written before grasp had two readings: paper reading, separate data)" in table


def rewrite_method(path, method: dict) -> None:
    """Replace a ticket's `method` metadata (the masks and their digest stay as they are)."""
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(path), metadata={**meta, "method": json.dumps(method)})


@pytest.mark.slow
def test_an_older_ticket_that_recorded_every_setting_still_loads_and_evaluates(tmp_path):
    """Tickets written before this change recorded every MethodSpec field, used or not (as MethodSpec.to_dict)."""
    out = tmp_path / "old.safetensors"
    spec = spec_of("snip")
    summary = extract_ticket(spec, out=out)
    rewrite_method(out, {**method_document(spec.method), "score_init": None})
    tk = ticket_io.load(out)
    assert tk.method.option("epochs") == 100 and tk.method.option("lr") == 0.01  # what the old writer recorded
    assert inspect_ticket(out)["method"]["aux_width"] == 1 and inspect_ticket(out)["integrity"] == "ok"
    result = evaluate_ticket(out, ReaderSpec(data=DataSpec(), device="cpu"))
    assert result.reproduced and result.test == summary.metrics.test
