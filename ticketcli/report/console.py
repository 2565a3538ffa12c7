"""The console's streams and one-line messages: stdout for results (one JSON document with --json, tables otherwise),
stderr for people (errors, warnings; progress is in plain.py and progress.py); every string from a file or the user
is shown literally."""

from __future__ import annotations

import errno
import io
import json
import math
import os
import re
import select
import sys
import unicodedata
from typing import IO, Any, cast

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ticketcli.errors import OutputFailed
from ticketcli.ticketfile.record import MethodRecord

# Characters that must never reach a terminal raw, by Unicode category rather than by example: controls (Cc: C0
# with ESC and CR, DEL, C1 with CSI \x9b), format characters (Cf: the bidi marks, embeddings, overrides and
# isolates U+200E/200F/061C/202A-202E/2066-2069, zero-width characters, the BOM), line and paragraph separators
# (Zl, Zp: U+2028/2029), lone surrogates (Cs: invalid text, e.g. an undecodable file name), private-use (Co)
# and unassigned (Cn) code points. Printable ASCII is never looked up, only the other characters.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")


def _escape(m: re.Match[str]) -> str:
    ch = m[0]
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES:
        return ch
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def literal(value: object) -> str:
    """Text that came from a file or the user, made safe to show: every character of an unsafe category escaped
    (\\x1b, \\x0d, \\u202e, \\u2028, \\ud800), so a ticket's metadata, a path or a --model string can never move
    the cursor, recolour, reorder or rewrite the terminal, and a lone surrogate cannot fail the write."""
    return _NOT_PRINTABLE_ASCII.sub(_escape, str(value))


class LiteralConsole(Console):
    """A Console that shows every string as it is: no markup ('[bold red]' or '[/oops]' in a ticket is text, not a
    style or a crash), no emoji codes, no highlighting, control characters escaped. Tables, titles and prints all
    turn their strings into Text through render_str, so this one override covers them all."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs.update(markup=False, emoji=False, highlight=False)
        return super().render_str(literal(text), **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Print as Rich does, but a table never cuts a word at this console's width: it is narrowed between
        words, wrapped into parts or stacked as lines (fit.py)."""
        from ticketcli.report.fit import fitted

        if not any(isinstance(o, Table) for o in objects):
            super().print(*objects, **kwargs)
            return
        for o in objects:
            for part in fitted(self, o) if isinstance(o, Table) else [o]:
                super().print(part, **kwargs)


def no_color() -> bool:
    """NO_COLOR set to any non-empty value (no-color.org): no colour, and no other styling either."""
    return os.environ.get("NO_COLOR", "") != ""


# COLUMNS and LINES are input too: COLUMNS=0 would make Rich render every table as nothing, a huge value
# would make it pad lines without end. A value outside these bounds is clamped; one that is not a number is
# ignored (Rich measures the terminal, or assumes 80 columns).
COLUMNS_RANGE = (40, 10_000)
LINES_RANGE = (10, 10_000)


def _dimension(name: str, bounds: tuple[int, int]) -> int | None:
    """The environment's COLUMNS or LINES clamped to `bounds`; None when unset or not a decimal number."""
    raw = os.environ.get(name, "").strip()
    if not (raw.isascii() and raw.isdigit()):
        return None
    return min(max(int(raw) if len(raw) <= 9 else bounds[1], bounds[0]), bounds[1])


class ResultsStream:
    """stdout for results. A write that fails for any reason but a stdout that is gone (a full disk, /dev/full, an
    I/O error) ends the run with one error line (exit 2) instead of an internal error, and what is still buffered
    is dropped (fd 1 then points at /dev/null), so that the interpreter's final flush cannot fail again. A gone
    stdout (a closed pipe, a closed fd or stream) keeps its own quiet ending (exit 141, exits.py)."""

    def __init__(self, stream: IO[str]):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            raw = getattr(self._stream, "buffer", None)
            if isinstance(raw, io.RawIOBase):
                self._write_all(raw, text)
                return len(text)
            return self._stream.write(text)
        except OSError as e:
            raise _output_failed(self._stream, e) from None
        except ValueError as e:
            raise _closed_stream(self._stream, e) from None

    def _write_all(self, raw: io.RawIOBase, text: str) -> None:
        """Unbuffered stdout (PYTHONUNBUFFERED=1, python -u): the text layer writes straight to the file and drops
        whatever a partial write left over (a reader that went away mid-write), so the run would end 0 with its
        output cut. Written here until every byte is out, or the write fails (EPIPE: exit 141)."""
        self._stream.flush()
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        view = memoryview(text.encode(encoding, getattr(self._stream, "errors", None) or "strict"))
        while view:
            n = raw.write(view)
            if n is None:  # a non-blocking stdout that is full: wait for room
                select.select([], [raw], [])
                continue
            view = view[n:]

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise _output_failed(self._stream, e) from None
        except ValueError as e:
            raise _closed_stream(self._stream, e) from None

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding: what Rich asks of its file
        return getattr(self._stream, name)


def results() -> IO[str]:
    """The current sys.stdout as a ResultsStream."""
    return cast(IO[str], ResultsStream(sys.stdout))


# A stream that is gone: its reader went away (EPIPE) or its fd was closed (EBADF). exits.closed_output ends the
# run quietly, as for `| head`; any other failure to write the results is an error of its own.
GONE = (errno.EPIPE, errno.EBADF)


