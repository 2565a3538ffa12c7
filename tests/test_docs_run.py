"""The documentation runs: every code block of README.md and docs/**/*.md that is Python or a shell command runs as
written, so the docs cannot drift from the code. A block marked `<!-- long -->` on the line directly above its
fence is not run (the paper's FashionMNIST protocol, a CUDA machine, installing); any other block that cannot be
run (a program the test does not run, a `...` placeholder, commands in a fence that names no language) fails.
The rules are in CONTRIBUTING.md, "Executable documentation"; the parser and the driver in tests/docsrun.py.

Each file's blocks run in order in one temporary directory (so `ticket evaluate t.safetensors` finds the ticket an
earlier block extracted), Python blocks in one shared namespace; `ticket` on PATH is this checkout's
`python -m ticketcli`, served by a fork server that imported torch once (tests/docserver.py; the tests at the end
check that it behaves as a fresh process). Output a `console` block shows is compared with what its command printed
(`docsrun.output_differences`, its rule tested here); a transcript of a block marked long runs its own commands,
and one that reads FashionMNIST is skipped without it, unless TICKET_REQUIRE_FASHION=1 (CI). A failure names the
block (`README.md:47`) and shows its code, the command and the end of its output."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import warm
from docsrun import (
    Block,
    blocks,
    drive,
    output_differences,
    parse_problem,
    plan_of,
    pycon_statements,
    reads_fashion,
    run_pycon,
    run_shell,
    ticket_argvs,
)
from helpers import checkout_pythonpath, fashion_available, require_fashion
from warm import SERVER, ForkServer

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
ALL = [b for doc in DOCS for b in blocks(doc, REPO)]
CHECKED = [b for b in ALL if b.kind != "text" or b.problems]
COMMAND_TIMEOUT = 300.0  # seconds for one shell command; a whole file gets the sum of its commands' share
RESOURCES = ("sample_configs", "examples", "benchmarks")  # what the docs name relative to the repository root


DRIVER = Path(__file__).with_name("docsrun.py")


# The environment as the session starts: a test elsewhere that leaves a variable changed in os.environ must not make
# the server's start-up variables differ from a later command's (that command would silently run fresh, or a served
# test would see a fresh process).
BASE_ENV = dict(os.environ)


def docs_env(base: Path) -> dict[str, str]:
    """The environment the docs run in (the fork server's too: a command whose start-up variables differ from the
    server's would run as a fresh process)."""
    env = dict(BASE_ENV)
    env["PATH"] = f"{base / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = checkout_pythonpath(env)
    env["XDG_CACHE_HOME"] = str(base / "cache")  # no user cache leaking in
    env.pop("TICKET_DATA", None)
    # the manual's examples and the output they show are the CPU's (`--device auto` would say "on cuda" on a GPU
    # machine, with a GPU's numbers)
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def shims(bin_dir: Path, socket: Path | None) -> None:
    """`ticket`, `python` and `python3` on PATH: this checkout's code under this interpreter (a worktree need not
    have its console script installed); with a fork server's `socket`, its children (`python -m ticketcli` when
    the client cannot be served), otherwise fresh processes."""
    bin_dir.mkdir()
    py = f'"{sys.executable}"'
    served = f'{py} -S -E "{SERVER}" client "{socket}"' if socket else py
    for name, target in (("ticket", f"{served} -m ticketcli"), ("python", served), ("python3", served)):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
        path.chmod(0o755)


@pytest.fixture(scope="session")
def fork_server() -> ForkServer:
    """The fork server every other warm child of this process comes from too (tests/warm.py): the docs'
    environment has the same start-up variables."""
    return warm.server(docs_env(Path(tempfile.gettempdir())))


def needs_fashion(block: Block) -> bool:
    """Whether the block runs a command that reads FashionMNIST: a transcript of a block marked long (the paper
    run) runs its own commands; the runnable blocks use digits."""
    return block.kind == "transcript" and block.reuse is None and reads_fashion(block)


def run_doc(doc: str, base: Path, server: ForkServer) -> dict[str, dict[str, Any]]:
    """Run one file's runnable blocks in order in a fresh directory, through the fork server; each block's record
    by id. A block that needs FashionMNIST is left out where it is not installed (its test skips, or fails in CI)."""
    server.start()
    todo = [b for b in ALL if b.doc == doc and (fashion_available() or not needs_fashion(b))]
    assert server.proc is not None
    plan = plan_of(todo, COMMAND_TIMEOUT, fresh_bin=str(base / "fresh"), server_pid=server.proc.pid)
    work = base / "work"
    work.mkdir(parents=True)
    shims(base / "bin", server.socket)
    shims(base / "fresh", None)
    for name in RESOURCES:
        (work / name).symlink_to(REPO / name)
    (base / "plan.json").write_text(json.dumps(plan))
    results = base / "results.jsonl"
    n_commands = sum(max(1, len(b["commands"])) for b in plan["blocks"])
    try:
        p = subprocess.run(  # the driver too is the server's child: the Python blocks' imports are done
            [base / "bin" / "python", DRIVER, base / "plan.json", results],
            cwd=work,
            env=docs_env(base),
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
def doc_runs(tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer):
    done: dict[str, dict[str, dict[str, Any]]] = {}

    def get(doc: str) -> dict[str, dict[str, Any]]:
        if doc not in done:
            done[doc] = run_doc(doc, tmp_path_factory.mktemp("docs-" + doc.replace("/", "-")), fork_server)
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
    if needs_fashion(block):
        require_fashion()
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
    transcripts = {b.doc: b for b in ALL if b.kind == "transcript" and b.runs}  # their output is compared
    assert {"README.md", "docs/guide/paper-run.md"} <= set(transcripts)
    assert transcripts["README.md"].reuse and transcripts["docs/guide/paper-run.md"].reuse is None
    assert all(any(shown.strip() for shown in b.shown) for b in transcripts.values())
    assert needs_fashion(transcripts["docs/guide/paper-run.md"]) and not needs_fashion(transcripts["README.md"])


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
    assert (b[1].echoes, b[1].reuse, b[1].shown) == ([1], "x.md:3", ['{"test": 1}\n']) and b[1].runs
    assert b[0].shown == ["", ""]
    assert [(c.text, c.expect) for c in b[2].commands] == [("ticket inspect missing.safetensors", 2)]
    assert b[2].shown == ["error: ...\n"]
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


def extract_output(
    size: int = 21288,
    label: str = "test accuracy",
    test: str = "94.71%",
    requested: str = "90.00%",
    wall: str = "2.4 s on cpu",
    kept: str = "3276 / 16384",
    loss: str = "0.2002",
    stored: str = "94.71%",
) -> str:
    """What `ticket extract` then `ticket evaluate` print (rich's tables, as the command line draws them), with
    these values."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(f"augmented ticket  ->  digits.safetensors ({size} bytes)")
    rows = [(label, test), ("requested sparsity", requested), ("augmented keep density", "0.1000")]
    rows += [("model / seed", "mlp:64-256-256-256-10 / 0"), ("data", "digits (1000/400/397)"), ("wall time", wall)]
    tables = [(["quantity", "value"], rows)]
    tables.append((["parameter", "kept / total", "achieved sparsity"], [("layers.0.weight", kept, "80.00%")]))
    tables.append((["split", "accuracy", "loss", "stored accuracy"], [("test", test, loss, stored)]))
    for columns, content in tables:
        table = Table()
        for k, name in enumerate(columns):
            table.add_column(name, justify="right" if k else "left")
        for row in content:
            table.add_row(*row)
        console.print(table)
    console.print("achieved sparsity 80.00%; on cpu the ticket reproduces the stored accuracy exactly.", soft_wrap=True)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_the_rule_for_shown_output_accepts_what_a_cpu_can_move():
    shown = extract_output()
    assert output_differences(shown, shown) == []
    wider = extract_output(wall="1117.8 s on cpu")
    assert wider != shown and output_differences(shown, wider) == []  # wall time, and the width it takes
    assert output_differences(shown, extract_output(test="96.70%", stored="96.70%")) == []  # 1.99 points
    assert output_differences(shown, extract_output(loss="0.2150")) == []  # 7%
    assert output_differences(shown, extract_output(size=21440)) == []  # a longer CPU model in the header
    assert output_differences(shown, shown + "\n\n") == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"label": "test acc"}, "'test acc'"),  # a label
        ({"requested": "80.00%"}, "'requested sparsity value' shows 90.00, printed 80.00"),  # a setting
        ({"kept": "3277 / 16384"}, "'layers.0.weight kept / total' shows 3276, printed 3277"),  # a count
        ({"test": "96.72%"}, "'test accuracy value' shows 94.71, printed 96.72 (an accuracy"),  # 2.01 points
        ({"stored": "92.70%"}, "'test stored accuracy' shows 94.71, printed 92.70"),
        ({"loss": "0.2250"}, "'test loss' shows 0.2002, printed 0.2250 (a loss"),  # 12%
        ({"size": 22000}, "shows 21288, printed 22000 (a size"),  # 3%
        ({"wall": "2.4 s on cuda"}, "'2.4 s on cpu', printed '2.4 s on cuda'"),  # the text around a wall time
    ],
)
def test_the_rule_for_shown_output_fails_on_a_change(change: dict[str, Any], named: str):
    differences = output_differences(extract_output(), extract_output(**change))
    assert len(differences) >= 1 and any(named in d for d in differences), differences


def test_the_rule_for_shown_output_fails_on_another_structure():
    shown = extract_output()
    lines = shown.splitlines(keepends=True)
    assert output_differences(shown, shown + "one more line\n") == ["shows 22 lines, printed 23"]
    fewer = output_differences(shown, "".join(lines[:4] + lines[5:]))  # a row fewer: the first line out of step
    assert fewer == [
        "shows 22 lines, printed 21",
        f"line 10: shows {lines[9].strip()!r}, printed {lines[10].strip()!r}",
    ]
    assert len(output_differences(shown, shown.replace("│ data ", "│ data │ ", 1))) == 1  # a cell more
    assert output_differences(shown, "".join(lines[1:])) != []  # no title line


TRANSCRIPTS = """\
```bash
echo "test accuracy 90.00%, requested sparsity 90.00%"
echo more
```

```console
$ echo "test accuracy 90.00%, requested sparsity 90.00%"
test accuracy 91.50%, requested sparsity 90.00%
```

<!-- long -->
```bash
printf 'a ticket (1000 bytes)\\n'
```

```console
$ printf 'a ticket (1000 bytes)\\n'
a ticket (1010 bytes)
```

```bash
echo "test accuracy 90.00%"
```

```console
$ echo "test accuracy 90.00%"
test accuracy 93.00%
```

```console
$ echo "kept 10 / 100"
kept 11 / 100
$ echo "not compared"
```
"""


def test_the_driver_compares_the_output_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A transcript is compared with its block's run, or runs its commands when that block is marked long; a console
    block's shown output is compared too."""
    md = tmp_path / "x.md"
    md.write_text(TRANSCRIPTS)
    found = blocks(md, tmp_path)
    assert [b.kind for b in found] == ["shell", "transcript", "shell", "transcript", "shell", "transcript", "shell"]
    monkeypatch.chdir(tmp_path)
    drive_plan = tmp_path / "plan.json"
    drive_plan.write_text(json.dumps(plan_of(found, 30)))
    drive(str(drive_plan), str(tmp_path / "results.jsonl"))
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    ok = {name: r["ok"] for name, r in records.items()}
    assert ok == {"x.md:1": True, "x.md:6": True, "x.md:16": True, "x.md:21": True, "x.md:25": False, "x.md:30": False}
    assert "compared with the output of x.md:1" in records["x.md:6"]["log"]
    assert "$ printf" in records["x.md:16"]["log"]  # run here: the block before it is marked long
    assert "'test accuracy' shows 93.00, printed 90.00 (an accuracy" in records["x.md:25"]["log"]
    assert "'kept' shows 11, printed 10" in records["x.md:30"]["log"]


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


# ---------------------------------------------------------------- the fork server the docs' commands run in


def sh(command: str, base: Path, bin_name: str = "bin", **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`command` in bash as the driver runs it, with `base/bin_name` first on PATH."""
    env = docs_env(base)
    env["PATH"] = env["PATH"].replace(str(base / "bin"), str(base / bin_name), 1)
    return subprocess.run(
        ["bash", "-c", "set -o pipefail\n" + command],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )


@pytest.fixture
def served(tmp_path: Path, fork_server: ForkServer) -> tuple[Path, int]:
    """A directory whose `bin` holds shims served by the session's fork server and `fresh` fresh ones; the
    server's pid."""
    fork_server.start()
    assert fork_server.proc is not None
    shims(tmp_path / "bin", fork_server.socket)
    shims(tmp_path / "fresh", None)
    return tmp_path, fork_server.proc.pid


def test_the_fork_server_serves_commands_as_processes(served: tuple[Path, int]):
    base, server = served
    (base / "sub").mkdir()
    r = sh(
        'cd sub && X=7 python -c \'import os, sys; print(os.getppid(), os.getcwd(), os.environ["X"], "torch" in '
        "sys.modules, sys.argv)' a b",
        base,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(" ", 3) == [str(server), str(base / "sub"), "7", "True ['-c', 'a', 'b']\n"]
    r = sh('python -c \'import sys; print("out"); print("bad", file=sys.stderr); sys.exit(3)\'', base)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "bad\n")
    r = sh("printf 'a\\nb\\n' | python -c 'import sys; print(sys.stdin.read().upper(), end=\"\")' | tail -1", base)
    assert (r.returncode, r.stdout) == (0, "B\n")
    (base / "script.py").write_text("import sys\nprint(sys.argv, sys.path[0])\n")
    r = sh("cd sub && python ../script.py x", base)
    assert r.stdout == f"['../script.py', 'x'] {base}\n"


def test_a_crash_in_a_child_leaves_the_server_serving(served: tuple[Path, int]):
    base, server = served
    r = sh("python -c 'import os; os.abort()'; echo $?", base)
    assert r.stdout == f"{128 + signal.SIGABRT}\n"
    r = sh("python -c 'import os; print(os.getppid())'", base)
    assert (r.returncode, r.stdout) == (0, f"{server}\n")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_reach_the_child_and_its_end_comes_back(served: tuple[Path, int], sig: signal.Signals):
    base, _ = served
    code = "import sys, time; print('up', flush=True); time.sleep(60)"
    p = subprocess.Popen(
        [base / "bin" / "python", "-c", code],
        env=docs_env(base),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline() == "up\n"
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == -sig  # killed by it, as a fresh interpreter is (after a KeyboardInterrupt's traceback)
    assert ("KeyboardInterrupt" in err) == (sig == signal.SIGINT)


def test_a_start_up_variable_that_differs_runs_fresh(served: tuple[Path, int]):
    base, server = served
    r = sh("PYTHONHASHSEED=1 python -c 'import os, sys; print(os.getppid() == int(sys.argv[1]))' " + str(server), base)
    assert (r.returncode, r.stdout) == (0, "False\n")
    r = sh("python -X dev -c 'import os, sys; print(os.getppid() == int(sys.argv[1]))' " + str(server), base)
    assert (r.returncode, r.stdout) == (0, "False\n")  # interpreter options: the real interpreter


@pytest.mark.parametrize(
    "command",
    [
        "ticket list methods --json | jq -r .schema",
        "ticket inspect missing.safetensors",  # exit 2, one line on stderr
        "ticket list settings | head -3",  # the reader leaves early
        "ticket list methods >&-",  # a closed stdout: exit 141, quietly
        "ticket extrct",
        "python -c 'for i in range(10**6): print(i)' | head -2",  # a broken pipe's traceback
        "python -c 'import sys; sys.exit(\"a message\")'",
        'python -c \'import subprocess as s; print(s.run(["python", "-c", "import os; os.abort()"]))\'',
    ],
)
def test_served_and_fresh_commands_agree(served: tuple[Path, int], command: str):
    """A served `ticket` or `python` and a fresh `python -m ticketcli` or `python` end alike: exit status, stdout
    and stderr."""
    base, _ = served
    got, fresh = sh(command, base), sh(command, base, "fresh")
    assert (got.returncode, got.stdout, got.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_the_driver_runs_commands_that_must_fail_fresh(served: tuple[Path, int], monkeypatch: pytest.MonkeyPatch):
    base, server = served
    env = docs_env(base)  # as the driver has it: this process's own may have gained variables since (importing
    for name in set(os.environ) - set(env):  # torch's compiler sets TORCHINDUCTOR_CACHE_DIR, scikit-learn KMP_*)
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    probe = "python -c 'import os, sys; sys.exit(0 if os.getppid() == int(sys.argv[1]) else 5)' " + str(server)
    ok, log = run_shell([{"text": probe, "expect": 0}, {"text": probe, "expect": 5}], 60, str(base / "fresh"))
    assert ok, log  # served when it must succeed, fresh when it must fail
