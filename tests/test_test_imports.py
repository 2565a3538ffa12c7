"""Test modules share code only through helper modules (tests/helpers.py, tests/fuzz/harness.py, ...) and fixtures
through conftest.py: importing another test module would run its tests' module-level code twice, tie two test files
together by accident, and let pytest collect a test where it was imported."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_test_modules(tree: ast.AST) -> list[str]:
    """The dotted names of test modules (a part named test_*) that `tree` imports, at any level."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [base] + [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        found += [n for n in names if any(part.startswith("test_") for part in n.split("."))]
    return sorted(set(found))


def test_no_test_module_is_imported():
    offenders = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if (names := imported_test_modules(ast.parse(path.read_text(encoding="utf-8"), str(path))))
    }
    assert offenders == {}, "move what they share into a helper module (tests/helpers.py) or conftest.py"


def test_the_check_sees_every_form_of_import():
    code = (
        "import test_a\nfrom test_b import x\nfrom tests.test_c import y\nfrom . import test_d\nfrom helpers import z"
    )
    assert imported_test_modules(ast.parse(code)) == [
        "test_a",
        "test_b",
        "test_b.x",
        "test_d",
        "tests.test_c",
        "tests.test_c.y",
    ]