def _closed_stream(stream: IO[str], e: ValueError) -> BaseException:
    """A write to a closed stream object is a stream that is gone, as a closed fd is; any other ValueError stays."""
    if getattr(stream, "closed", False):
        return BrokenPipeError(errno.EPIPE, "the stream is closed")
    return e


def _output_failed(stream: IO[str], e: OSError) -> BaseException:
    if e.errno in GONE:
        return e
    _drop_buffered(stream, 1)
    return OutputFailed(f"cannot write the results to stdout: {e.strerror or e}")


def _drop_buffered(stream: IO[str], fd: int) -> None:
    """Point fd at /dev/null and drain the stream's buffer there: its content could not be written anyway."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, fd)
        finally:
            os.close(devnull)
        stream.flush()
    except (OSError, ValueError):
        pass


def write_stderr(text: str) -> None:
    """Write to stderr for people. A stderr that cannot be written (2>/dev/full, a full disk) changes nothing: the
    line is dropped and the exit code stays the run's own. A stderr that is gone (a closed pipe, a closed fd or
    stream) ends the run quietly (141), as a closed stdout does."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError as e:
        if e.errno in GONE:
            raise
        _drop_buffered(sys.stderr, 2)
    except ValueError as e:
        raise _closed_stream(sys.stderr, e) from None


def standard_streams() -> None:
    """A sys.stdout or sys.stderr that is missing (None: its fd was closed when Python started, `>&-`) or closed
    becomes a stream on a pipe whose reader has gone, so that writing to it is the closed-pipe case wherever the
    write happens (Rich, Typer's help, a print): exit 141, quietly, as exits.closed_output ends it. The console
    script's entry.py has already done so for a closed fd; this covers any other caller of the CLI."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or getattr(stream, "closed", False):
            read, write = os.pipe()
            os.close(read)
            setattr(sys, name, open(write, "w", errors="backslashreplace", buffering=1 if name == "stderr" else -1))


def tolerate_encodings() -> None:
    """stdout and stderr escape what their encoding cannot write (PYTHONIOENCODING=ascii, a Latin-1 locale) as
    \\u2026 rather than failing on the first non-ASCII character."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _console(file: IO[str]) -> Console:
    # Rich's own NO_COLOR handling drops colours but keeps bold and underline escapes; without a colour system it
    # writes none at all, even under FORCE_COLOR. TERM=dumb needs nothing here: Rich gives a dumb terminal no colour.
    width, height = _dimension("COLUMNS", COLUMNS_RANGE), _dimension("LINES", LINES_RANGE)  # None: Rich decides
    if no_color():
        return LiteralConsole(file=file, soft_wrap=True, color_system=None, width=width, height=height)
    return LiteralConsole(file=file, soft_wrap=True, width=width, height=height)


def stdout() -> Console:
    """The console for results."""
    return _console(results())


def stderr() -> Console:
    """The console for people: progress, warnings."""
    return _console(sys.stderr)


def flush_results() -> None:
    """Flush stdout before the exit code is final: a failed write is reported here, not lost at shutdown."""
    results().flush()


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def finite_json(obj: object) -> object:
    """NaN and ±Infinity as null: strict JSON has no such numbers, and CI parsers (jq, JSON.parse) reject them.
    A lone surrogate in a string (or key) becomes U+FFFD: JSON can only write it as an escape that encodes no
    character, which strict parsers reject, so the document stays valid Unicode whatever a file held."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, dict):
        return {finite_json(k) if isinstance(k, str) else k: finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def print_json(obj: dict[str, Any]) -> None:
    """Exactly one strict JSON document on stdout (non-finite numbers as null, lone surrogates as U+FFFD, non-ASCII
    and controls escaped)."""
    results().write(json.dumps(finite_json(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def one_line(text: str) -> str:
    """`text` as one literal line on stderr: newlines folded to spaces, unsafe characters escaped."""
    return literal(text.replace("\r\n", " ").replace("\n", " ")) + "\n"


def error(message: str, hint: str | None = None) -> None:
    """One line on stderr, shown literally (a message quotes paths and file contents)."""
    write_stderr(one_line(f"error: {message}" + (f" (hint: {hint})" if hint else "")))


def internal_error(e: BaseException, *, traceback_shown: bool = False) -> None:
    """The one line of an unexpected exception (a bug): its type and first line, and how to see the traceback."""
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
    what = type(e).__name__ + (f": {first}" if first else "")
    how = "the traceback is above" if traceback_shown else "rerun with TICKET_DEBUG=1 for the traceback"
    write_stderr(one_line(f"internal error: {what}; {how}"))


def warn(message: str) -> None:
    """One line on stderr (only from rank 0 under torchrun: every rank would say the same)."""
    from ticketcli.runtime.world import quiet_rank  # torch-free (distributed.py imports torch)

    if not quiet_rank():
        write_stderr(one_line(f"warning: {message}"))


def pct(x: float | None) -> str:
    """A fraction as a percentage with two decimals ("-" when absent)."""
    return "-" if x is None else f"{100 * x:.2f}%"


def method_name(method: object) -> str:
    """The name of a result's `method`: the ticket's method record (a MethodRecord, or its JSON object), or a bare
    name."""
    if isinstance(method, MethodRecord):
        return method.name
    return str(method.get("name")) if isinstance(method, dict) else str(method)
