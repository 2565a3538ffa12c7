"""`ticket bench`'s spec without importing torch: the batch sizes, repeats and forms it measures, its defaults
written once as BenchSpec's fields, and `bench_spec`, which reads them from the command line's text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ticketcli.errors import UsageError

FORMS = ("dense", "sparse", "onnx", "bsr", "2:4")  # every form, in the order measured and shown; dense first
MAX_BATCH = 1 << 16
MAX_REPEATS = 10_000
CLOCKS = ("wall", "thread")  # wall-clock latency; or the timing thread's CPU time (one torch thread, on the CPU)


@dataclass(frozen=True)
class BenchSpec:
    """What `ticket bench` measures: the forms (dense always among them: every speed-up is over dense), at each
    batch size, each timed `repeats` times interleaved with the others."""

    batches: tuple[int, ...] = (1, 64, 512)
    repeats: int = 15
    forms: tuple[str, ...] = FORMS
    clock: str = "wall"  # one of CLOCKS


def bench_spec(
    batch: str | Sequence[int] | None = None,
    repeats: int | None = None,
    forms: str | Sequence[str] | None = None,
    clock: str | None = None,
) -> BenchSpec:
    """A BenchSpec from --batch "1,64,512" (or the API's sequence of sizes), --repeats and --forms "sparse,onnx" (or
    a sequence of names); None: the default. A bad value is one usage error."""
    d = BenchSpec()
    batches = d.batches
    if batch is not None:
        try:
            batches = tuple(int(b) for b in (batch.split(",") if isinstance(batch, str) else batch))
        except (TypeError, ValueError):
            shown = str(batch)[:40]
            raise UsageError(
                f"--batch takes comma-separated batch sizes, not {shown!r}", hint="--batch 1,64,512"
            ) from None
    bad = [b for b in batches if not 1 <= b <= MAX_BATCH]
    if bad or not batches or len(set(batches)) != len(batches):
        raise UsageError(
            f"--batch takes distinct batch sizes from 1 to {MAX_BATCH}, not {','.join(map(str, batches))}",
            hint="--batch 1,64,512",
        )
    n = d.repeats if repeats is None else repeats
    if isinstance(n, bool) or not isinstance(n, int) or not 3 <= n <= MAX_REPEATS:
        raise UsageError(f"--repeats must be an integer from 3 to {MAX_REPEATS}, not {n}")
    listed = d.forms if forms is None else forms.split(",") if isinstance(forms, str) else forms
    if not isinstance(listed, (list, tuple)):  # the Python API takes any object: a name list or nothing
        raise UsageError(
            f"--forms takes comma-separated form names, not {str(forms)[:40]!r}", hint="--forms sparse,onnx"
        )
    names = tuple(str(f).strip() for f in listed if str(f).strip())
    unknown = [f for f in names if f not in FORMS]
    if unknown or not names:
        raise UsageError(f"unknown form {(unknown or [''])[0]!r} in --forms; choose from {', '.join(FORMS)}")
    timer = d.clock if clock is None else clock
    if timer not in CLOCKS:
        raise UsageError(f"--clock must be one of {', '.join(CLOCKS)}, not {str(timer)[:40]!r}")
    return BenchSpec(batches, n, ("dense", *(f for f in FORMS if f in names and f != "dense")), timer)
