"""Peak memory and wall time of `ticket inspect` on big tickets: a 32 MiB sparse one and one with 100k masks.

    python benchmarks/inspect_memory.py                      # this checkout's ticketcli
    python benchmarks/inspect_memory.py --repo /path/to/other/checkout   # e.g. an older version, for before/after

Both tickets are written here by hand (safetensors layout, format v1 metadata with masks_sha256), not by
ticketcli, so that any version can read them:

  sparse     mlp:784-16384-16384-10, every mask a random 1% of its bits (~281M weights, ~35 MB of packed masks)
  many       100,000 masks of 8 bits each (1 byte per mask; the header holds the cost)

Each `python -m ticketcli inspect [--json] FILE` runs in a fresh child (the table form only for the many-masks
ticket, where rendering the table is most of the work); the peak is the child's maximum resident set
(wait4's ru_maxrss), the baseline is the same for `python -m ticketcli --version` (interpreter + torch + imports).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CHUNK = 1 << 22  # bits generated at a time while writing the sparse ticket


def metadata(spec: str, shapes: dict[str, list[int]], digest: str) -> dict[str, str]:
    """Format v1 metadata a reader accepts (inspect checks no fingerprint, so weights_sha256 is a placeholder)."""
    return {
        "format": "ticket",
        "format_version": "1",
        "model": json.dumps({"spec": spec, "arch": "mlp", "bias": False}),
        "init": json.dumps({"scheme": "scaled-kaiming-uniform", "k": 0.5, "gain": "relu", "seed": 0}),
        "shapes": json.dumps(shapes),
        "weights_sha256": "0" * 64,
        "method": json.dumps({"name": "random", "sparsity": 0.99}),
        "data": json.dumps(
            {"dataset": "fashion-mnist", "n_extract": 5000, "n_val": 5000, "n_test": 10000, "split_seed": 0}
        ),
        "sparsity": json.dumps({"requested": 0.99, "achieved": 0.99}),
        "metrics": json.dumps(
            {
                "test": {"accuracy": 0.1, "loss": 2.3, "correct": 1000, "n": 10000},
                "val": {"accuracy": 0.1, "loss": 2.3, "correct": 500, "n": 5000},
                "device": "cpu",
            }
        ),
        "created_by": json.dumps({"ticketcli": "benchmark", "torch": "-"}),
        "masks_sha256": digest,
    }


def write(path: Path, spec: str, shapes: dict[str, list[int]], chunks) -> int:
    """Header first (sizes are known up front), then each mask's packed bytes from chunks(name, n) in key order."""
    names = sorted(shapes)  # safetensors' own order for tensors of one dtype, and the digest's order
    sizes = {n: (int(np.prod(shapes[n])) + 7) // 8 for n in names}
    digest = hashlib.sha256()
    body = path.with_suffix(".body")
    with open(body, "wb") as f:
        for n in names:
            digest.update(f"mask/{n}".encode() + b"\0")
            for part in chunks(n, int(np.prod(shapes[n]))):
                digest.update(part)
                f.write(part)
    header, offset = {"__metadata__": metadata(spec, shapes, digest.hexdigest())}, 0
    for n in names:
        header[f"mask/{n}"] = {"dtype": "U8", "shape": [sizes[n]], "data_offsets": [offset, offset + sizes[n]]}
        offset += sizes[n]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out, open(body, "rb") as f:
        out.write(struct.pack("<Q", len(text)) + text)
        while block := f.read(1 << 24):
            out.write(block)
    body.unlink()
    return path.stat().st_size


def sparse_chunks(rng: np.random.Generator):
    def chunks(name: str, n: int):
        for start in range(0, n, CHUNK):  # CHUNK is a multiple of 8: only the last chunk has padding bits
            yield np.packbits(rng.random(min(CHUNK, n - start)) < 0.01, bitorder="big").tobytes()

    return chunks


def many_chunks(rng: np.random.Generator):
    bits = rng.integers(0, 256, size=1 << 20, dtype=np.uint8)
    counter = iter(range(1 << 30))

    def chunks(name: str, n: int):
        yield bits[next(counter) % bits.size].tobytes()  # one byte = all 8 bits of the mask

    return chunks


def child(repo: Path, *args: str) -> tuple[int, float, int, str]:
    """(exit code, seconds, max RSS bytes, last stderr line) of `python -m ticketcli ARGS` run from `repo`."""
    env = {**os.environ, "PYTHONPATH": str(repo)}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            [sys.executable, "-m", "ticketcli", *args], stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=repo
        )
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss * 1024, lines[-1] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose ticketcli runs (default: this one)")
    ap.add_argument("--many", type=int, default=100_000, help="masks in the many-masks ticket")
    ap.add_argument("--dir", type=Path, default=None, help="keep the tickets here (default: a temp folder)")
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="inspect-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    sparse, many = folder / "sparse.safetensors", folder / "many.safetensors"
    if not sparse.exists():
        shapes = {"layers.0.weight": [16384, 784], "layers.1.weight": [16384, 16384], "layers.2.weight": [10, 16384]}
        write(sparse, "mlp:784-16384-16384-10", shapes, sparse_chunks(rng))
    if not many.exists():
        shapes = {f"layers.{i}.weight": [8] for i in range(args.many)}
        write(many, "mlp:8-8", shapes, many_chunks(rng))
    code, seconds, base, _ = child(args.repo, "--version")
    print(f"ticketcli from {args.repo}")
    print(f"baseline (python -m ticketcli --version): max RSS {base / 2**20:.0f} MiB, {seconds:.2f} s")
    for path, table in ((sparse, False), (many, False), (many, True)):
        code, seconds, peak, last = child(args.repo, "inspect", *([] if table else ["--json"]), str(path))
        print(
            f"inspect{'' if table else ' --json'} {path.name} ({path.stat().st_size / 2**20:.1f} MiB): exit {code}, "
            f"{seconds:.2f} s, max RSS {peak / 2**20:.0f} MiB (+{(peak - base) / 2**20:.0f} MiB over the baseline)"
            + (f"  [{last[:160]}]" if code else "")
        )


if __name__ == "__main__":
    main()
