"""Checkpoint files: weights a ticket was extracted from (where the ticket records them), and the resumable state
of a long run, written atomically next to its output every N epochs (`<out>.ckpt`).

A checkpoint holds the run's identity (everything that decides its result: specs, weights fingerprint, device,
torch version) and the method's state at an epoch boundary (for score methods: scores incl. auxiliary, Adam
state, the generator state, epoch, and for iterated the round and cumulative mask). Resuming restores that state
exactly, so the masks come out bit-identical to an uninterrupted run; a checkpoint of a different run is refused.
TopKSelector's warm start is not saved: it only changes speed, never the selected entries.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch

from ticketcli.errors import UsageError
from ticketcli.files.atomic import Owned, write_owned
from ticketcli.files.nesting import shallow_json

FORMAT = "ticket-checkpoint/1"


RESAVE = "re-save it as a state dict of tensors (torch.save(model.state_dict(), f)) or as safetensors"


def read_torch_file(path: str | Path, what: str, hint: str | None = None, data: bytes | None = None) -> Any:
    """torch.load with weights_only=True (never arbitrary unpickling); every failure is one UsageError line.
    `data`: the file's bytes, already read within a bound (then the path only names it in messages).

    torch's own refusal advises weights_only=False, i.e. running whatever code the file names: that advice is not
    passed on."""
    path = Path(path)
    source = _bounded_source(path, what, hint, data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns on stderr about old pickle protocols
            return torch.load(source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        named = re.search(r"GLOBAL ([\w.]+)", str(e))
        if named:
            raise UsageError(
                f"{path} is a pickle that needs arbitrary code to load (it names {named[1]}); "
                f"ticket only reads tensors",
                hint=hint or RESAVE,
            ) from None
        if _starts_like_pickle(path if data is None else data):
            raise UsageError(
                f"{path} is a pickle that torch's safe loader cannot read; ticket only reads tensors",
                hint=hint or RESAVE,
            ) from None
        raise UsageError(f"cannot read {what} {path}: not a PyTorch file", hint=hint) from None
    except Exception as e:  # a torn or foreign file raises many types (RuntimeError, EOFError, KeyError, ...)
        raise UsageError(f"cannot read {what} {path}: {first_sentence(e)}", hint=hint) from None


ZIP_MAGIC = b"PK\x03\x04"  # what torch.load checks to choose its zip reader over the legacy pickle stream


def _bounded_source(path: Path, what: str, hint: str | None, data: bytes | None) -> Path | io.BytesIO:
    """What torch.load reads, such that nothing it allocates can outgrow the file.

    - A zip archive (torch.save's format) is read from its path, once every entry is stored as is (torch.save never
      compresses) and declares no more bytes than the file holds: an inflated entry could be any size.
    - Anything else goes to torch's legacy reader, a pickle stream whose length fields ask for read(n): on a file,
      read(n) allocates n bytes up front (4 GiB from a 5-byte string header), from memory it returns what there is.
    """
    try:
        if data is None:
            with open(path, "rb") as f:
                head = f.read(len(ZIP_MAGIC))
                if head != ZIP_MAGIC:
                    f.seek(0)
                    data = f.read()  # the file's own size: what a legacy stream needs anyway
        if data is not None and not data.startswith(ZIP_MAGIC):
            return io.BytesIO(data)
        size = len(data) if data is not None else os.path.getsize(path)
        with zipfile.ZipFile(io.BytesIO(data) if data is not None else path) as archive:
            entries = archive.infolist()
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e.strerror or first_sentence(e)}", hint=hint) from None
    except Exception as e:  # zipfile's many refusals of a torn or forged directory
        raise UsageError(
            f"cannot read {what} {path}: not a zip archive torch can read ({first_sentence(e)})", hint=hint
        ) from None
    for entry in entries:
        if entry.compress_type != zipfile.ZIP_STORED:
            raise UsageError(
                f"cannot read {what} {path}: its entry {entry.filename[:80]!r} is compressed "
                f"(torch.save stores entries as they are)",
                hint=hint or RESAVE,
            )
        if max(entry.file_size, entry.compress_size) > size:
            raise UsageError(
                f"cannot read {what} {path}: its entry {entry.filename[:80]!r} declares {entry.file_size} bytes "
                f"in a {size}-byte file",
                hint=hint,
            )
    return io.BytesIO(data) if data is not None else path


def first_sentence(e: BaseException) -> str:
    """The gist of a library's exception for a one-line message (torch's run on for a paragraph)."""
    text = str(e).strip()
    return text.splitlines()[0].split(". ")[0][:160] if text else type(e).__name__


def _starts_like_pickle(source: Path | bytes) -> bool:
    """The PROTO opcode (0x80) and a protocol number: a pickle rather than random bytes."""
    if isinstance(source, bytes):
        head = source[:2]
    else:
        with open(source, "rb") as f:
            head = f.read(2)
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def ticket_relative(weights: str | Path, ticket: str | Path) -> str:
    """The weights' path as a ticket records it: relative to the ticket's folder (with / separators), so that a
    ticket and its checkpoint shared as a folder still find each other; absolute where no relative path exists
    (another drive on Windows)."""
    weights, folder = os.path.abspath(weights), os.path.dirname(os.path.abspath(ticket))
    try:
        return Path(os.path.relpath(weights, folder)).as_posix()
    except ValueError:
        return Path(weights).as_posix()


def saved_at(record: dict[str, Any] | None, ticket: str | Path) -> dict[str, Any] | None:
    """A checkpoint record (absolute path, as an extraction makes it) as the ticket at `ticket` stores it: the path
    relative to that ticket's folder (ticket_relative). Records already relative (a loaded ticket) stay as they are."""
    if record is None or not os.path.isabs(record["path"]):
        return record
    return {**record, "path": ticket_relative(record["path"], ticket)}


