"""Hostile reproduction. `ticket inspect --command/--toml` turns what a ticket records into a command line and a
config file that someone will run, so every recorded field it maps (the method and each of its options, seed, model
spec, init scheme and k, dataset, split sizes, device, process count, checkpoint path, the file's own name, the
version in the notes) is crafted here: a value extract would refuse (a wrong kind, out of range, a name no registry
has, an option the method does not read, a factory of the standard library), or text with a newline, an escape or
a bidi mark. Each ends with exit 2 and one `error:` line naming the field, nothing on stdout. What is accepted is
exactly what extract accepts (its own config reader and resolution take the printed TOML), the command is one
printable line, and the warnings and the TOML say when the command runs a factory or needs --weights."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from harness import edit_json, edit_metadata
from hostile import assert_clean, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ticketcli.methods.registry import METHODS
from ticketcli.runs.reproduce import METHOD_KEYS as RECORDED
from ticketcli.settings.readers import method_reads
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.run import RUN

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# every option a method record holds: the method settings among extract's settings
METHOD_KEYS = sorted(RECORDED)
# a valid value for the options whose default is None (not recorded then)
VALID = {"aug_density": 0.5, "layer_densities": [0.5, 0.5], "structure": "2:4", "block": "4x4"}
# what a valid record holds beside such a value: N:M's sparsity is the one it implies
BESIDE = {"structure": {"sparsity": 0.5}}
# values no option of any kind accepts: text carrying a flag, text carrying a line, a number beyond every range
HOSTILE = ["0.9 --trust-model-code", "x\n--evil", -1e300]
# text that must never reach a command line or a TOML line as it is
CONTROL = ["\n", "\r", "\x1b[31m", "\u202e", "\u2028", "\x00", "\t"]


def reader_of(key: str) -> str:
    """A method that reads option `key`, so that the value itself is judged (not the method's not reading it)."""
    return next(m for m in METHODS.names() if method_reads(m, key))


def craft(tmp_path: Path, raw: bytes, name: str = "t.safetensors", **edits) -> Path:
    """The seed ticket with JSON metadata fields edited (field=fn mutating the parsed value, or a str replacing it)."""
    for field, change in edits.items():
        raw = edit_metadata(raw, **{field: change}) if isinstance(change, str) else edit_json(raw, field, change)
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def refused(path: Path, field: str) -> None:
    for flag in ("--command", "--toml"):
        r = cli("inspect", str(path), flag)
        assert_clean(r, 2, contains="no command reproduces this ticket")
        assert field in r.stderr, r.stderr
        assert r.stdout == ""


def accepted(path: Path) -> tuple[list[str], dict, str]:
    """The command's words, the TOML as extract's config reader parses it, and stderr; each checked for shape."""
    r = cli("inspect", str(path), "--command", "--toml")
    assert r.exit_code == 0, r.stderr
    command, _, toml = r.stdout.partition("\n\n")
    assert command and "\n" not in command and command.isprintable()
    for line in r.stdout.splitlines() + r.stderr.splitlines():
        assert line.isprintable(), repr(line)
    return shlex.split(command), tomllib.loads(toml), r.stderr


def extract_takes(toml: str, tmp_path: Path) -> None:
    """extract's own config reader and resolution accept the printed TOML (nothing is run)."""
    config = tmp_path / "reproduce.toml"
    config.write_text(toml, encoding="utf-8")
    build_extract_spec(merge_settings({}, config))


@pytest.fixture(scope="module")
def raw(ticket: Path) -> bytes:
    return ticket.read_bytes()


@pytest.mark.parametrize("key", METHOD_KEYS)
def test_every_method_option_is_checked_as_extract_checks_it(key, raw, tmp_path):
    method = reader_of(key)
    for value in HOSTILE:
        path = craft(tmp_path, raw, method=lambda m, v=value: m.update(name=method, **{key: v}))
        refused(path, key)
    good = RUN[key].value if RUN[key].value is not None else VALID[key]
    path = craft(tmp_path, raw, method=lambda m: m.update(name=method, **{key: good}, **BESIDE.get(key, {})))
    words, config, _ = accepted(path)
    assert key in config and words[words.index("--method") + 1] == method
    extract_takes(cli("inspect", str(path), "--toml").stdout, tmp_path)


@pytest.mark.parametrize(
    ("field", "change", "named"),
    [
        ("method", lambda m: m.update(name="nope"), "method"),
        ("method", lambda m: m.update(name="random\n--evil"), "method"),
        ("method", lambda m: m.update(lr=0.1), "--lr"),  # random reads no --lr: extract refuses it
        ("method", lambda m: m.update(name="movement", movement_warmup=0.6, movement_cooldown=0.6), "movement"),
        ("method", lambda m: m.update(name="augmented", betas=[0.9, 0.99, 0.9]), "--betas"),
        ("method", lambda m: m.update(data_dir="/etc"), "data_dir"),  # no method option: never recorded there
        ("method", lambda m: m.update(weights="w.pt"), "weights"),
        ("method", lambda m: m.update(match_sparsity="x.safetensors"), "match_sparsity"),
        ("model", lambda m: m.update(spec="mlp:64-13-10+bias\n"), "model"),
        ("model", lambda m: m.update(spec=" mlp:64-13-10+bias"), "model"),
        ("model", lambda m: m.update(spec="mlp:64-x-10"), "model"),
        ("model", lambda m: m.update(spec="nope:3"), "model"),
        ("model", lambda m: m.update(spec="os:system", arch="mlp"), "os:system"),
        ("model", lambda m: m.update(spec="code:interact", arch="user"), "standard library"),
        ("model", lambda m: m.update(spec="torch.nn:Linear", arch="user"), "torch"),
        ("model", lambda m: m.update(spec="__main__:Net", arch="user"), "script"),
        ("init", lambda m: m.update(scheme="nope"), "init"),
        ("init", lambda m: m.update(scheme="scaled-kaiming-uniform\n--evil"), "init"),
        ("init", lambda m: m.update(scheme="module"), "--init module"),  # a built-in model has no weights of its own
        ("init", lambda m: m.update(k=1e-9), "init_k"),  # the reader takes it, extract's --init-k does not
        ("data", lambda m: m.update(n_extract=10**12), "n_extract"),
        ("data", lambda m: m.update(n_val=10**12), "n_val"),
        ("data", lambda m: m.update(dataset="digits\n"), "dataset"),
        ("metrics", lambda m: m.update(device="cpu; rm -rf ~"), "device"),
        ("metrics", lambda m: m.update(device="cuda\n"), "device"),
        ("metrics", lambda m: m.update(device="meta"), "device"),
        ("metrics", lambda m: m.update(processes=0), "processes"),
        ("metrics", lambda m: m.update(processes=10**6), "processes"),
        ("created_by", lambda m: m.update(ticketcli="0.0.1\x1b[2J"), "created_by.ticketcli"),
    ],
)
def test_each_recorded_field_extract_would_refuse_is_one_line_naming_it(field, change, named, raw, tmp_path):
    refused(craft(tmp_path, raw, **{field: change}), named)


@pytest.mark.parametrize("text", CONTROL[:-2])  # NUL and tab: file names the tests' file system refuses or keeps
def test_a_control_character_in_the_file_name_or_the_checkpoint_path_is_refused(text, raw, tmp_path):
    refused(craft(tmp_path, raw, name=f"t{text}x.safetensors"), "file name")
    checkpoint = json.dumps({"path": f"w{text}.pt"})
    refused(craft(tmp_path, raw, checkpoint=checkpoint), "weights")


def test_a_factory_and_a_checkpoint_are_said_on_stderr_and_in_the_toml(raw, tmp_path):
    path = craft(
        tmp_path,
        raw,
        model=lambda m: m.update(spec="mypkg.nets:build@1x8x8-10", arch="user"),
        checkpoint=json.dumps({"path": "w.pt"}),
    )
    words, config, stderr = accepted(path)
    assert words[words.index("--model") + 1] == "mypkg.nets:build@1x8x8-10"
    assert words[words.index("--weights") + 1] == str(tmp_path / "w.pt")
    assert "--trust-model-code" not in words  # said, never added for the reader to run blindly
    toml = cli("inspect", str(path), "--toml").stdout
    for text in (stderr, toml):
        assert "mypkg.nets:build" in text and "--trust-model-code" in text and "--weights" in text
    assert all(line.startswith("# note:") for line in toml.splitlines() if "--weights" in line)


def test_a_checkpoint_without_its_path_is_refused(raw, tmp_path):
    refused(craft(tmp_path, raw, checkpoint=json.dumps({"sha256": "0" * 64})), "checkpoint")


def test_a_plain_ticket_reproduces_as_before(raw, tmp_path):
    path = craft(tmp_path, raw)
    words, config, stderr = accepted(path)
    assert words[:2] == ["ticket", "extract"] and config["sparsity"] == 0.7 and stderr == ""
    extract_takes(cli("inspect", str(path), "--toml").stdout, tmp_path)


TEXT_FIELDS = {  # every recorded text that reproduce maps, and where it sits in the metadata
    "method": lambda v: ("method", lambda m: m.update(name=v)),
    "precision": lambda v: ("method", lambda m: m.update(name="augmented", precision=v)),
    "grasp_direction": lambda v: ("method", lambda m: m.update(name="grasp", grasp_direction=v)),
    "grasp_data": lambda v: ("method", lambda m: m.update(name="grasp", grasp_data=v)),
    "layer_densities": lambda v: ("method", lambda m: m.update(name="random", layer_densities=v)),
    "model": lambda v: ("model", lambda m: m.update(spec=v)),
    "init": lambda v: ("init", lambda m: m.update(scheme=v)),
    "dataset": lambda v: ("data", lambda m: m.update(dataset=v)),
    "device": lambda v: ("metrics", lambda m: m.update(device=v)),
    "weights": lambda v: ("checkpoint", json.dumps({"path": v})),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(sorted(TEXT_FIELDS)),
    text=st.text(st.characters(codec="utf-8"), max_size=12).map(lambda s: "random" + s),
)
@pytest.mark.slow
def test_any_recorded_text_is_refused_or_printed_as_one_printable_line(field, text, raw, tmp_path):
    """Whatever text a field holds: exit 2 with one line, or exit 0 with a one-line command and printable lines,
    the TOML read back by extract's config reader."""
    where, change = TEXT_FIELDS[field](text)
    path = craft(tmp_path, raw, **{where: change})
    r = cli("inspect", str(path), "--command", "--toml")
    if r.exit_code == 2:
        assert_clean(r, 2)
        return
    assert r.exit_code == 0, r.stderr
    command, _, toml = r.stdout.partition("\n\n")
    assert command and "\n" not in command and all(line.isprintable() for line in (r.stdout + r.stderr).splitlines())
    tomllib.loads(toml)
