"""The documentation runs: every code block of README.md and docs/*.md that is Python or a shell command runs as
written, so the docs cannot drift from the code. A block marked `<!-- long -->` on the line directly above its
fence is not run (the paper's FashionMNIST protocol, a CUDA machine, installing); any other block that cannot be
run (a program the test does not run, a `...` placeholder, commands in a fence that names no language) fails.
The rules are in CONTRIBUTING.md, "Executable documentation"; the parser and the driver in tests/docsrun.py.

Each file's blocks run in order in one temporary directory (so `ticket evaluate t.safetensors` finds the ticket an
earlier block extracted), Python blocks in one shared namespace; `ticket` on PATH is this checkout's
`python -m ticketcli`. A failure names the block (`README.md:47`) and shows its code, the command and the end of
its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from docsrun import Block, blocks, parse_problem, plan_of, pycon_statements, run_pycon, run_shell, ticket_argvs

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
ALL = [b for doc in DOCS for b in blocks(doc, REPO)]
CHECKED = [b for b in ALL if b.kind != "transcript" and (b.kind != "text" or b.problems)]
COMMAND_TIMEOUT = 300.0  # seconds for one shell command; a whole file gets the sum of its commands' share
RESOURCES = ("sample_configs", "examples", "benchmarks")  # what the docs name relative to the repository root


def shims(bin_dir: Path) -> None:
    """`ticket`, `python` and `python3` on PATH: this checkout's code under this interpreter (a worktree need not
    have its console script installed)."""
    bin_dir.mkdir()
    for name, target in (("ticket", f'"{sys.executable}" -m ticketcli'), ("python", f'"{sys.executable}"')):
        for alias in (name, "python3") if name == "python" else (name,):
            path = bin_dir / alias
            path.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
            path.chmod(0o755)


def run_doc(doc: str, base: Path) -> dict[str, dict[str, Any]]:
    """Run one file's runnable blocks in order in a fresh directory; each block's record by id."""
    todo = [b for b in ALL if b.doc == doc]
    plan = plan_of(todo, COMMAND_TIMEOUT)
    work = base / "work"
    work.mkdir(parents=True)
    shims(base / "bin")
    for name in RESOURCES:
        (work / name).symlink_to(REPO / name)
    (base / "plan.json").write_text(json.dumps(plan))
    results = base / "results.jsonl"
    env = dict(os.environ)
    env["PATH"] = f"{base / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["XDG_CACHE_HOME"] = str(base / "cache")  # no user cache leaking in
    env.pop("TICKET_DATA", None)
    n_commands = sum(max(1, len(b["commands"])) for b in plan["blocks"])
    try:
        p = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("docsrun.py")), str(base / "plan.json"), str(results)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT * n_commands + 60,
        )
        ended = f"the driver exited {p.returncode}: {p.stderr[-2000:]}"
    except subprocess.TimeoutExpired:
        ended = "the driver timed out"
    records = {}
    if results.exists():
        records = {r["id"]: r for r in map(json.loads, results.read_text().splitlines())}
    for b in plan["blocks"]:
        name = f"{b['doc']}:{b['line']}"
        records.setdefault(name, {"id": name, "ok": False, "log": f"not reached: {ended}", "seconds": 0})
    return records


@pytest.fixture(scope="session")
def doc_runs(tmp_path_factory: pytest.TempPathFactory):
    done: dict[str, dict[str, dict[str, Any]]] = {}

    def get(doc: str) -> dict[str, dict[str, Any]]:
        if doc not in done:
            done[doc] = run_doc(doc, tmp_path_factory.mktemp("docs-" + doc.replace("/", "-")))
        return done[doc]

    return get


def report(block: Block, what: str) -> str:
    code = textwrap.indent(block.code.rstrip(), "    ")
    return f"{block.id} ({block.lang or 'no language'} block):\n{code}\n{what}"


@pytest.mark.parametrize("block", CHECKED, ids=lambda b: b.id)
def test_doc_block_runs(block: Block, doc_runs):
    if block.long:
        argvs = ticket_argvs(block)
        if not argvs:
            pytest.skip("marked <!-- long -->")
        refused = [p for p in map(parse_problem, argvs) if p]  # not run, but its options must still exist
        assert not refused, report(
            block, "marked long, so not run, but the command line refuses:\n" + "\n".join(refused)
        )
        return
    assert not block.problems, report(block, "cannot be run as written:\n" + "\n".join(block.problems))
    record = doc_runs(block.doc)[block.id]
    assert record["ok"], report(block, record["log"])


def test_the_docs_have_runnable_blocks():
    """The parser finds the blocks it should: a change that made it skip everything would pass silently."""
    runnable = {b.doc for b in ALL if b.runs}
    assert {"README.md", "docs/api.md", "docs/json.md"} <= runnable
    guide = {"extract", "evaluate", "export", "sweep-k", "train-weak", "drift", "output", "python-api"}
    assert {f"docs/guide/{page}.md" for page in guide} <= runnable  # the pages the README's guide moved to
    assert {"docs/reference/models.md", "docs/reference/reliability.md"} <= runnable
    assert any(b.kind == "python" and b.runs for b in ALL) and any(b.kind == "shell" and b.runs for b in ALL)


SAMPLE = """\
# t

