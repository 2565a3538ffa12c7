"""The documentation stands alone: every relative link in README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/*.md
points to a file of the repository (and, with #anchor, to a heading of that file), and nothing links outside it
(papers are cited by arXiv number as plain text)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
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


def test_every_document_is_checked():
    names = {p.relative_to(REPO).as_posix() for p in DOCS}
    assert {"README.md", "docs/results.md", "docs/method.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve_and_none_leave_the_repository(doc: Path):
    broken = []
    for target in links(doc):
        if URL.match(target) or target.startswith(("mailto:", "//", "/")):
            broken.append(f"{target}: points outside the repository")
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists() or REPO not in dest.parents:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading #{anchor}")
    assert not broken, broken


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
