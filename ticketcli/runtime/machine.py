"""What decides the last bits of a CPU run besides the command: the torch build, the CPU kind (vendor, model and
the instruction-set level torch's kernels dispatch on) and the BLAS. Tickets record it in `created_by`, and
`evaluate` names what differs when an accuracy does not reproduce exactly (docs/reference/reliability.md,
"Determinism across machines")."""

from __future__ import annotations

import functools
import platform
import re
from pathlib import Path
from typing import Any

MAX_VALUE = 256  # characters of one created_by value, written or read back
MAX_KEYS = 32  # entries of created_by read back
# The created_by keys that describe the machine and build, in the order messages name them
MACHINE_KEYS = ("torch", "torch_git", "cpu_vendor", "cpu_model", "cpu_isa", "blas")
CPUINFO_BYTES = 1 << 16  # /proc/cpuinfo's first processor is in its first few KiB


def _clip(text: str) -> str:
    return " ".join(text.split())[:MAX_VALUE]


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's `vendor_id` and `model name` on Linux ({} elsewhere or when unreadable)."""
    try:
        with path.open("rb") as f:
            text = f.read(CPUINFO_BYTES).decode("utf-8", "replace")
    except OSError:
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key in ("vendor_id", "model name", "CPU implementer") and key not in found:
            found[key] = value.strip()
    return found


def blas_of(config: str) -> str:
    """The BLAS torch was built with, compactly, from torch.__config__.show(): 'mkl 2024.2', 'open', ..."""
    name = re.search(r"BLAS_INFO=([^,\s]+)", config)
    blas = name.group(1) if name else "unknown"
    version = re.search(r"Math Kernel Library Version ([0-9][0-9.]*)", config)
    if blas == "mkl" and version:
        blas += " " + version.group(1)
    return _clip(blas)


@functools.lru_cache(maxsize=1)
def record() -> dict[str, str]:
    """This process's torch build, CPU kind and BLAS, as created_by records them (every value a short string)."""
    import torch

    info = _cpuinfo()
    return {
        "torch": _clip(torch.__version__),
        "torch_git": _clip((torch.version.git_version or "unknown")[:12]),
        "cpu_vendor": _clip(info.get("vendor_id") or info.get("CPU implementer") or platform.machine() or "unknown"),
        "cpu_model": _clip(info.get("model name") or platform.processor() or platform.machine() or "unknown"),
        "cpu_isa": _clip(str(torch.backends.cpu.get_cpu_capability())),
        "blas": blas_of(torch.__config__.show()),
    }


def created_by_problem(created_by: dict[str, Any]) -> str | None:
    """Why a ticket's created_by is refused (too many entries, a value that is not a short string), or None."""
    if len(created_by) > MAX_KEYS:
        return f"'created_by' has more than {MAX_KEYS} entries"
    for key, value in created_by.items():
        if not isinstance(value, str) or len(value) > MAX_VALUE:
            return f"'created_by.{key[:40]}' must be a string of at most {MAX_VALUE} characters"
    return None


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)[:80]


def differences(recorded: dict[str, Any], here: dict[str, str]) -> list[str]:
    """'cpu_isa AVX512 (ticket) vs AVX2 (here)' for each machine key on which the two differ; a key the ticket does
    not record (an older ticket) is 'not recorded'."""
    out = []
    for key in MACHINE_KEYS:
        theirs = recorded.get(key)
        if not isinstance(theirs, str):
            out.append(f"{key} not recorded (here {_printable(here[key])})")
        elif theirs != here[key]:
            out.append(f"{key} {_printable(theirs)} (ticket) vs {_printable(here[key])} (here)")
    return out