```bash
ticket extract --dataset digits --out t.safetensors   # (exit 0)
ticket evaluate t.safetensors \\
  --json | jq .metrics   # a comment
```

```console
$ ticket evaluate t.safetensors \\
  --json | jq .metrics
{"test": 1}
```

```console
$ ticket inspect missing.safetensors   # refused (exit 2)
error: ...
```

<!-- long -->
```bash
pip install ticketcli
```

```bash
pip install ticketcli
git clone x && ticket extract ...
```

```
ticket list
```

```python
>>> 1/0
```

```text
a table, not code
```
"""


def test_the_parser_classifies_blocks(tmp_path: Path):
    md = tmp_path / "x.md"
    md.write_text(SAMPLE)
    b = blocks(md, tmp_path)
    assert [x.kind for x in b] == ["shell", "transcript", "shell", "shell", "shell", "text", "python", "text"]
    assert [x.line for x in b] == [3, 9, 15, 21, 25, 30, 34, 38]
    assert [c.text for c in b[0].commands] == [
        "ticket extract --dataset digits --out t.safetensors",
        "ticket evaluate t.safetensors --json | jq .metrics",
    ]
    assert b[0].runs and not b[0].problems
    assert [(c.text, c.expect) for c in b[2].commands] == [("ticket inspect missing.safetensors", 2)]
    assert b[3].long and not b[3].runs
    problems = "\n".join(b[4].problems)
    assert "'pip'" in problems and "'git'" in problems and "'...'" in problems and not b[4].runs
    assert b[5].problems and not b[5].runs  # commands in a fence without a language
    assert b[6].problems and not b[6].runs  # a session in a python fence
    assert not b[7].problems and not b[7].runs


def test_the_driver_reports_failures():
    ok, _ = run_shell([{"text": "test 1 = 1", "expect": 0}, {"text": "exit 3", "expect": 3}], 30)
    assert ok
    ok, log = run_shell([{"text": "false | cat", "expect": 0}], 30)  # pipefail: a failing ticket before jq fails
    assert not ok and "expected exit 0" in log
    assert pycon_statements(">>> f(\n... 1)\nValueError: no\n") == [("f(\n1)", "ValueError: no")]
    ns: dict[str, Any] = {}
    assert run_pycon(">>> int('x')\nValueError: invalid literal for int() with base 10: 'x'\n", "s", ns)[0]
    assert not run_pycon(">>> int('x')\nValueError: another message\n", "s", ns)[0]
    assert not run_pycon(">>> int('1')\nValueError: x\n", "s", ns)[0]
    assert not run_pycon(">>> int('x')\n", "s", ns)[0]


def test_long_blocks_are_parsed_not_run(tmp_path: Path):
    md = tmp_path / "x.md"
    md.write_text(
        "<!-- long -->\n```bash\n"
        "torchrun --nproc-per-node 2 -m ticketcli extract --method augmented --out t.safetensors\n"
        "ticket evaluate t.safetensors --json > r.json   # a comment\n"
        "ticket sweep-k ... --executor ray\n"
        "pip install ticketcli\n```\n"
    )
    (block,) = blocks(md, tmp_path)
    argvs = ticket_argvs(block)
    assert argvs == [
        ["extract", "--method", "augmented", "--out", "t.safetensors"],
        ["evaluate", "t.safetensors", "--json"],
    ]
    assert [parse_problem(a) for a in argvs] == [None, None]
    assert "--methd" in parse_problem(["extract", "--methd", "augmented"])
    assert "'--steps'" in parse_problem(["drift", "--steps", "many"])
    assert "no such command" in parse_problem(["extrct"])
