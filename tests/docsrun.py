"""The code blocks of README.md and docs/**/*.md, found and run (tests/test_docs_run.py; the rules are in
CONTRIBUTING.md, "Executable documentation").

`blocks(path)` parses a Markdown file into its fenced code blocks and classifies each: Python (`python`, or
`pycon` for an interactive session), shell (`bash`, `sh`, `shell`: every line a command; `console`: the lines
after `$ `, each followed by the output it shows), a transcript (a console block repeating the commands of the block
before it, shown with their output), or text. `python tests/docsrun.py PLAN RESULTS` is the driver: it runs one
file's blocks in order in its working directory (the test makes a temporary one), Python blocks in one shared
namespace, each shell command in its own `bash` (whose `ticket` and `python` are the fork server's children,
tests/docserver.py, but for a command that must fail), and writes one JSON line per block as it finishes, so a hang
still names the block it was in. Where a console block shows a command's output, that output is compared with what
the command printed, by the rule of `output_differences`: a transcript's with the run of the block before it, or,
when that block did not run (`<!-- long -->`), with a run of the transcript's own commands."""

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
    shown: list[str] = field(default_factory=list)  # a console block's output shown under each command ("": none)
    echoes: list[int] = field(default_factory=list)  # a transcript's commands: their indices in the block before
    reuse: str | None = None  # a transcript: the block before it, if that block runs (its output is compared)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def runs(self) -> bool:
        """Whether the driver runs it (a transcript: compares its output, running its commands if the block before
        it does not run)."""
        return self.kind in ("python", "pycon", "shell", "transcript") and not self.long and not self.problems


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
        block.shown = [""] * len(block.commands)
    elif block.lang in CONSOLE:
        block.kind = "shell"
        for lines, output in console_session(block.code):
            found = shell_commands([ln[2:] for ln in lines])  # one command, or none for a `$ # comment` line
            block.commands += found
            block.shown += [output] * len(found)
        echoes = subsequence_indices(block.commands, before.commands) if before and before.kind == "shell" else None
        if echoes is not None:
            block.kind = "transcript"  # the previous block's commands shown with their output
            block.echoes = echoes
            block.reuse = before.id if before is not None and before.runs else None
    else:
        if any(LOOKS_RUNNABLE.match(line) for line in block.code.splitlines()):
            block.problems.append(
                "looks like commands or code but its fence names no language: mark it python, bash or console"
            )
        return block
    if block.kind in ("shell", "transcript"):
        if not block.commands:
            block.problems.append("a shell block without a command")
        for c in block.commands:
            block.problems += command_problems(c.text)
    return block


def console_session(code: str) -> list[tuple[list[str], str]]:
    """A console block as its command lines (those starting with `$ `, with their continuation lines), each with
    the output shown under it up to the next command ("" when none)."""
    out: list[tuple[list[str], str]] = []
    cont = False
    for line in code.splitlines():
        if line.startswith("$ ") and not cont:
            out.append(([line], ""))
            cont = line.rstrip().endswith("\\")
        elif cont:
            out[-1][0].append("$ " + line)
            cont = line.rstrip().endswith("\\")
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + line + "\n")
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
    return parsed(argv)[1]


