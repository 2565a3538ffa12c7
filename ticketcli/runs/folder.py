"""Several tickets at once: the ticket files that paths, folders and glob patterns name, and `ticket inspect`'s
one-row-per-ticket result over them (a sweep's `--out-dir` is the typical folder).

Torch-free, like runs/inspect.py: each ticket is validated and its masks counted from the packed bytes, one file
at a time, and only its row is kept, so a folder of thousands of tickets never holds more than one in memory."""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, entries
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.runs.aggregate import Sample, SeedGroup, matched_folder, seed_groups
from ticketcli.runs.header import TicketHeader
from ticketcli.ticketfile import ticket as ticket_io

SUFFIX = ".safetensors"  # in a folder or a glob's matches, only files named so are read as tickets
GLOB_CHARS = frozenset("*?[")
FAILED = ("modified", "invalid")  # integrity values that fail the folder check (exit 1)


def is_pattern(text: str) -> bool:
    return any(c in GLOB_CHARS for c in text)


def single_file(paths: Sequence[Path]) -> bool:
    """Whether the arguments name one ticket file (the single-ticket output), not a folder, a glob or several."""
    if len(paths) != 1:
        return False
    p = paths[0]
    return not p.is_dir() and (p.exists() or not is_pattern(str(p)))


MAX_ENTRIES = 1_000_000  # folder entries one command may look through, all its folders and patterns together


class _Lister:
    """Lists folders for one expansion: MAX_ENTRIES entries in all, sorted by name; `**` lists each real folder
    (device, inode) once per place in its pattern."""

    def __init__(self) -> None:
        self.left = MAX_ENTRIES
        self.seen: set[tuple[int, int, int]] = set()

    def __call__(self, folder: str, named: str) -> list[os.DirEntry[str]]:
        found = []
        with os.scandir(folder or ".") as it:
            for e in it:
                self.left -= 1
                if self.left < 0:
                    raise UsageError(
                        f"{named}: more than {MAX_ENTRIES} folder entries to look through",
                        hint="name a smaller folder or a narrower pattern",
                    )
                found.append(e)
        return sorted(found, key=lambda e: e.name)

    def once(self, folder: str, place: int) -> bool:
        """Whether `folder` is met for the first time at this place of a pattern."""
        st = os.stat(folder or ".")
        key = (st.st_dev, st.st_ino, place)
        fresh = key not in self.seen
        self.seen.add(key)
        return fresh


def _is_dir(path: str | Path) -> bool:
    """A folder, through symlinks; an entry that cannot be asked (a symlink loop, a path too long) is not one."""
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def _folder(folder: Path, listing: _Lister) -> Iterator[Path]:
    """The *.safetensors entries directly in `folder`, by name (its other files, e.g. a sweep's JSON records, and its
    subfolders are skipped). An entry that cannot be asked (a symlink loop, a dangling link, a FIFO) is listed: the
    reader refuses it as that ticket's row, never the whole folder."""
    try:
        names = [e.name for e in listing(str(folder), str(folder)) if e.name.endswith(SUFFIX)]
    except OSError as e:
        raise UsageError(f"cannot read the folder {folder} ({e.strerror or e})") from None
    return (folder / n for n in names if not _is_dir(folder / n))


def _glob(pattern: str, listing: _Lister) -> Iterator[str]:
    """What glob.glob(pattern, recursive=True) matches, except that `**` never descends into a symlinked folder,
    nor twice into one real folder: no pattern loops, whatever links the folders hold."""
    parts = pattern.split(os.sep)
    if parts[0] == "":  # an absolute pattern
        return _match(os.sep, parts[1:], listing, pattern)
    return _match("", parts, listing, pattern)


