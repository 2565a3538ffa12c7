"""ARCHITECTURE.md is the map of the code, so it must be drawn from the code: every module, package or file it names
exists, and every package of ticketcli/ is named in it. A renamed or deleted module fails here, not in a reader's
hands. The site's "How the code is laid out" page (docs/layout.py, generated when the site is built) must show every
package too, in the layer order of tests/test_layers.py, each with its own docstring."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "ticketcli"
DOC = ROOT / "ARCHITECTURE.md"
# a code span that names a file or a package: `runs/extract.py`, `runs/`, `masking.py`, `runs/extract.py:extract_ticket`
PATH = re.compile(r"`([A-Za-z_][\w/.-]*?(?:\.py|\.json|\.md|\.toml|/))(?::[\w.]+)?`")
DOTTED = re.compile(r"`(ticketcli(?:\.\w+)+)")


def named_paths(text: str) -> list[str]:
    """Every file or folder path ARCHITECTURE.md names in a code span."""
    return PATH.findall(text)


def exists(name: str) -> bool:
    """Whether `name` is a file or folder of the package (its path, or a file name found in it) or of the repo."""
    for base in (PACKAGE, ROOT):
        if (base / name).exists():
            return True
    return "/" not in name.rstrip("/") and any(PACKAGE.rglob(name.rstrip("/")))


def module_exists(dotted: str) -> bool:
    """Whether `dotted` is a module or package of ticketcli, or an attribute of one (ticketcli.runs.extract.x)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:n])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return n >= max(2, len(parts) - 1)  # a module below the package itself, or one attribute of it
    return False


def test_every_path_it_names_exists():
    text = DOC.read_text(encoding="utf-8")
    missing = sorted({p for p in named_paths(text) if not exists(p)})
    assert missing == [], f"ARCHITECTURE.md names files that do not exist: {missing}"
    dotted = sorted({d for d in DOTTED.findall(text) if not module_exists(d)})
    assert dotted == [], f"ARCHITECTURE.md names modules that do not exist: {dotted}"


def test_every_package_is_named():
    text = DOC.read_text(encoding="utf-8")
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    unnamed = [p for p in packages if f"`{p}/" not in text]
    assert unnamed == [], f"ARCHITECTURE.md does not name these packages (as `name/`): {unnamed}"


def test_the_checks_can_fail():
    """The oracle: a stale module, a stale dotted name and a real one are told apart."""
    assert named_paths("see `topk.py` and `runs/extract.py:extract_ticket` and `runs/`") == [
        "topk.py",
        "runs/extract.py",
        "runs/",
    ]
    assert not exists("topk.py") and exists("runs/extract.py") and exists("runs/") and exists("masking.py")
    assert module_exists("ticketcli.runs.extract") and module_exists("ticketcli.runs.extract.extract_ticket")
    assert not module_exists("ticketcli.catalog_that_was")


def layout_module():
    """docs/layout.py, loaded from its file (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("_ticket_docs_layout", ROOT / "docs" / "layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def layout_page() -> str:
    """The generated layout page."""
    return layout_module().layout_markdown()


def test_the_layout_page_shows_every_package_in_layer_order():
    text = layout_page()
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    unnamed = [p for p in packages if f"`ticketcli.{p}`" not in text]
    assert unnamed == [], f"the layout page does not show these packages: {unnamed}"
    layers = layout_module().load_layers()  # tests/test_layers.py's LAYERS, read from its file, not imported
    entries = [e for layer in reversed(layers) for e in layer]  # top layer first, as the page reads
    positions = [text.index(f"| `{e}` |") for e in entries]
    assert positions == sorted(positions), "the layout page does not follow LAYERS"
    assert text.count("\n## Layer ") == len(layers)
    for package in ("masking", "settings"):
        source = PACKAGE / package / "__init__.py" if (PACKAGE / package).is_dir() else PACKAGE / f"{package}.py"
        first = re.search(r'"""(.*?)(?:\n\n|""")', source.read_text(), flags=re.S)[1]
        assert " ".join(first.split()) in text, package


def benchmarks_table_gaps(contributing: str, scripts: list[str]) -> list[str]:
    """The scripts of benchmarks/ that CONTRIBUTING.md's "Benchmarks" table does not name in a code span."""
    section = contributing.split("\n## Benchmarks", 1)[-1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w.-]+\.(?:py|sh))`", section))
    return [s for s in scripts if s not in named]


def test_every_benchmark_script_is_in_contributings_table():
    scripts = sorted(p.name for p in (ROOT / "benchmarks").iterdir() if p.suffix in (".py", ".sh"))
    assert len(scripts) > 20
    assert benchmarks_table_gaps((ROOT / "CONTRIBUTING.md").read_text(), scripts) == []
    # the check can fail: a script the table does not name is reported
    table = "## Benchmarks\n\n| `speed.py` | time |\n\n## Next\n\n`other.py`\n"
    assert benchmarks_table_gaps(table, ["speed.py", "other.py"]) == ["other.py"]
