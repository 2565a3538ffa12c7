"""One name per option: the flag a user types is the config file's key with dashes (`--global-topk` ↔
`global_topk`), the name errors use (specs.option_flag) and the Python API's keyword; the old `--global` still
works, with a deprecation warning."""

from __future__ import annotations

import pytest
import typer.main
from safetensors import safe_open
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.settings.run import EXTRACT_DEFAULTS
from ticketcli.settings.setting import option_flag

runner = CliRunner()
TINY = ["extract", "--method", "edge-popup", "--dataset", "digits", "--model", "mlp:64-16-10", "--epochs", "1"]
TINY += ["--n-extract", "200", "--n-val", "100", "--sparsity", "0.7", "--quiet"]


def params(command: str):
    return typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]


def test_every_extract_setting_is_typed_as_its_config_key():
    visible = [p for p in params("extract") if p.param_type_name == "option" and not p.hidden]
    settings = [p for p in visible if p.name in EXTRACT_DEFAULTS]
    assert len(settings) > 30
    for p in settings:
        assert p.opts[0] == option_flag(p.name) == "--" + p.name.replace("_", "-"), p.name
    assert "global_topk" in {p.name for p in settings}


def masks(path) -> dict:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).tolist() for k in f.keys()}


@pytest.mark.slow
def test_global_topk_by_flag_config_key_and_the_deprecated_spelling(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("global_topk = true\n")
    runs = {
        "flag": ["--global-topk"],
        "config": ["--config", str(cfg)],
        "old": ["--global"],
        "per-layer": [],
    }
    got = {}
    for name, extra in runs.items():
        out = tmp_path / f"{name}.safetensors"
        r = runner.invoke(app, [*TINY, *extra, "--out", str(out)])
        assert r.exit_code == 0, r.output
        got[name] = masks(out)
        deprecated = "warning: --global is deprecated: use --global-topk" in r.stderr
        assert deprecated == (name == "old"), r.stderr
    assert got["flag"] == got["config"] == got["old"] != got["per-layer"]


def test_the_error_names_the_flag_a_user_types(tmp_path):
    r = runner.invoke(
        app, [*TINY, "--global-topk", "--layer-densities", "0.5,0.5", "--out", str(tmp_path / "t.safetensors")]
    )
    assert r.exit_code == 2 and "--global-topk and --layer-densities exclude each other" in r.stderr
    r = runner.invoke(app, [*TINY[:2], "random", *TINY[3:], "--global-topk", "--out", str(tmp_path / "u.safetensors")])
    assert r.exit_code == 2 and "--global-topk applies to" in r.stderr, r.stderr
