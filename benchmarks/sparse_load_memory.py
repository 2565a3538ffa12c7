"""Peak memory of loading a ticket straight into the sparse runtime form (`tc.load_sparse(ticket)`), which
regenerates the network from its seed one layer at a time, against the target: at most 10% above the largest
layer's dense float32 size plus the sparse form's own size.

    nice -n 10 python benchmarks/sparse_load_memory.py                 # makes the ticket first (about 1e8 weights)
    python benchmarks/sparse_load_memory.py --ticket big.safetensors   # a ticket already made
    python benchmarks/sparse_load_memory.py --model mlp:64-1024-1024-10 --sparsity 0.9   # a smaller try

The ticket is a random-method ticket (fast to make) of `--model` on digits at `--sparsity`. Each load runs in a
fresh child with one thread; its peak is the child's maximum resident set (getrusage's ru_maxrss), less the
baseline of the same child that imported torch and ticketcli and loaded nothing. Loads are made without and with
the per-layer timing (`measure=False` / `measure=True`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.10  # peak at most this times (largest layer dense + sparse form)

CHILD = r"""
import json, resource, sys, torch
torch.set_num_threads(1)
from ticketcli.export.sparse.load import load_sparse
out = {}
if sys.argv[1] != "baseline":
    snet = load_sparse(sys.argv[1], measure=sys.argv[2] == "measure")
    out["sparse_bytes"] = snet.nbytes()
    out["layer_by_layer"] = snet.layer_by_layer
    out["sparse_layers"] = len(snet.sparse_layers)
    out["layers"] = len(snet.layers)
out["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def child(*args: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def make_ticket(model: str, sparsity: float, out: Path) -> None:
    cmd = [sys.executable, "-m", "ticketcli", "extract", "--model", model, "--dataset", "digits", "--method"]
    cmd += ["random", "--sparsity", str(sparsity), "--threads", "1", "--quiet", "--out", str(out)]
    subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(REPO)), check=True, stdout=subprocess.DEVNULL)


def largest_layer_bytes(ticket: Path) -> tuple[int, int]:
    """(largest masked parameter's dense float32 bytes, total weights), from the ticket's shapes alone."""
    sys.path.insert(0, str(REPO))
    from ticketcli.ticketfile.ticket import scan

    counts = scan(ticket).counts
    return max(total for _, total in counts.values()) * 4, sum(total for _, total in counts.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticket", type=Path, help="a ticket already made (else one is made in a temporary folder)")
    ap.add_argument("--model", default="mlp:64-8192-8192-4096-10", help="model of the ticket made")
    ap.add_argument("--sparsity", type=float, default=0.95, help="sparsity of the ticket made")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ticket = args.ticket
        if ticket is None:
            ticket = Path(tmp) / "big.safetensors"
            make_ticket(args.model, args.sparsity, ticket)
        largest, weights = largest_layer_bytes(ticket)
        base = int(child("baseline")["peak"])  # type: ignore[call-overload]
        mib = 1 << 20
        print(f"ticket: {ticket.name}, {weights:,} weights, {ticket.stat().st_size / mib:.1f} MiB on disk")
        print(f"baseline (python + torch + ticketcli imported): {base / mib:.1f} MiB")
        print(f"largest layer, dense float32: {largest / mib:.1f} MiB")
        for mode in ("no-measure", "measure"):
            r = child(str(ticket), mode)
            peak = int(r["peak"]) - base  # type: ignore[call-overload]
            sparse = int(r["sparse_bytes"])  # type: ignore[call-overload]
            bound = largest + sparse
            verdict = "meets" if peak <= TARGET * bound else "MISSES"
            print(
                f"{mode:>10}: peak above baseline {peak / mib:.1f} MiB; sparse form {sparse / mib:.1f} MiB; "
                f"largest + sparse {bound / mib:.1f} MiB; ratio {peak / bound:.3f} ({verdict} the {TARGET:.2f} "
                f"target); layer by layer: {r['layer_by_layer']}; {r['sparse_layers']}/{r['layers']} layers sparse"
            )


if __name__ == "__main__":
    main()
