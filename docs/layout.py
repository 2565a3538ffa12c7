"""The site's "How the code is laid out" page, generated from the code itself: the layers of tests/test_layers.py's
LAYERS (top to bottom, each importing only from itself and below) and, for each package or module of a layer, the
first paragraph of its docstring and the modules it holds. docs/hooks.py builds the page with it;
tests/test_architecture_doc.py checks that it names every package."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_layers(repo: Path = REPO) -> list[list[str]]:
    """LAYERS from tests/test_layers.py, where the layer order is written once (loaded from its file: tests/ is no
    package)."""
    spec = importlib.util.spec_from_file_location("_ticket_test_layers", repo / "tests" / "test_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    layers: list[list[str]] = module.LAYERS
    return layers


def source_of(dotted: str, repo: Path = REPO) -> Path:
    """The file of a module or package by dotted name (a package's __init__.py)."""
    path = repo.joinpath(*dotted.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def summary(path: Path) -> str:
    """The first paragraph of a module's docstring, on one line (read with ast: nothing is imported)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split())


def layout_markdown(layers: list[list[str]] | None = None, repo: Path = REPO) -> str:
    """The page (Markdown): one section per layer, top first, one row per package or top-level module."""
    layers = load_layers(repo) if layers is None else layers
    lines = [
        "# How the code is laid out",
        "",
        "Generated from the code when the site is built: the layers are `LAYERS` in `tests/test_layers.py`,",
        "which checks that every import points down (or sideways within a layer, without a cycle); each row is",
        "the first paragraph of that package's or module's docstring. [Architecture](../../ARCHITECTURE.md) follows",
        "a flag from the command line to the kernel and says where to add a method, a model, a dataset or an",
        "option.",
        "",
    ]
    for number, layer in reversed(list(enumerate(layers, start=1))):
        lines += [f"## Layer {number}", "", "| package or module | what it holds | modules |", "| --- | --- | --- |"]
        for dotted in layer:
            path = source_of(dotted, repo)
            inner = sorted(p.relative_to(path.parent).as_posix() for p in path.parent.rglob("*.py"))
            # the top package's modules are the other rows; a subpackage lists its own
            below = path.name == "__init__.py" and "." in dotted
            modules = ", ".join(m for m in inner if m != "__init__.py") if below else ""
            text = summary(path).replace("|", "\\|")
            lines.append(f"| `{dotted}` | {text} | {modules} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