def recorded_locations(stored: str, ticket: str | Path) -> list[Path]:
    """Where a ticket's recorded checkpoint may be, in the order tried: relative to the ticket's folder, then as
    written (relative to the working directory; absolute in tickets written before paths were relative)."""
    beside = Path(ticket).parent / stored  # an absolute `stored` stays itself
    return list(dict.fromkeys([beside, Path(stored)]))


def checkpoint_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".ckpt")


class Checkpointer:
    """Saves every `every` epochs (never when None); `restore()` returns the saved state when resuming.

    The checkpoint is the run's own file: created exclusively, replaced (and removed at the end) only while it is
    still the file this run wrote or resumed from; a file of that name the run did not write is replaced only with
    `overwrite` (--force) and never removed."""

    def __init__(
        self, path: Path, *, every: int | None, identity: dict[str, Any], resume: bool, overwrite: bool = False
    ):
        self.path, self.every, self.resume, self.overwrite = Path(path), every, resume, overwrite
        self.identity = json.loads(json.dumps(identity))  # plain JSON values, compared as such
        self.owned: Owned | None = None  # the file this run wrote last, or the one it resumed from

    def due(self, epoch: int) -> bool:
        """Save after this (1-based, completed) epoch?"""
        return self.every is not None and epoch % self.every == 0

    def save(self, state: dict[str, Any]) -> None:
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "identity": json.dumps(self.identity, sort_keys=True), "state": state}, buf)
        self.owned = write_owned(self.path, buf.getvalue(), overwrite=self.overwrite, owned=self.owned)

    def restore(self) -> dict[str, Any] | None:
        """The saved state (CPU tensors) if resuming and a checkpoint exists, checked to belong to this run."""
        if not self.resume or not self.path.is_file():
            return None
        fresh = "delete it to start from scratch"
        before = os.lstat(self.path)
        saved = read_torch_file(self.path, "checkpoint", hint=fresh)
        try:
            ok = saved.get("format") == FORMAT and isinstance(saved.get("state"), dict)
            identity = shallow_json(saved["identity"]) if ok else None
        except (AttributeError, TypeError, KeyError, ValueError):  # not a dict, no identity, bad JSON
            identity = None
        if not isinstance(identity, dict):
            raise UsageError(f"{self.path} is not a ticket checkpoint", hint=fresh)
        if identity != self.identity:
            changed = sorted(k for k in set(identity) | set(self.identity) if identity.get(k) != self.identity.get(k))
            detail = "; ".join(_diff(k, identity.get(k), self.identity.get(k)) for k in changed)
            raise UsageError(
                f"{self.path} belongs to a different run ({detail[:300]})",
                hint="resume with the original options, or delete the checkpoint to start over",
            )
        self.owned = Owned.of(self.path, before)  # this run's own state: replaced and removed as if written here
        return cast(dict[str, Any], saved["state"])  # checked to be a dict above (`ok`)

    @contextmanager
    def resuming(self) -> Iterator[None]:
        """Putting a restored state back (scores, Adam, generator, round): a state of the right run but the wrong
        structure (torn, hand-made, another ticketcli's) is one line, not a traceback from deep in torch."""
        try:
            yield
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as e:
            raise UsageError(
                f"{self.path} does not hold a state this run can resume ({type(e).__name__}: {first_sentence(e)})",
                hint="delete it to start from scratch",
            ) from None

    def remove(self) -> None:
        """Remove the checkpoint once the ticket is written, if it is still the file this run wrote or resumed."""
        if self.owned is not None:
            self.owned.remove()


def _diff(key: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        fields = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
        return ", ".join(f"{key}.{f}: {old.get(f)!r} -> {new.get(f)!r}" for f in fields)
    return f"{key}: {old!r} -> {new!r}"


def describe(path: Path) -> str | None:
    """'checkpoint X holds epoch E (round R)' for an interrupt message, or None without one."""
    if not path.is_file():
        return None
    try:
        state = read_torch_file(path, "checkpoint")["state"]
        at = f"epoch {int(state['epoch'])}" + (f" of round {int(state['round'])}" if "round" in state else "")
    except Exception:
        at = "an unreadable state"
    return f"checkpoint {path} holds {at}: rerun the same command with --resume to continue"