def _match(folder: str, parts: list[str], listing: _Lister, pattern: str) -> Iterator[str]:
    if not parts:
        yield folder
        return
    head, rest = parts[0], parts[1:]
    try:
        if head == "**":
            if not listing.once(folder, len(parts)):
                return
            yield from _match(folder, rest, listing, pattern)
            for e in listing(folder, pattern):
                if e.name.startswith("."):
                    continue
                if e.is_dir(follow_symlinks=False):
                    yield from _match(os.path.join(folder, e.name), parts, listing, pattern)
                elif not rest:  # a last `**` matches every file below too
                    yield os.path.join(folder, e.name)
        elif glob.has_magic(head):
            for e in listing(folder, pattern):
                if (head.startswith(".") or not e.name.startswith(".")) and fnmatch.fnmatchcase(e.name, head):
                    path = os.path.join(folder, e.name)
                    if not rest or _is_dir(path):
                        yield from _match(path, rest, listing, pattern)
        else:
            path = os.path.join(folder, head)
            if _is_dir(path) if rest else os.path.lexists(path):
                yield from _match(path, rest, listing, pattern)
    except OSError:  # a folder that cannot be listed matches nothing, as in glob
        return


def ticket_paths(paths: Sequence[Path]) -> list[Path]:
    """The ticket files that `paths` name, in order, each once: a folder gives the *.safetensors files directly in
    it (by name), a glob pattern (quoted, so the shell left it) its matching *.safetensors files (`**` never through
    a symlinked folder), and any other path itself (a missing or foreign file becomes a failed row, not a stop).
    Nothing at all, or more than MAX_ENTRIES folder entries to look through, is one UsageError."""
    found: list[Path] = []
    listing = _Lister()
    for p in paths:
        if p.is_dir():
            found.extend(_folder(p, listing))
        elif not p.exists() and is_pattern(str(p)):
            matches = (Path(m) for m in sorted(_glob(str(p), listing)) if m.endswith(SUFFIX))
            found.extend(m for m in matches if not _is_dir(m))
        else:
            found.append(p)
    unique = list(dict.fromkeys(found))
    if not unique:
        named = ", ".join(str(p) for p in paths[:3]) + (", ..." if len(paths) > 3 else "")
        raise UsageError(f"no ticket files (*{SUFFIX}) in {named}", hint="give a folder of tickets, a file or a glob")
    return unique


@dataclass(frozen=True)
class TicketRow:
    """One ticket of a folder as `inspect` lists it: what it is, what it stored, and whether it is intact.
    integrity: the reader's "ok", "modified" or "not recorded", or "invalid" with `error` (the reader's one line)."""

    ticket: str
    integrity: str
    error: str | None = None
    file_bytes: int | None = None
    method: str | None = None
    model: str | None = None
    seed: int | None = None
    requested_sparsity: float | None = None
    achieved_sparsity: float | None = None  # counted from the packed masks
    test_accuracy: float | None = None  # as stored at extraction
    val_accuracy: float | None = None
    masks_sha256: str | None = None
    matched_to: str | None = field(default=None, compare=False)  # --match-sparsity's ticket (groups, not the row)
    test_bits_per_char: float | None = None  # a language model's ticket (--dataset text), as stored
    val_bits_per_char: float | None = None

    @property
    def failed(self) -> bool:
        return self.integrity in FAILED

    def to_dict(self) -> JsonObject:
        return {
            **entries(self, "ticket", "integrity", "error", "file_bytes", "method", "model", "seed"),
            "sparsity": {"requested": self.requested_sparsity, "achieved": self.achieved_sparsity},
            "metrics": {
                split: {"accuracy": acc, **({"bits_per_char": bits} if bits is not None else {})}
                for split, acc, bits in (
                    ("test", self.test_accuracy, self.test_bits_per_char),
                    ("val", self.val_accuracy, self.val_bits_per_char),
                )
                if acc is not None
            },
            "masks_sha256": self.masks_sha256,
        }


