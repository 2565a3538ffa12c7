"""The code blocks of README.md and docs/**/*.md, found and run (tests/test_docs_run.py; the rules are in
CONTRIBUTING.md, "Executable documentation").

`blocks(path)` parses a Markdown file into its fenced code blocks and classifies each: Python (`python`, or
`pycon` for an interactive session), shell (`bash`, `sh`, `shell`: every line a command; `console`: the lines
after `$ `), a transcript (a console block repeating the commands of the block before it, shown with their
output), or text. `python tests/docsrun.py PLAN RESULTS` is the driver: it runs one file's blocks in order in its
working directory (the test makes a temporary one), Python blocks in one shared namespace, each shell command in
its own `bash` (whose `ticket` and `python` are the fork server's children, tests/docserver.py, but for a command
that must fail), and writes one JSON line per block as it finishes, so a hang still names the block it was in."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

LONG = re.compile(r"^\s*<!--\s*long(?::[^>]*)?\s*-->\s*$")  # the line directly above a fence that is not run
FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)[^`]*$")
PYTHON = {"python", "py", "python3"}
PYCON = {"pycon"}
SHELL = {"bash", "sh", "shell"}
CONSOLE = {"console"}
# The programs a runnable shell command may call (first word of each command of a pipeline or list). Anything else
# (installers, git, bash scripts, torchrun, the test suite itself) is not run: its block must carry `<!-- long -->`.
RUNNABLE = {
    "ticket",
    "python",
    "python3",
    "jq",
    "ls",
    "cat",
    "head",
    "tail",
    "wc",
    "echo",
    "printf",
    "test",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "touch",
    "diff",
    "cmp",
    "grep",
    "sha256sum",
    "true",
    "nice",
    "env",
}
NOT_RUNNABLE_ARGS = {"pytest"}  # `python -m pytest` would run the suite inside itself
OPERATORS = {"|", "||", "&&", ";", "&"}
EXIT = re.compile(r"\(exit (\d+)\)")  # `# ... (exit 2)` on a command line: the exit status the text promises
# Text that looks like something to run: a block holding it must say which language it is.
LOOKS_RUNNABLE = re.compile(r"^\s*(?:\$ |>>> |ticket |python3? |import |from \S+ import )")


@dataclass
class Command:
    """One shell command as written (continuation lines joined), without its comment, and the status it must end
    with."""

    text: str
    expect: int = 0


@dataclass
class Block:
    doc: str  # the file, relative to the repository
    line: int  # the line of the opening fence (1-based)
    lang: str  # the info string's first word, lower case
    code: str  # the block's text, dedented by the fence's indent
    long: bool  # `<!-- long -->` directly above the fence
    kind: str = "text"  # python, pycon, shell, transcript, text
    commands: list[Command] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why it cannot be run as written

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.kind in ("python", "pycon", "shell") and not self.long and not self.problems


def blocks(path: Path, root: Path) -> list[Block]:
    """Every fenced code block of a Markdown file, classified."""
    lines = path.read_text().splitlines()
    doc = path.relative_to(root).as_posix()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m[1]), m[2], m[3].strip("{}.").lower()
        j = i + 1
        while j < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[j]):
            j += 1
        body = "\n".join(dedent(line, indent) for line in lines[i + 1 : j])
        long = i > 0 and bool(LONG.match(lines[i - 1]))
        out.append(classify(Block(doc, i + 1, lang, body + "\n", long), out[-1] if out else None))
        i = j + 1
    return out


def dedent(line: str, indent: int) -> str:
    """A line of a block whose fence is indented by `indent` spaces (in a list item), without that indent."""
    return line[indent:] if line[:indent].isspace() else line.lstrip() if indent else line


def classify(block: Block, before: Block | None) -> Block:
    if block.lang in PYTHON:
        block.kind = "python"
        if block.code.lstrip().startswith(">>> "):
            block.problems.append("an interactive session: mark it pycon")
    elif block.lang in PYCON:
        block.kind = "pycon"
    elif block.lang in SHELL:
        block.kind = "shell"
        block.commands = shell_commands(block.code.splitlines())
    elif block.lang in CONSOLE:
        block.kind = "shell"
        block.commands = shell_commands([ln[2:] for ln in console_commands(block.code)])
        if before is not None and before.kind == "shell" and is_subsequence(block.commands, before.commands):
            block.kind = "transcript"  # the previous block's commands shown with their output: checked, not rerun
    else:
        if any(LOOKS_RUNNABLE.match(line) for line in block.code.splitlines()):
            block.problems.append(
                "looks like commands or code but its fence names no language: mark it python, bash or console"
            )
        return block
    if block.kind == "shell":
        if not block.commands:
            block.problems.append("a shell block without a command")
        for c in block.commands:
            block.problems += command_problems(c.text)
    return block


def console_commands(code: str) -> list[str]:
    """A console block's command lines: those starting with `$ `, with their continuation lines."""
    out: list[str] = []
    cont = False
    for line in code.splitlines():
        if line.startswith("$ ") or cont:
            out.append(line if line.startswith("$ ") else "$ " + line)
            cont = line.rstrip().endswith("\\")
    return out


