"""Long fuzz run over hostile ticket files (tests/fuzz/harness.py): thousands of malformed files through every
reader; reports how many ended in a clean exit 2 (must be all), the slowest case and the peak memory.

    python benchmarks/fuzz_long.py                       # 3000 malformed cases per reader + 1000 byte flips
    python benchmarks/fuzz_long.py --examples 500 --json fuzz.json

Memory: the Python-level peak of any single ticket.load (tracemalloc) and the process's peak RSS
(resource.getrusage, which includes torch and the interpreter: the reader's share is the growth over the RSS
measured before the first case).
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fuzz")]  # this checkout's ticketcli, then the harness

from harness import READERS, byte_flips, clean_rejection, malformed, place, read, write_seed_ticket  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def fuzz_reader(reader: str, seed: bytes, path: Path, examples: int, opts: dict) -> dict:
    """`examples` malformed files through one reader; counts, slowest case and Python peak allocation."""
    stats = {
        "tried": 0,
        "clean_exit_2": 0,
        "slowest_s": 0.0,
        "slowest_family": None,
        "peak_py_bytes": 0,
        "families": collections.Counter(),
        "failures": [],
    }

    @settings(max_examples=examples, **opts)
    @given(case=malformed(seed))
    def run(case):
        family, payload = case
        o = read(reader, place(payload, path), trace_memory=True)
        stats["tried"] += 1
        stats["families"][family] += 1
        if clean_rejection(o):
            stats["clean_exit_2"] += 1
        elif len(stats["failures"]) < 20:
            stats["failures"].append({"family": family, "exit": o.exit_code, "message": o.message[:300]})
        if o.seconds > stats["slowest_s"]:
            stats["slowest_s"], stats["slowest_family"] = o.seconds, family
        stats["peak_py_bytes"] = max(stats["peak_py_bytes"], o.peak_bytes)

    t0 = time.perf_counter()
    run()
    stats["wall_s"] = time.perf_counter() - t0
    stats["families"] = dict(stats["families"])
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=3000, help="malformed cases per reader")
    ap.add_argument("--flips", type=int, default=1000, help="byte-flip cases (may stay valid) through inspect")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="fuzz-"))
    seed = write_seed_ticket(work / "seed.safetensors")
    path = work / "case.safetensors"
    rss_before = rss_mib()
    results: dict = {"seed_bytes": len(seed), "rss_before_mib": rss_before, "readers": {}}
    opts = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))

    for reader in READERS:
        stats = results["readers"][reader] = fuzz_reader(reader, seed, path, args.examples, opts)
        print(
            f"{reader:9s} tried {stats['tried']:6d}  clean exit 2 {stats['clean_exit_2']:6d}  "
            f"slowest {stats['slowest_s'] * 1000:7.1f} ms ({stats['slowest_family']})  "
            f"peak python {stats['peak_py_bytes'] / 1024:7.1f} KiB  wall {stats['wall_s']:.0f} s",
            flush=True,
        )

    flips = collections.Counter()

    @settings(max_examples=args.flips, **opts)
    @given(payload=byte_flips(seed))
    def flip(payload):
        o = read("inspect", place(payload, path))
        flips["valid" if o.exit_code == 0 else "clean exit 2" if clean_rejection(o) else "OTHER"] += 1

    flip()
    results["byte_flips"] = dict(flips)
    results["rss_peak_mib"] = rss_mib()
    total = sum(r["tried"] for r in results["readers"].values())
    clean = sum(r["clean_exit_2"] for r in results["readers"].values())
    print(
        f"total malformed cases {total}, clean exit 2 {clean} ({'all' if clean == total else 'NOT ALL'}); "
        f"byte flips through inspect: {dict(flips)}"
    )
    print(
        f"slowest case {max(r['slowest_s'] for r in results['readers'].values()) * 1000:.1f} ms; "
        f"peak RSS {results['rss_peak_mib']:.0f} MiB (before the first case {rss_before:.0f} MiB); "
        f"peak Python allocation during one case "
        f"{max(r['peak_py_bytes'] for r in results['readers'].values()) / 1024:.1f} KiB"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    sys.exit(0 if clean == total and "OTHER" not in flips else 1)


if __name__ == "__main__":
    main()