def inspect_row(path: Path) -> TicketRow:
    """A ticket's row: validated and counted like `ticket inspect` (runs.inspect), a file it refuses as a row whose
    integrity is "invalid" with the one-line reason."""
    try:
        scanned = ticket_io.scan(path)
        size = path.stat().st_size
    except TicketFileError as e:
        return TicketRow(ticket=str(path), integrity="invalid", error=str(e))
    except OSError as e:
        return TicketRow(ticket=str(path), integrity="invalid", error=f"{path}: cannot read ({e.strerror or e})")
    tk = scanned.ticket
    kept = sum(k for k, _ in scanned.counts.values())
    total = sum(t for _, t in scanned.counts.values())
    header = TicketHeader.of(path, tk)
    return TicketRow(
        ticket=header.ticket,
        integrity=tk.integrity,
        file_bytes=size,
        method=header.method.name,
        model=header.model,
        seed=header.seed,
        requested_sparsity=tk.sparsity.requested,
        achieved_sparsity=1.0 - kept / total if total else None,
        test_accuracy=tk.metrics.accuracy("test"),
        val_accuracy=tk.metrics.accuracy("val"),
        masks_sha256=tk.masks_sha256,
        matched_to=_text(header.method.option("matched_to")),
        test_bits_per_char=None if tk.metrics.test is None else tk.metrics.test.bits_per_char,
        val_bits_per_char=None if tk.metrics.val is None else tk.metrics.val.bits_per_char,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def sample(row: TicketRow) -> Sample | None:
    """A row's values for the seed groups (None for a file that is not a readable ticket)."""
    if row.method is None or row.model is None:
        return None
    return Sample(
        method=row.method,
        model=row.model,
        seed=row.seed,
        requested_sparsity=row.requested_sparsity,
        matched_in=matched_folder(row.matched_to),
        achieved_sparsity=row.achieved_sparsity,
        test_accuracy=row.test_accuracy,
        val_accuracy=row.val_accuracy,
        test_bits_per_char=row.test_bits_per_char,
        val_bits_per_char=row.val_bits_per_char,
    )


def failures_line(names: Sequence[tuple[str, str]], total: int, what: str) -> str:
    """'2 of 7 tickets failed validation: a.safetensors (modified), b.safetensors (invalid)' (at most 5 named)."""
    shown = ", ".join(f"{Path(t).name} ({why})" for t, why in names[:5]) + (", ..." if len(names) > 5 else "")
    return f"{len(names)} of {total} tickets {what}: {shown}"


@dataclass(frozen=True, eq=False)  # compared as its document (Result, a Mapping)
class InspectFolderResult(Result):
    """What `ticket inspect DIR` (or a glob, or several files) reports: one row per ticket, in order."""

    COMMAND: ClassVar[str] = "inspect-folder"

    tickets: tuple[TicketRow, ...]
    aggregate: tuple[SeedGroup, ...] | None = None  # --aggregate: the tickets over their seeds

    @property
    def failed(self) -> list[TicketRow]:
        return [r for r in self.tickets if r.failed]

    def body(self) -> JsonObject:
        doc: JsonObject = {
            "tickets": [r.to_dict() for r in self.tickets],
            "count": len(self.tickets),
            "failed": len(self.failed),
        }
        if self.aggregate is not None:
            doc["aggregate"] = [g.to_dict() for g in self.aggregate]
        return doc

    def failure_line(self) -> str | None:
        """The one line of a folder with tickets that fail validation (exit 1), or None."""
        bad = self.failed
        if not bad:
            return None
        return failures_line([(r.ticket, r.integrity) for r in bad], len(self.tickets), "failed validation")


def inspect_folder(paths: Sequence[Path], *, aggregate: bool = False) -> InspectFolderResult:
    """Every ticket that `paths` name (ticket_paths), validated one at a time; with `aggregate`, also grouped over
    their seeds (the readable tickets, by method, model and requested sparsity)."""
    rows = tuple(inspect_row(p) for p in ticket_paths(paths))
    if not aggregate:
        return InspectFolderResult(tickets=rows)
    samples = [x for x in map(sample, rows) if x is not None]
    return InspectFolderResult(tickets=rows, aggregate=seed_groups(samples))
