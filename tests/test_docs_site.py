"""The README is a front page and the manual is a MkDocs site (mkdocs.yml, docs/hooks.py): the README stays short
and keeps the two commands CI and newcomers run, it names every command, every page of docs/ is in the site's
navigation, and the hooks re-point the links that leave docs/ so the same Markdown works on a code host and in the
site. `mkdocs build --strict` itself runs in CI (.ci/run)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import typer

from ticketcli.cli.app import app

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES, MAX_BYTES = 300, 20 * 1024  # a page a newcomer reads in two minutes


def hooks():
    """docs/hooks.py (loaded from its file: docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("_ticket_docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages() -> list[str]:
    """Every page mkdocs.yml's nav lists (read as text: the file holds a !!python tag a safe YAML loader refuses)."""
    text = (REPO / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return re.findall(r"^\s+-\s+(?:[^:\n]+:\s+)?([\w./-]+\.md)\s*$", nav, flags=re.M)


def test_readme_is_a_front_page():
    data = README.read_bytes()
    assert len(data.decode().splitlines()) <= MAX_LINES, f"README.md has more than {MAX_LINES} lines"
    assert len(data) <= MAX_BYTES, f"README.md has more than {MAX_BYTES} bytes"


def test_readme_keeps_the_two_commands_and_serves_the_manual():
    text = README.read_text()
    main = (
        "bash install.sh && source .venv/bin/activate && ticket extract --method augmented --sparsity 0.9 --seed 0 "
        "--download --out ticket.safetensors && ticket evaluate ticket.safetensors"
    )
    assert main in text.splitlines()
    assert "bash .ci/run" in text.splitlines() and any(
        line.startswith("python3 -m pytest -q ") for line in text.splitlines()
    )
    assert "pip install -e '.[docs]'" in text and "mkdocs serve" in text
    assert "(docs/drift_tradeoff.png)" in text and (REPO / "docs" / "drift_tradeoff.png").is_file()


def test_readme_lists_every_command():
    table = re.findall(r"^\| \[`ticket ([\w-]+)", README.read_text(), flags=re.M)
    assert sorted(table) == sorted(typer.main.get_command(app).commands)


def test_every_page_is_in_the_navigation():
    listed = nav_pages()
    on_disk = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    root = set(hooks().ROOT_PAGES.values())
    generated = set(hooks().GENERATED)
    assert sorted(on_disk - set(listed)) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(set(listed) - on_disk - root - generated) == [], "nav entries that are no page"
    assert len(listed) == len(set(listed))


def test_links_are_repointed_from_repository_paths_to_site_paths():
    h = hooks()
    readme = "See [x](docs/guide/extract.md#config), [`y`](ARCHITECTURE.md) and `[z](docs/api.md)`.\n"
    assert h.rewrite(readme, "index.md") == (
        "See [x](guide/extract.md#config), [`y`](architecture.md) and `[z](docs/api.md)`.\n"
    )
    page = "[n](../../examples/notebook.py), [r](../results.md), [m](missing.md)\n```\n[k](../api.md)\n```\n"
    assert h.rewrite(page, "guide/x.md") == (
        "[n](../repo/examples/notebook.py), [r](../results.md), [m](missing.md)\n```\n[k](../api.md)\n```\n"
    )
    assert h.relative_targets(page) == ["../../examples/notebook.py", "../results.md", "missing.md"]
    assert h.repo_path(h.site_uri("CONTRIBUTING.md")) == "CONTRIBUTING.md"
    assert h.repo_path(h.site_uri("docs/guide/drift.md")) == "docs/guide/drift.md"


def test_the_python_reference_covers_every_public_name():
    import ticketcli

    text = hooks().python_reference()
    documented = set(re.findall(r"^::: [\w.]+\.(\w+)$", text, flags=re.M))
    assert documented == set(ticketcli.__all__) - {"__version__"}
