"""Several tickets at once: the ticket files that paths, folders and glob patterns name, and `ticket inspect`'s
one-row-per-ticket result over them (a sweep's `--out-dir` is the typical folder).

Torch-free, like runs/inspect.py: each ticket is validated and its masks counted from the packed bytes, one file
at a time, and only its row is kept, so a folder of thousands of tickets never holds more than one in memory."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ticketcli.contract.result import Result
from ticketcli.contract.schema import JsonObject, entries
from ticketcli.errors import TicketFileError, UsageError
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


def _folder(folder: Path) -> Iterator[Path]:
    """The *.safetensors entries directly in `folder`, by name (its other files, e.g. a sweep's JSON records, and its
    subfolders are skipped)."""
    try:
        with os.scandir(folder) as entries:
            # a FIFO or device of that name is listed (and refused unread by the reader), a folder is not
            names = [e.name for e in entries if e.name.endswith(SUFFIX) and not e.is_dir()]
    except OSError as e:
        raise UsageError(f"cannot read the folder {folder} ({e.strerror or e})") from None
    return (folder / n for n in sorted(names))


def ticket_paths(paths: Sequence[Path]) -> list[Path]:
    """The ticket files that `paths` name, in order, each once: a folder gives the *.safetensors files directly in
    it (by name), a glob pattern (quoted, so the shell left it) its matching *.safetensors files, and any other path
    itself (a missing or foreign file becomes a failed row, not a stop). Nothing at all is one UsageError."""
    found: list[Path] = []
    for p in paths:
        if p.is_dir():
            found.extend(_folder(p))
        elif not p.exists() and is_pattern(str(p)):
            matches = (Path(m) for m in sorted(glob.glob(str(p), recursive=True)) if m.endswith(SUFFIX))
            found.extend(m for m in matches if not m.is_dir())
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

    @property
    def failed(self) -> bool:
        return self.integrity in FAILED

    def to_dict(self) -> JsonObject:
        return {
            **entries(self, "ticket", "integrity", "error", "file_bytes", "method", "model", "seed"),
            "sparsity": {"requested": self.requested_sparsity, "achieved": self.achieved_sparsity},
            "metrics": {
                split: {"accuracy": acc}
                for split, acc in (("test", self.test_accuracy), ("val", self.val_accuracy))
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

    @property
    def failed(self) -> list[TicketRow]:
        return [r for r in self.tickets if r.failed]

    def body(self) -> JsonObject:
        return {
            "tickets": [r.to_dict() for r in self.tickets],
            "count": len(self.tickets),
            "failed": len(self.failed),
        }

    def failure_line(self) -> str | None:
        """The one line of a folder with tickets that fail validation (exit 1), or None."""
        bad = self.failed
        if not bad:
            return None
        return failures_line([(r.ticket, r.integrity) for r in bad], len(self.tickets), "failed validation")


def inspect_folder(paths: Sequence[Path]) -> InspectFolderResult:
    """Every ticket that `paths` name (ticket_paths), validated one at a time."""
    return InspectFolderResult(tickets=tuple(inspect_row(p) for p in ticket_paths(paths)))
