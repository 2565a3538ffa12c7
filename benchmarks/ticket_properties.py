"""Long run of the ticket-file properties (tests/fuzz/test_ticket_properties.py's strategies, tests/fuzz/harness.py):
N valid tickets of random shapes and metadata round-tripped, N random mutations of a valid ticket through
ticket.load (Python peak allocation by tracemalloc) and N/10 through `ticket inspect`; reports failures, outcomes,
the slowest case and the peak memory.

    python benchmarks/ticket_properties.py --examples 2000
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

import torch  # noqa: E402
from harness import clean_rejection, mutations, place, read, valid_tickets, write_seed_ticket  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from ticketcli.ticketfile import ticket as ticket_io  # noqa: E402


def main() -> None:
    """Run both properties for --examples cases each and print one JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0, help="Hypothesis seed (the tests derandomize instead)")
    args = ap.parse_args()
    opts = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
    tmp = Path(tempfile.mkdtemp(prefix="ticket-props-"))
    raw = write_seed_ticket(tmp / "seed.safetensors")
    seed = ticket_io.load(tmp / "seed.safetensors")
    stats: dict = {"round_trips": 0, "round_trip_failures": [], "outcomes": collections.Counter(), "failures": []}
    slowest, peak = [0.0, ""], 0
    t0 = time.perf_counter()

    @settings(max_examples=args.examples, **opts)
    @given(tk=valid_tickets(seed))
    def round_trip(tk):
        path = tmp / "t.safetensors"
        ticket_io.save(tk, path, overwrite=True)
        back = ticket_io.load(path)
        stats["round_trips"] += 1
        same = back.metadata() == tk.metadata() and all(torch.equal(back.masks[n], m) for n, m in tk.masks.items())
        if not same and len(stats["round_trip_failures"]) < 20:
            stats["round_trip_failures"].append(tk.shapes)

    def mutate(reader: str, examples: int):
        @settings(max_examples=examples, **opts)
        @given(case=mutations(raw))
        def run(case):
            nonlocal peak
            what, payload = case
            o = read(reader, place(payload, tmp / "m.safetensors"), trace_memory=reader == "load")
            stats["outcomes"][f"{reader} exit {o.exit_code}"] += 1
            if not (o.exit_code == 0 or clean_rejection(o)) and len(stats["failures"]) < 20:
                stats["failures"].append({"reader": reader, "what": what, "exit": o.exit_code, "msg": o.message[:300]})
            if o.seconds > slowest[0]:
                slowest[:] = [o.seconds, f"{reader}: {what}"]
            peak = max(peak, o.peak_bytes)

        hypothesis_seed(args.seed)(run)()

    hypothesis_seed(args.seed)(round_trip)()
    mutate("load", args.examples)
    mutate("inspect", max(1, args.examples // 10))
    print(
        json.dumps(
            {
                **stats,
                "outcomes": dict(stats["outcomes"]),
                "slowest_case_s": round(slowest[0], 3),
                "slowest_case": slowest[1],
                "peak_py_bytes_load": peak,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "seconds": round(time.perf_counter() - t0, 1),
            },
            indent=2,
        )
    )
    sys.exit(1 if stats["failures"] or stats["round_trip_failures"] else 0)


if __name__ == "__main__":
    main()
