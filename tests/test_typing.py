"""Strict typing (CONTRIBUTING.md, "Typing"): pyproject.toml's mypy configuration is strict for every module of the
package (no override block relaxes it for one), and the configuration really fails a strict violation (CI runs
plain `mypy`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"

# The modules that may relax strict checks in an override block: none. Every module of the package is strict (the
# last ones were converted after `strict = true` went in), and a new one is strict from its first commit.
NOT_YET_STRICT: frozenset[str] = frozenset()


def mypy_config() -> dict:
    return tomllib.loads(CONFIG.read_text())["tool"]["mypy"]


def legacy_modules() -> list[str]:
    """The override block of our own modules (the other blocks configure third-party ones); none once every module
    is strict."""
    blocks = [o for o in mypy_config().get("overrides", []) if any(m.startswith("ticketcli") for m in o["module"])]
    assert len(blocks) <= 1, "at most one [[tool.mypy.overrides]] block lists modules of ticketcli"
    return blocks[0]["module"] if blocks else []


def module_file(name: str) -> Path:
    path = ROOT.joinpath(*name.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_strict_is_on_and_ci_runs_plain_mypy():
    cfg = mypy_config()
    assert cfg["strict"] is True
    assert cfg["files"] == ["ticketcli"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    # plain `mypy`: no file arguments or flags, so that pyproject.toml's configuration is what CI checks; it runs in
    # the background beside the suite, and its exit status, waited for, fails CI
    assert '"$PY" -m mypy >"$types_log" 2>&1 &' in [line.strip() for line in ci]
    assert [line.strip() for line in ci if "types_pid" in line or "types_rc" in line] == [
        "types_pid=$!",
        '"$PY" -m mkdocs build --strict --site-dir "$site" || { kill "$types_pid" 2>/dev/null; exit 1; }',
        'wait "$types_pid"',
        "types_rc=$?",
        'if [ "$types_rc" -ne 0 ]; then',
    ]
    assert ci[ci.index('if [ "$types_rc" -ne 0 ]; then') + 2].strip() == "exit 1"


def test_override_list_only_shrinks_and_names_real_modules():
    listed = legacy_modules()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert listed == sorted(listed), "keep the list sorted"
    added = set(listed) - NOT_YET_STRICT
    assert not added, f"new modules must be strict, not added to the override list: {sorted(added)}"
    missing = [m for m in listed if not module_file(m).is_file()]
    assert not missing, f"listed modules that no longer exist (delete their lines): {missing}"


@pytest.mark.slow
def test_config_fails_a_violation_outside_the_list_only(tmp_path: Path):
    """mypy with the project's configuration, on a package shaped like ours: the same untyped code is an error in
    a module outside the list and accepted in a listed one (the error alone once no module is listed)."""
    api = pytest.importorskip("mypy.api", reason="mypy comes with the dev extra (pip install -e '.[dev]')")
    # a listed module, not a package; none once every module is strict
    listed = [m for m in legacy_modules() if module_file(m).name != "__init__.py"][:1]
    code = "def untyped(x):\n    return x\n\n\ndef bare() -> dict:\n    return {}\n"
    for name in (*listed, "ticketcli.strict_probe"):
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for package in path.relative_to(tmp_path).parents[:-1]:
            (tmp_path / package / "__init__.py").touch()
        path.write_text(code)
    out, err, status = api.run(
        ["--config-file", str(CONFIG), "--cache-dir", str(tmp_path / "cache"), str(tmp_path / "ticketcli")]
    )
    assert status == 1, out + err
    errors = [line for line in out.splitlines() if ": error:" in line]
    probe = [line for line in errors if "strict_probe.py" in line]
    assert any("[no-untyped-def]" in line for line in probe), out
    assert any("[type-arg]" in line for line in probe), out
    assert len(probe) == len(errors), f"the listed module {listed[0]} keeps its old checks:\n{out}"
