"""What an export asks for, checked without torch: the format, --with-preprocessing, the output's name for the
format, the onnx extra's presence and the destination. The command line runs these before it imports torch (and
makes the destination's folders first, as every --out does); export_ticket runs them again for the Python API."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ticketcli.errors import UsageError
from ticketcli.files.atomic import check_destination

FORMATS = ("masked", "prune", "csr", "masks", "onnx", "sparse")
LAYOUTS = ("auto", "csr", "bsr", "2:4")  # --format sparse's layouts (export/sparse/layouts.py)
ONNX_EXTRA = "pip install 'ticketcli[onnx]'"
ONNX_MODULES = ("onnx", "onnxruntime", "onnxscript")  # onnxscript: what torch's exporter runs on


def missing_onnx(*, load: bool) -> list[str]:
    """The onnx extra's modules that are not installed (`load`: imported, so a broken install counts as missing;
    else only looked up, which imports nothing)."""
    missing = []
    for name in ONNX_MODULES:
        try:
            found = importlib.import_module(name) if load else importlib.util.find_spec(name)
        except Exception:  # ImportError, or a broken install failing as it loads
            found = None
        if found is None:
            missing.append(name)
    return missing


def require_onnx(*, load: bool = True) -> None:
    """The onnx extra importable, or one error line naming what is missing and the extra that installs it."""
    missing = missing_onnx(load=load)
    if missing:
        raise UsageError(f"--format onnx needs {', '.join(missing)} (the onnx extra)", hint=f"install it: {ONNX_EXTRA}")


def check_request(
    fmt: str, out: str | Path, *, with_preprocessing: bool, overwrite: bool, layout: str = "auto"
) -> None:
    """Refuse an export that cannot be written, before the ticket is read."""
    check_format(fmt, out, with_preprocessing=with_preprocessing, layout=layout)
    check_destination(out, overwrite=overwrite)


def check_format(
    fmt: str, out: str | Path, *, with_preprocessing: bool, load: bool = True, layout: str = "auto"
) -> None:
    """Refuse a format, --layout, --with-preprocessing or output name that do not go together, or onnx without its
    extra (`load`: as for require_onnx)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; choose from {', '.join(FORMATS)}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise UsageError(f"unknown layout {str(layout)[:20]!r}; choose from {', '.join(LAYOUTS)}")
    if layout != "auto" and fmt != "sparse":
        raise UsageError(f"--layout applies to --format sparse only, not {fmt}")
    if with_preprocessing and fmt != "onnx":
        raise UsageError(
            f"--with-preprocessing applies to --format onnx only, not {fmt}: the other formats hold weights, not a "
            "graph, and record the normalisation in their metadata"
        )
    out = Path(out)
    if (fmt == "onnx") != (out.suffix == ".onnx"):
        raise UsageError(
            f"--format {fmt} cannot be written to {str(out)[:200]}: "
            + ("an ONNX model is a .onnx file" if fmt == "onnx" else "a .onnx file holds an ONNX model"),
            hint="--format onnx --out NAME.onnx; the state-dict formats: .safetensors or .pt",
        )
    if fmt == "sparse" and out.suffix != ".safetensors":
        raise UsageError(
            f"--format sparse is written as safetensors, not {str(out)[:200]}", hint="--out NAME.safetensors"
        )
    if fmt == "onnx":
        require_onnx(load=load)