def parsed(argv: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    """`ticket ARGV` parsed, not run: its command's parameters (None for `--help` and the like, which exit at once,
    or a refusal) and why the command line would refuse it (None if it would not)."""
    import typer
    from typer.core import _click as click

    from ticketcli.cli.app import app

    group = typer.main.get_command(app)
    root = click.Context(group, info_name="ticket")
    command = group.get_command(root, argv[0])
    if command is None:
        return None, f"ticket {argv[0]}: no such command"
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help prints the help and exits 0
            return command.make_context(argv[0], list(argv[1:]), parent=root).params, None
    except typer.Exit:
        return None, None
    except click.ClickException as e:
        return None, f"ticket {shlex.join(argv)}: {e.format_message()}"


def subsequence_indices(these: list[Command], those: list[Command]) -> list[int] | None:
    """Where the commands `these` appear, in order, among `those` (the first match of each), or None if they do
    not all appear (or there are none)."""
    found: list[int] = []
    k = 0
    for c in these:
        while k < len(those) and those[k].text != c.text:
            k += 1
        if k == len(those):
            return None
        found.append(k)
        k += 1
    return found or None


def reads_fashion(block: Block) -> bool:
    """Whether a `ticket` command of the block reads FashionMNIST: one with a `--dataset` option not given (the
    default, unless a `--config` file names another) or given as fashion-mnist."""
    for argv in ticket_argvs(block):
        params = parsed(argv)[0]
        if params is not None and "dataset" in params and params["dataset"] in (None, "fashion-mnist"):
            return True
    return False


# ---------------------------------------------------------------- the output a block shows and the one printed

# How far a measured quantity may move between CPUs (the reasons are in output_differences' docstring)
ACCURACY_POINTS = 2.0  # percentage points (0.02 for an accuracy written as a fraction)
LOSS_RELATIVE = 0.10
BYTES_RELATIVE = 0.02
NUMBER = re.compile(r"\d+(?:\.\d+)?")
VERTICAL = re.compile(r"[│┃║]")
BORDER = re.compile(r"^[━─═┏┓┗┛┣┫┳┻╋┡┩╇┌┐└┘├┤┬┴┼╞╡╪╭╮╰╯╔╗╚╝╠╣╦╩╬\s]+$")
TOP = ("┏", "┌", "╭", "╔")  # the first line of a table: the row after it is its header if a rule follows that


def output_differences(shown: str, printed: str) -> list[str]:
    """How the output a block shows under a command differs from what the command printed, one line per difference
    ([] when they match). The rule, the same for every block:

    - Structure: the same number of lines (blank lines at the end aside), and line by line the same kind: a table
      rule (its box characters, a run of one character counted once, so a column's width does not matter), a table
      row (the same number of cells) or a line of text. Inside a cell or a line of text, runs of spaces count as
      one, and everything but the numbers (labels, units, names) must be equal.
    - Numbers are exact (written the same), unless what they measure is named by the row's first cell, the column's
      header, the text before the number since a `;`, `,`, `(` or `:`, or the word after it:
      - an accuracy (`accuracy` in that context): within ACCURACY_POINTS percentage points (0.02 written as a
        fraction). The same paper run (docs/guide/paper-run.md) gives 83.70% test and 84.88% validation accuracy on
        one CPU and 83.47% and 83.74% on another (docs/reference/reliability.md, "Determinism across machines"):
        the last bits of a sum differ between CPU kinds and, over hundreds of Adam steps, flip a few mask entries.
        Two points covers that 1.1-point move with room; a broken method or a changed default moves more, and
        changes the exact values beside it;
      - a loss (`loss`): within LOSS_RELATIVE of the shown value, for the same reason (that run: 0.4447 and
        0.4373, 1.7%);
      - a size in `bytes`: within BYTES_RELATIVE of the shown one. A ticket's header records the machine that made
        it (torch build, CPU model, BLAS, strings of up to 256 characters) and floats whose digits vary; 2% of the
        smallest ticket shown (21 KB) is 420 bytes. The masks, one bit per weight, are the bulk of the file: a
        change in what is stored moves it far more;
      - a `wall time`: not compared.
      Everything else is a setting or an exact count and must be equal: requested and achieved sparsity, keep
      density, model and seed, data sizes, kept / total, per-layer sparsity and share, file names."""
    a, b = _parsed(shown), _parsed(printed)
    out: list[str] = []
    if len(a) != len(b):
        out.append(f"shows {len(a)} lines, printed {len(b)}")
    for k, ((kind, cells, text), (kind_b, cells_b, text_b)) in enumerate(zip(a, b), start=1):
        if kind != kind_b or len(cells) != len(cells_b) or (kind == "rule" and cells != cells_b):
            return [*out, f"line {k}: shows {text!r}, printed {text_b!r}"]  # the lines after it are out of step
    header: list[str] = []
    for k, ((kind, cells, text), (_, cells_b, _)) in enumerate(zip(a, b), start=1):
        if kind == "rule":
            if text.startswith(TOP):
                header = []
                if k < len(a) and a[k][0] == "row" and k + 1 < len(a) and a[k + 1][0] == "rule":
                    header = a[k][1]
            continue
        for i, (x, y) in enumerate(zip(cells, cells_b)):
            context = " ".join(([cells[0]] if i else []) + header[i : i + 1]) if kind == "row" else ""
            why = _cell_difference(x, y, context)
            if why:
                out.append(f"line {k}: {why}")
    return out


def _parsed(output: str) -> list[tuple[str, list[str], str]]:
    """Each line of an output as (kind, cells, the line): a table rule (one cell, runs of a character as one), a
    table row (its cells) or text (one cell); runs of spaces as one, blank lines at the end dropped."""
    lines = output.rstrip().splitlines()
    out = []
    for line in lines:
        text = line.strip()
        if text and BORDER.match(text):
            out.append(("rule", [re.sub(r"(.)\1+", r"\1", "".join(text.split()))], text))
        elif VERTICAL.match(text):
            out.append(("row", [" ".join(c.split()) for c in VERTICAL.split(text)[1:-1]], text))
        else:
            out.append(("text", [" ".join(text.split())], text))
    return out


def _cell_difference(shown: str, printed: str, context: str) -> str | None:
    """Why a cell (or a line of text) printed differs from the one shown, by output_differences' rule; None if it
    does not."""
    if NUMBER.sub("#", shown) != NUMBER.sub("#", printed):
        return f"shows {shown!r}, printed {printed!r}"
    for m, n in zip(NUMBER.finditer(shown), NUMBER.finditer(printed)):
        before = re.split(r"[;,(:]", shown[: m.start()])[-1]
        after = shown[m.end() :].split()
        unit = after[0] if after else ""
        name = f"{context} {before}".lower()
        x, y = float(m[0]), float(n[0])
        if "wall time" in name:
            continue
        if unit.startswith("bytes"):
            ok, what = abs(y - x) <= BYTES_RELATIVE * x, f"a size: more than {BYTES_RELATIVE:.0%} apart"
        elif "accuracy" in name:
            points = ACCURACY_POINTS if shown[m.end() :].startswith("%") else ACCURACY_POINTS / 100
            ok, what = abs(y - x) <= points, f"an accuracy: more than {points:g} apart"
        elif "loss" in name:
            ok, what = abs(y - x) <= LOSS_RELATIVE * abs(x), f"a loss: more than {LOSS_RELATIVE:.0%} apart"
        else:
            ok, what = m[0] == n[0], "a setting or a count: must be equal"
        if not ok:
            label = " ".join(f"{context} {before}".split()) or shown
            return f"{label!r} shows {m[0]}, printed {n[0]} ({what})"
    return None


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


def run_shell(
    commands: list[dict[str, Any]],
    timeout: float,
    fresh_bin: str | None = None,
    outputs: list[str] | None = None,
) -> tuple[bool, str]:
    """Each command in its own `bash` (pipefail); one that must exit non-zero with `fresh_bin` first on PATH, where
    `ticket` and `python` are fresh processes rather than the fork server's children, so that the failures the docs
    promise are those of a real start-up. What each command that ended as it must printed is appended to `outputs`
    (what a terminal shows of it: its stdout, and its stderr too for one that must fail; a progress bar or warning
    on the stderr of one that succeeds is not part of it)."""
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
        if outputs is not None:
            outputs.append(stdout + (stderr if c["expect"] else ""))
    return True, "\n".join(log)


def shown_differences(commands: list[dict[str, Any]], shown: list[str], outputs: list[str]) -> tuple[bool, str]:
    """The output a block shows under each command compared with what that command printed (`output_differences`);
    a command shown without output is not compared."""
    log = []
    for c, expected, printed in zip(commands, shown, outputs):
        if not expected.strip():
            continue
        found = output_differences(expected, printed)
        if found:
            log.append(f"$ {c['text']}\nthe output shown differs from the output printed:")
            log += [f"  {d}" for d in found[:20]] + ["printed:", printed.rstrip()[-3000:]]
    for c, expected in list(zip(commands, shown))[len(outputs) :]:
        if expected.strip():
            log.append(f"$ {c['text']}\nnot run, so its output shown is not checked")
    return not log, "\n".join(log)


def run_transcript(
    b: dict[str, Any], before: list[str] | None, timeout: float, fresh_bin: str | None
) -> tuple[bool, str]:
    """A transcript's shown output compared with what its commands printed: in the run of the block before it (its
    outputs `before`), or, when that block did not run, in a run of the transcript's own commands."""
    if b["reuse"] is None:
        outputs: list[str] = []
        ok, log = run_shell(b["commands"], timeout, fresh_bin, outputs)
        if not ok:
            return False, log
        prefix = log + "\n"
    elif before is None:
        return False, f"the block before it, {b['reuse']}, did not run"
    else:
        outputs = [before[k] for k in b["echoes"] if k < len(before)]
        prefix = f"(compared with the output of {b['reuse']})\n"
    ok, log = shown_differences(b["commands"], b["shown"], outputs)
    return ok, prefix + log


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
    printed: dict[str, list[str]] = {}  # what each shell block's commands printed, for the transcript after it
    with open(results_path, "a") as results:
        for b in plan["blocks"]:
            t0, cpu0 = time.monotonic(), cpu_seconds(server)
            name = f"{b['doc']}:{b['line']}"
            if b["kind"] == "python":
                ok, log = run_python(b["code"], name, ns)
            elif b["kind"] == "pycon":
                ok, log = run_pycon(b["code"], name, ns)
            elif b["kind"] == "transcript":
                before = printed.get(b["reuse"]) if b["reuse"] else None
                ok, log = run_transcript(b, before, plan["timeout"], plan.get("fresh_bin"))
            else:
                printed[name] = []
                ok, log = run_shell(b["commands"], plan["timeout"], plan.get("fresh_bin"), printed[name])
                if ok:
                    same, differences = shown_differences(b["commands"], b["shown"], printed[name])
                    ok, log = same, log + ("\n" + differences if differences else "")
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
