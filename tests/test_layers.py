"""One-way layers: every import inside the package, function-level ones included, points down (or sideways within
a layer, without a cycle). The layer order is written once, in LAYERS; a new module must be placed in it.

`python tests/test_layers.py [PACKAGE_DIR]` prints the import cycles and upward imports of any checkout."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "ticketcli"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# Bottom to top, by package: an entry names a package and everything in it ("ticketcli.methods"), or one of the few
# modules at the top of the package. A module may import from its own layer or any layer below, never above; within
# a layer the imports must not form a cycle. Each package's __init__ docstring says its job and what it may import.
LAYERS: list[list[str]] = [
    # foundations, torch-free: the exception family, the registry idiom, seeds, the specs and the --json contract
    [
        "ticketcli.version",
        "ticketcli.errors",
        "ticketcli.registry",
        "ticketcli.seeding",
        "ticketcli.contract",  # schema names, JSON Schemas, the typed results' base
        "ticketcli.specs",  # frozen specs, every default, the model spec syntax
        "ticketcli.files",  # atomic writes, bounded reads, nesting depth, checkpoint files
    ],
    ["ticketcli.runtime"],  # torchrun, threads, the CPU kind, worker pools, signals
    # the building blocks: networks and their costs, datasets
    ["ticketcli.models", "ticketcli.data"],
    # masks, training and the ticket file: they take specs, never flags
    ["ticketcli.masking", "ticketcli.train", "ticketcli.ticketfile"],
    ["ticketcli.selection"],  # scores -> masks: which entries compete, the exact top-k and its warm search
    ["ticketcli.methods"],  # one module per method family, behind one registry
    ["ticketcli.settings"],  # every option declared once, and flags, config files and defaults -> validated specs
    # workflows: what a command does, from specs to a typed result
    ["ticketcli.runs", "ticketcli.weak", "ticketcli.export", "ticketcli.sweep", "ticketcli.bench"],
    ["ticketcli.report", "ticketcli.track"],  # presentation: tables, JSON, plots; experiment trackers (--log-to)
    # drift, a second study whole in one package: its settings and spec, workflow, run dir, and its own views and
    # tracker feed, so it sits above presentation and trackers; only the API and the command line import it
    ["ticketcli.drift"],
    # the Python API (`import ticketcli as tc`): the package's public names, over the same specs and workflows
    ["ticketcli.api", "ticketcli"],
    ["ticketcli.cli", "ticketcli.__main__"],  # the command line
]


def module_name(path: Path, root: Path) -> str:
    """ticketcli/methods/base.py -> ticketcli.methods.base; a package's __init__.py is the package."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every dotted name an import anywhere in `tree` loads (module- and function-level, relative ones resolved):
    `from a.b import c` is a.b.c when that is a module, else a.b (c is then an attribute of a.b)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (for each imported name, the longest prefix that is a module)."""
    modules = package_modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = set()
        for imported in imported_names(tree, name, path.name == "__init__.py"):
            parts = imported.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    was = sys.getrecursionlimit()
    sys.setrecursionlimit(max(was, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(was)  # the rest of the process (its JSON readers among others) keeps its own
    return sorted(found, key=lambda c: (-len(c), c))


def layer_of(module: str, layers: list[list[str]] = LAYERS) -> int | None:
    """The index of the layer that places `module` (the longest matching entry wins), None if none does."""
    best: tuple[int, int] | None = None
    for i, layer in enumerate(layers):
        for entry in layer:
            if module == entry or module.startswith(entry + ".") and entry != PACKAGE:
                if best is None or len(entry) > best[1]:
                    best = (i, len(entry))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]], layers: list[list[str]] = LAYERS) -> list[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits in a higher layer than the importer."""
    out = []
    for src, targets in sorted(graph.items()):
        for dst in sorted(targets):
            a, b = layer_of(src, layers), layer_of(dst, layers)
            if a is not None and b is not None and b > a:
                out.append((src, dst))
    return out


def test_every_module_is_placed_in_a_layer():
    unplaced = [m for m in package_modules(ROOT) if layer_of(m) is None]
    assert not unplaced, f"place these modules in LAYERS (tests/test_layers.py): {unplaced}"


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_no_upward_imports():
    assert upward_imports(import_graph(ROOT)) == []


def test_every_layer_entry_names_a_module():
    """A stale entry (a renamed or deleted module) would silently place nothing."""
    modules = package_modules(ROOT)
    stale = [e for layer in LAYERS for e in layer if not any(m == e or m.startswith(e + ".") for m in modules)]
    assert stale == []


def test_the_analyser_sees_function_level_and_relative_imports(tmp_path):
    """The checks above can fail: a function-level import upwards and a relative import cycle are both found."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "specs.py").write_text("def f():\n    from ticketcli.cli import app\n")
    (pkg / "cli.py").write_text("app = 1\n")
    (pkg / "sub" / "__init__.py").write_text("from . import a\n")
    (pkg / "sub" / "a.py").write_text("from ..sub import b\n")
    (pkg / "sub" / "b.py").write_text("from . import a\n")
    graph = import_graph(pkg)
    assert graph["ticketcli.specs"] == {"ticketcli.cli"}
    assert cycles(graph) == [["ticketcli.sub.a", "ticketcli.sub.b"]]
    layers = [["ticketcli.specs", "ticketcli.sub"], ["ticketcli.cli"]]
    assert upward_imports(graph, layers) == [("ticketcli.specs", "ticketcli.cli")]


def test_the_top_holds_few_modules():
    """The package is drawn by concern: a module at the top of ticketcli/ is either the package's entry (__init__,
    __main__) or one of the few that every layer shares; anything else belongs in the package that names its job."""
    top = sorted(p.stem for p in ROOT.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(top) <= 8, top


def test_every_package_is_one_layer_and_says_its_job():
    """A layer entry is a whole package (or a top module), never a module inside a package, and every package's
    __init__ opens with a docstring that says what it holds and what it may import."""
    packages = sorted(p.parent for p in ROOT.glob("*/__init__.py"))
    entries = {e for layer in LAYERS for e in layer}
    assert all(e.count(".") <= 1 for e in entries), sorted(e for e in entries if e.count(".") > 1)
    assert not [p.name for p in packages if f"{PACKAGE}.{p.name}" not in entries]
    for p in packages:
        doc = ast.get_docstring(ast.parse((p / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "import" in doc.lower(), f"{p.name}/__init__.py: say its job and what it may import"


def test_no_module_is_over_350_lines():
    """Small rooms: a module past about 350 lines usually holds two concerns, so it is split by concern (its
    docstring says what it holds)."""
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 350}
    assert long == {}


def main(root: Path) -> None:
    """Print the cycles and upward imports of the package at `root` (for before/after measurements)."""
    graph = import_graph(root)
    found = cycles(graph)
    print(f"modules: {len(graph)}, import edges: {sum(map(len, graph.values()))}")
    print(f"cycles (SCCs of >1 module): {len(found)}, largest: {max(map(len, found), default=0)}")
    for c in found:
        print("  cycle:", " ".join(c))
    up = upward_imports(graph)
    print(f"upward imports (by LAYERS): {len(up)}")
    for src, dst in up:
        print(f"  {src} -> {dst}")
    unplaced = [m for m in graph if layer_of(m) is None]
    print(f"unplaced modules: {len(unplaced)} {unplaced}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT)
