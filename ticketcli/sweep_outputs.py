"""Files sweep-k writes outside --out-dir (its plot), noted in --out-dir with their sha256, so that rerunning the
same command (which resumes the finished runs) may redraw them without --force, while a file the user made, or
changed since, is still refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ticketcli.atomic import write_atomic
from ticketcli.bounded import read_regular_file
from ticketcli.errors import UsageError
from ticketcli.seeding import file_sha256

OUTPUTS = "sweep-outputs.json"  # in --out-dir: path -> sha256 of each file the sweep wrote elsewhere (its plot)


OUTPUTS_LIMIT = 1 << 20  # a note of a few paths; anything bigger is not ours


def _outputs(out_dir: Path) -> dict[str, str]:
    """The note in out_dir; when absent, unreadable or not ours, nothing is known to be the sweep's."""
    try:
        known = json.loads(read_regular_file(out_dir / OUTPUTS, OUTPUTS_LIMIT, "sweep-k's outputs note"))
    except (UsageError, ValueError):
        return {}
    return {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}


def written_here(out_dir: str | Path | None, path: str | Path) -> bool:
    """Whether `path` holds exactly the bytes an earlier run with this --out-dir wrote there: rerunning the same
    command may then replace it, as it resumes the runs, without --force."""
    if out_dir is None or not Path(path).is_file():
        return False
    recorded = _outputs(Path(out_dir)).get(str(Path(path).resolve()))
    return recorded is not None and recorded == file_sha256(path)


def remember_output(out_dir: str | Path | None, path: str | Path, payload: bytes) -> None:
    """Note in --out-dir that the sweep wrote `payload` to `path` (see written_here)."""
    if out_dir is None:
        return
    known = {**_outputs(Path(out_dir)), str(Path(path).resolve()): hashlib.sha256(payload).hexdigest()}
    write_atomic(Path(out_dir) / OUTPUTS, (json.dumps(known, indent=2, sort_keys=True) + "\n").encode(), overwrite=True)
