"""MkDocs hooks (mkdocs.yml `hooks:`): the pages the site builds from the code and from the repository root, and
the links that leave docs/.

- Generated pages: reference/cli.md (every command's options, ticketcli.cli.reference, from their declarations),
  reference/python.md (mkdocstrings directives for each public name `ticketcli/__init__.py` exports) and
  reference/layout.md (docs/layout.py: the layers and the package docstrings). Nothing generated is written into
  docs/, so none of it can be edited by hand or go stale.
- The repository's own README.md, ARCHITECTURE.md and CONTRIBUTING.md are the site's index.md, architecture.md
  and contributing.md (read from where they are, never copied), and any other repository file a page links to
  (examples/notebook.py) is served under repo/, so the Markdown links that work on a code host work in the site.
- Every page's relative links are re-pointed from repository paths to those site paths; a link to a file that
  does not exist is left as written, so `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import importlib.util
import posixpath
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mkdocs.structure.files import Files

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # this checkout's ticketcli, not an installed one

# pages that exist only in the built site (tests/test_docs_links.py accepts links to them)
GENERATED = ("reference/cli.md", "reference/python.md", "reference/layout.md")
ROOT_PAGES = {"README.md": "index.md", "ARCHITECTURE.md": "architecture.md", "CONTRIBUTING.md": "contributing.md"}
# code is not prose: fenced blocks and inline code spans are left alone (as tests/test_docs_links.py reads links)
CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$|(`+).*?\2", re.M | re.S)
LINK = re.compile(r"(!?\[[^\]]*\]\(\s*<?)([^)\s>]+)")


def site_uri(repo_path: str) -> str:
    """Where a repository file is in the site."""
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return ROOT_PAGES.get(repo_path, "repo/" + repo_path)


def repo_path(uri: str) -> str:
    """Which repository file a site path shows (the inverse of site_uri)."""
    for path, page in ROOT_PAGES.items():
        if uri == page:
            return path
    return uri.removeprefix("repo/") if uri.startswith("repo/") else "docs/" + uri


def prose_links(text: str) -> list[re.Match[str]]:
    """The links of a page's prose, found with its code masked (a code span inside a link's text stays part of it)."""
    masked = CODE.sub(lambda m: "`" * len(m[0]), text)  # same length, so each match's span holds in `text` too
    return [m for m in LINK.finditer(masked)]


def relative(target: str) -> bool:
    """A link to another file of the repository: no web address, no in-page anchor, no absolute path."""
    return not re.match(r"[a-z][\w+.-]*:|/|#", target)


def relative_targets(text: str) -> list[str]:
    """The relative link targets of a page's prose."""
    return [m[2] for m in prose_links(text) if relative(m[2])]


def resolve(page_repo_path: str, target: str) -> str:
    """The repository path a link on a page points to (its anchor dropped)."""
    file = target.partition("#")[0]
    return posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), file))


def rewrite(text: str, page_uri: str) -> str:
    """The page with each relative link pointing where its repository file is in the site."""
    here = repo_path(page_uri)
    pieces = []
    last = 0
    for m in prose_links(text):
        target = m[2]
        if not relative(target) or not (REPO / resolve(here, target)).exists():
            continue  # left as written: a missing file is mkdocs' warning, so --strict fails on it
        anchor = target.partition("#")[2]
        new = posixpath.relpath(site_uri(resolve(here, target)), posixpath.dirname(page_uri) or ".")
        pieces += [text[last : m.start(2)], new + ("#" + anchor if anchor else "")]
        last = m.end(2)
    return "".join([*pieces, text[last:]])


def python_reference() -> str:
    """mkdocstrings directives for every public name of `ticketcli`, grouped by the module that defines it."""
    import ticketcli

    by_module: dict[str, list[str]] = {}
    for name in ticketcli.__all__:
        if name in ticketcli._PUBLIC:
            by_module.setdefault(ticketcli._PUBLIC[name], []).append(name)
    lines = [
        "# Python API reference",
        "",
        "Generated from the docstrings of the names `ticketcli` exports (`import ticketcli as tc`; `tc.Ticket`,",
        "`tc.extract`, ...). The guide with worked examples is [The Python API](../api.md).",
        "",
    ]
    for module, names in by_module.items():
        lines += [f"## `{module}`", ""]
        lines += [f"::: {module}.{name}\n    options:\n      heading_level: 3\n" for name in names]
    return "\n".join(lines)


def generated_pages() -> dict[str, str]:
    """Each generated page's site path and Markdown (GENERATED, in order)."""
    from ticketcli.cli.reference import cli_reference

    spec = importlib.util.spec_from_file_location("_ticket_docs_layout", Path(__file__).with_name("layout.py"))
    assert spec is not None and spec.loader is not None
    layout = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layout)
    pages = [cli_reference(), python_reference(), layout.layout_markdown()]
    return dict(zip(GENERATED, pages))


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages, the root pages and the repository files the pages link to."""
    from mkdocs.structure.files import File

    for uri, content in generated_pages().items():
        files.append(File.generated(config, uri, content=content))
    for path, uri in ROOT_PAGES.items():
        files.append(File.generated(config, uri, abs_src_path=str(REPO / path)))
    todo = [f.src_uri for f in files if f.src_uri.endswith(".md") and f.abs_src_path]
    done = set(todo)
    while todo:  # a linked Markdown file outside docs/ is a page too, whose own links are followed
        uri = todo.pop()
        here = repo_path(uri)
        for target in relative_targets((REPO / here).read_text(encoding="utf-8")):
            path = resolve(here, target)
            new = site_uri(path)
            if new in done or not (REPO / path).is_file() or files.get_file_from_path(new) is not None:
                continue
            done.add(new)
            files.append(File.generated(config, new, abs_src_path=str(REPO / path)))
            if new.endswith(".md"):
                todo.append(new)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Re-point the page's links from repository paths to site paths."""
    return rewrite(markdown, page.file.src_uri)
