"""Peak memory and time of refusing the largest spec of every model family, each in its own child process, next to
a baseline child refused by a plain range check (--sparsity 2) after the same imports: what the budget itself
costs is the difference. Also the reported instances (a 40000x40000 ViT geometry, a 20000-character GPT
context, depths of 10^8 blocks) and a sparse 1 GiB ticket declaring 8.6e9 mask bits.

    python benchmarks/budget_refusals.py            # a table: case, exit code, seconds, peak RSS, the error line
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
N = "999999999"  # the largest number a spec may hold
G = f"@{N}x{N}x{N}-{N}"
LARGEST = {
    "mlp": "mlp:" + "-".join([N] * 99),  # 1000 characters, the spec's limit
    "lenet300": "lenet300" + G,
    "conv2": "conv2" + G,
    "conv4": "conv4" + G,
    "conv6": "conv6" + G,
    "vgg": "vgg:" + "-".join([N] * 90) + G,
    "resnet20": "resnet20" + G,
    "resnet18": "resnet18" + G,
    "wrn": f"wrn:20002-{N}{G}",  # the deepest the parser allows (3 x 3333 blocks)
    "vit": f"vit:p1-d999999996-l10000-h999999996-m{N}{G}",
    "gpt-nano": f"gpt-nano:l10000-d999999998-h999999998-c{N}-m{N}-v{N}",
}
REPORTED = {
    "vit geometry 40000x40000": "vit:p4-d8-l1-h2@1x40000x40000-10",
    "gpt-nano context 20000": "gpt-nano:l1-d2-h1-c20000",
    "vit depth 1e8": "vit:p4-d8-l99999999-h2",
    "wrn depth 1e9": "wrn:999999994-1",
    "gpt-nano depth 1e8": "gpt-nano:l99999999-d2-h1-c8",
}
QUICK = ["--dataset", "digits", "--n-extract", "64", "--n-val", "32", "--epochs", "1", "--quiet"]


def run(args: list[str]) -> tuple[int, float, int, str]:
    """(exit code, seconds, peak RSS in bytes, last stderr line) of `python -m ticketcli ARGS`."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "ticketcli", *args], stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return os.waitstatus_to_exitcode(status), seconds, usage.ru_maxrss * 1024, (lines or [""])[-1]


def sparse_ticket(folder: Path) -> Path:
    """A 1 GiB sparse ticket of a tiny MLP whose one all-zero mask declares 8.6e9 bits."""
    nbytes = (1 << 30) - 8 - 4096
    meta = {
        "format": "ticket",
        "format_version": "1",
        "model": json.dumps({"spec": "mlp:64-16-10", "arch": "mlp", "widths": [64, 16, 10], "bias": False}),
        "init": json.dumps({"scheme": "scaled-kaiming-uniform", "k": 0.5, "gain": "relu", "seed": 0}),
        "shapes": json.dumps({"layers.0.weight": [8 * nbytes]}),
        "weights_sha256": "0" * 64,
        "method": json.dumps({"name": "random"}),
        "data": json.dumps({"dataset": "digits", "n_extract": 64, "n_val": 32, "split_seed": 0}),
        "sparsity": json.dumps({}),
        "metrics": json.dumps({}),
        "created_by": json.dumps({}),
    }
    header = {
        "__metadata__": meta,
        "mask/layers.0.weight": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (4096 - len(text))
    path = folder / "sparse.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(1 << 30)
    return path


def in_process_seconds(spec: str, repeat: int = 200) -> float:
    """Seconds one refusal costs once the package is imported: the spec parsed and weighed (mean of `repeat`)."""
    from ticketcli.errors import UsageError
    from ticketcli.models.budget import Budget, check
    from ticketcli.models.registry import parse_model

    t0 = time.perf_counter()
    for _ in range(repeat):
        try:
            check(parse_model(spec).with_data((1, 8, 8), 10), Budget(train_batch=512))
        except UsageError:
            pass
    return (time.perf_counter() - t0) / repeat


def main() -> None:
    sys.path.insert(0, str(REPO))
    print(f"{'spec (in-process refusal)':34s} {'microseconds':>12s}")
    for name, spec in {**LARGEST, **REPORTED}.items():
        print(f"{name:34s} {in_process_seconds(spec) * 1e6:12.0f}")
    print()
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "t.safetensors")
        cases = {"baseline (--sparsity 2)": ["extract", "--sparsity", "2", "--out", out, *QUICK]}
        for name, spec in {**LARGEST, **REPORTED}.items():
            cases[name] = ["extract", "--model", spec, "--out", out, *QUICK]
        cases["sparse 1 GiB ticket, 8.6e9 bits"] = ["evaluate", str(sparse_ticket(Path(d))), "--device", "cpu"]
        print(f"{'case':34s} {'exit':>4s} {'seconds':>8s} {'peak MiB':>9s}  error line")
        for name, args in cases.items():
            code, seconds, peak, line = run(args)
            print(f"{name:34s} {code:4d} {seconds:8.2f} {peak / 2**20:9.0f}  {line[:110]}")


if __name__ == "__main__":
    main()