def shell_commands(lines: list[str]) -> list[Command]:
    """Commands from shell lines: continuation lines joined, comments and blank lines dropped."""
    out: list[Command] = []
    pending = ""
    for raw in lines:
        text = pending + (raw.lstrip() if pending else raw)
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1].rstrip() + " "
            continue
        pending = ""
        code, comment = split_comment(text)
        if code.strip():
            m = EXIT.search(comment)
            out.append(Command(code.strip(), int(m[1]) if m else 0))
    return out


def split_comment(line: str) -> tuple[str, str]:
    """The code and the comment of a shell line (a `#` that starts a word, outside quotes)."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k], line[k + 1 :]
    return line, ""


def words(command: str) -> list[list[str]]:
    """The simple commands of a pipeline or list, each as its words (redirections kept)."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    parts: list[list[str]] = [[]]
    for tok in lex:
        if tok in OPERATORS:
            parts.append([])
        else:
            parts[-1].append(tok)
    return [p for p in parts if p]


def command_problems(command: str) -> list[str]:
    try:
        simple = words(command)
    except ValueError as e:
        return [f"{command!r}: cannot be parsed ({e})"]
    problems = []
    for w in simple:
        args = [a for a in w if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", a)]  # VAR=value prefixes
        while args and args[0] in ("nice", "env"):  # `nice -n 10 python ...`: the program is what follows
            args = args[1:]
            while args and (args[0].startswith("-") or args[0].lstrip("-").isdigit()):
                args = args[1:]
        prog = args[0] if args else ""
        if prog not in RUNNABLE:
            problems.append(f"{command!r}: runs {prog or '(nothing)'!r}, which the docs test does not run")
        elif NOT_RUNNABLE_ARGS & set(args):
            problems.append(f"{command!r}: runs the test suite")
        if "..." in args:
            problems.append(f"{command!r}: '...' stands for arguments; write them out")
    return problems


def ticket_argvs(block: Block) -> list[list[str]]:
    """The argument lists of the `ticket` (or `torchrun ... -m ticketcli`) commands of a shell block, those written
    out in full (no `...`)."""
    out = []
    for c in block.commands:
        try:
            simple = words(c.text)
        except ValueError:
            continue
        for w in simple:
            args = [a for a in w if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", a)]
            if "-m" in args and "ticketcli" in args and args.index("ticketcli") == args.index("-m") + 1:
                argv = args[args.index("ticketcli") + 1 :]
            elif args[:1] == ["ticket"]:
                argv = args[1:]
            else:
                continue
            for k, a in enumerate(argv):  # redirections end the arguments
                if a in ("<", ">", ">>", "2>", "2>&1") or a.startswith((">", "<")):
                    argv = argv[:k]
                    break
            if "..." not in argv and argv:
                out.append(argv)
    return out


def parse_problem(argv: list[str]) -> str | None:
    """Why the command line would refuse these arguments (an unknown option or command, a value of the wrong type
    or not among the choices), or None; the arguments are parsed, not run."""
    import typer
    from typer.core import _click as click

    from ticketcli.cli.app import app

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="ticket")
    command = group.get_command(root, argv[0])
    if command is None:
        return f"ticket {argv[0]}: no such command"
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints the help and exits 0
            command.make_context(argv[0], list(argv[1:]), parent=root)
    except typer.Exit:
        return None
    except click.ClickException as e:
        return f"ticket {shlex.join(argv)}: {e.format_message()}"
    return None


def is_subsequence(these: list[Command], those: list[Command]) -> bool:
    it = iter(c.text for c in those)
    return bool(these) and all(c.text in it for c in these)


# ---------------------------------------------------------------- the driver: runs one file's blocks in order


def pycon_statements(code: str) -> list[tuple[str, str | None]]:
    """An interactive session as (statement, the exception line shown after it or None)."""
    out: list[tuple[str, str | None]] = []
    for line in code.splitlines():
        if line.startswith(">>> "):
            out.append((line[4:], None))
        elif line.startswith("...") and out:
            out[-1] = (out[-1][0] + "\n" + line[4:], None)
        elif out and re.match(r"^[\w.]+(Error|Exception|Failed|Interrupt)\b(:|$)", line):
            out[-1] = (out[-1][0], line)
    return out


def run_python(code: str, name: str, ns: dict[str, Any]) -> tuple[bool, str]:
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            exec(compile(code, name, "exec"), ns)
    except BaseException:  # noqa: BLE001 - any failure of the block is the report
        return False, buf.getvalue()[-3000:] + traceback.format_exc(limit=-6)
    return True, buf.getvalue()[-3000:]


def run_pycon(code: str, name: str, ns: dict[str, Any]) -> tuple[bool, str]:
    log = []
    for stmt, shown in pycon_statements(code):
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                exec(compile(stmt, name, "single"), ns)
            raised = None
        except Exception as e:  # noqa: BLE001 - compared with what the session shows
            raised = f"{type(e).__module__}.{type(e).__qualname__}: {e}"
        log.append(f">>> {stmt}\n{buf.getvalue()}{raised or ''}")
        if shown is None and raised:
            return False, "\n".join(log) + "\nraised, but the session shows no exception"
        if shown is not None:
            if raised is None:
                return False, "\n".join(log) + f"\nraised nothing; the session shows: {shown}"
            cls, _, msg = shown.partition(": ")
            got_cls, _, got_msg = raised.partition(": ")
            if not got_cls.endswith(cls) or got_msg.strip() != msg.strip():
                return False, "\n".join(log) + f"\nthe session shows: {shown}"
    return True, "\n".join(log)[-3000:]


def run_shell(commands: list[dict[str, Any]], timeout: float, fresh_bin: str | None = None) -> tuple[bool, str]:
    """Each command in its own `bash` (pipefail); one that must exit non-zero with `fresh_bin` first on PATH, where
    `ticket` and `python` are fresh processes rather than the fork server's children, so that the failures the docs
    promise are those of a real start-up."""
    log = []
    for c in commands:
        env = None
        if fresh_bin and c["expect"] != 0:
            env = dict(os.environ, PATH=f"{fresh_bin}{os.pathsep}{os.environ.get('PATH', '')}")
        t0 = time.monotonic()
        p = subprocess.Popen(
            ["bash", "-c", "set -o pipefail\n" + c["text"]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: a timeout ends the whole pipeline, not only bash
        )
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return False, "\n".join(log) + f"\n$ {c['text']}\ntimed out after {timeout:.0f} s"
        took = time.monotonic() - t0
        entry = f"$ {c['text']}\n(exit {p.returncode}, {took:.1f} s)"
        if p.returncode != c["expect"]:
            tail = "\n".join((stdout[-1500:], stderr[-3000:]))
            return False, "\n".join(log + [entry, f"expected exit {c['expect']}; stdout and stderr end:", tail])
        log.append(entry)
    return True, "\n".join(log)


def cpu_seconds(server: int | None = None) -> float:
    """CPU time (user and system) of this process and the commands it waited for: what a block costs on a loaded
    machine, where its wall time says little. The fork server's children are the server's, not ours: the CPU of
    those it has reaped is read from its /proc entry (one server per test process, which runs one file at a
    time)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    if server:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime
    return total


def drive(plan_path: str, results_path: str) -> None:
    plan = json.loads(Path(plan_path).read_text())
    server = plan.get("server_pid")
    ns: dict[str, Any] = {"__name__": "__main__"}
    with open(results_path, "a") as results:
        for b in plan["blocks"]:
            t0, cpu0 = time.monotonic(), cpu_seconds(server)
            name = f"{b['doc']}:{b['line']}"
            if b["kind"] == "python":
                ok, log = run_python(b["code"], name, ns)
            elif b["kind"] == "pycon":
                ok, log = run_pycon(b["code"], name, ns)
            else:
                ok, log = run_shell(b["commands"], plan["timeout"], plan.get("fresh_bin"))
            took = {"seconds": round(time.monotonic() - t0, 1), "cpu_seconds": round(cpu_seconds(server) - cpu0, 1)}
            record = {"id": name, "ok": ok, "log": log, **took}
            results.write(json.dumps(record) + "\n")
            results.flush()


def plan_of(
    blocks_: list[Block], timeout: float, fresh_bin: str | None = None, server_pid: int | None = None
) -> dict[str, Any]:
    """The driver's input: the runnable blocks, the per-command timeout, where the fresh `ticket` is and which
    process is the fork server (None for both: every command is a fresh process)."""
    runnable = [asdict(b) for b in blocks_ if b.runs]
    return {"timeout": timeout, "fresh_bin": fresh_bin, "server_pid": server_pid, "blocks": runnable}


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2])
