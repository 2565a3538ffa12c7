"""The walk of a spec: which functions of the package a run's specs pass through, and how often the reader has to
go back to a file already read. A measure of how the code is laid out, not of speed.

    python benchmarks/spec_walk.py [--method augmented] [--model mlp:64-32-10]

Runs one tiny extraction on digits (one epoch) through `runs.extract.extract_ticket` with a profiler hook, and
records every call of a ticketcli function that receives a spec (ModelSpec, InitSpec, MethodSpec, DataSpec, RunSpec)
as an argument. A *stop* is such a function, counted once, in the order first reached; *files* are the distinct
modules those stops live in; a *return* is a stop in a file already visited before, other than the previous stop's
file (the reader leaves a file and comes back to it).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SPEC_TYPES = ("ModelSpec", "InitSpec", "MethodSpec", "DataSpec", "RunSpec")


def _build_spec(flags: dict[str, Any]) -> Any:
    """The RunSpec `ticket extract` builds from these flags, wherever this checkout keeps its resolution."""
    for name in ("ticketcli.settings.resolve", "ticketcli.resolve"):
        try:
            resolve = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        return resolve.build_extract_spec(resolve.merge_settings(flags, None))
    raise SystemExit("build_extract_spec not found")


def walk(method: str, model: str) -> list[tuple[str, str]]:
    """(file relative to the package, function) for each stop, in the order first reached."""
    from ticketcli.runs.extract import extract_ticket

    spec = _build_spec({"method": method, "model": model, "dataset": "digits", "epochs": 1, "seed": 0})
    pkg = str(ROOT / "ticketcli")
    stops: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(pkg):
            return
        code = frame.f_code
        args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if not any(dataclasses.is_dataclass(a) and type(a).__name__ in SPEC_TYPES for a in args):
            return
        key = (str(Path(code.co_filename).relative_to(pkg)), code.co_qualname)
        if key not in seen:
            seen.add(key)
            stops.append(key)

    with tempfile.TemporaryDirectory() as tmp:
        sys.setprofile(hook)
        try:
            extract_ticket(spec, out=Path(tmp) / "t.safetensors")
        finally:
            sys.setprofile(None)
    return stops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="augmented")
    ap.add_argument("--model", default="mlp:64-32-10")
    ap.add_argument("--list", action="store_true", help="print every stop")
    a = ap.parse_args()
    stops = walk(a.method, a.model)
    files: list[str] = []
    returns = 0
    for i, (file, _fn) in enumerate(stops):
        if file in files and stops[i - 1][0] != file:
            returns += 1
        if file not in files:
            files.append(file)
        if a.list:
            print(f"{i + 1:3d} {file}:{_fn}")
    print(f"stops {len(stops)}  files {len(files)}  returns {returns}")


if __name__ == "__main__":
    main()
