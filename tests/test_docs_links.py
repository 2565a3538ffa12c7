"""The documentation stands alone: every relative link in README.md, ARCHITECTURE.md, CONTRIBUTING.md and every page
under docs/ (and in the pages the site generates, docs/hooks.py) points to a file of the repository or a generated
page (and, with #anchor, to a heading of it), and nothing links outside it (papers are cited by arXiv number as
plain text)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").rglob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title"), images too
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)  # [label]: target
URL = re.compile(r"\b(?:https?|ftp)://|\bwww\.", re.I)


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where a link is a link."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.M | re.S)
    return re.sub(r"(`+).*?\1", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file, repeated headings numbered as GitHub numbers them (-1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", path.read_text(), flags=re.M | re.S).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    text = prose(path.read_text())
    return LINK.findall(text) + REFERENCE.findall(text)


def hooks():
    """docs/hooks.py, which generates the site's reference pages (loaded from its file: docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("_ticket_docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated(tmp: Path) -> dict[Path, Path]:
    """Each generated page's path as docs/ would hold it -> the page written under `tmp`."""
    out = {}
    for uri, text in hooks().generated_pages().items():
        path = tmp / uri
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out[REPO / "docs" / uri] = path
    return out


@pytest.fixture(scope="module")
def generated_pages(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, Path]:
    return generated(tmp_path_factory.mktemp("generated"))


def test_every_document_is_checked():
    names = {p.relative_to(REPO).as_posix() for p in DOCS}
    assert {"README.md", "docs/results.md", "docs/method.md", "docs/format.md", "docs/guide/extract.md"} <= names
    assert {"docs/reference/models.md", "docs/reference/reliability.md"} <= names


@pytest.mark.parametrize("uri", ["reference/cli.md", "reference/layout.md"])
def test_generated_pages_links_resolve(uri: str, generated_pages: dict[Path, Path]):
    """A generated page's links are checked as if it were in docs/ (where the site puts it)."""
    page = generated_pages[REPO / "docs" / uri]
    assert broken_links(REPO / "docs" / uri, links(page), generated_pages) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve_and_none_leave_the_repository(doc: Path, generated_pages: dict[Path, Path]):
    assert broken_links(doc, links(doc), generated_pages) == []


def broken_links(doc: Path, targets: list[str], generated_pages: dict[Path, Path]) -> list[str]:
    """What is wrong with each of the links `targets` of page `doc`; a generated page stands in for its docs/ path."""
    broken = []
    for target in targets:
        if URL.match(target) or target.startswith(("mailto:", "//", "/")):
            broken.append(f"{target}: points outside the repository")
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        dest = generated_pages.get(dest, dest)
        if dest in generated_pages.values():
            if anchor and anchor not in anchors(dest):
                broken.append(f"{target}: the generated {dest.name} has no heading #{anchor}")
        elif not dest.exists() or REPO not in dest.parents:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading #{anchor}")
    return broken


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_bare_web_address(doc: Path):
    """A bare https://... renders as a link on GitHub; cite papers by arXiv number instead."""
    assert not [line for line in prose(doc.read_text()).splitlines() if URL.search(line)]


def test_the_checker_catches_what_it_should(tmp_path: Path):
    text = "See [a](missing.md), [b](README.md#nowhere), ![c](https://example.com/x.png) and `[d](code.md)`.\n"
    assert links_of(text) == ["missing.md", "README.md#nowhere", "https://example.com/x.png"]
    assert slug("`ticket sweep-k`") == "ticket-sweep-k"
    assert slug("Ticket file format (v1)") == "ticket-file-format-v1"
    assert slug("Progress, colour and logs") == "progress-colour-and-logs"
    md = tmp_path / "x.md"
    md.write_text("# A\n## A\n```\n# not a heading\n```\n")
    assert anchors(md) == {"a", "a-1"}


def links_of(text: str) -> list[str]:
    return LINK.findall(prose(text)) + REFERENCE.findall(prose(text))
