"""Resume == uninterrupted, through the real command line and a real SIGTERM, for every resumable method.

    python benchmarks/resume_check.py                     # digits (400/200), 40 epochs, checkpoint every 5
    python benchmarks/resume_check.py --methods augmented --epochs 100

Per method: (1) `ticket extract` uninterrupted; (2) the same command with --checkpoint-every, killed with
SIGTERM once its checkpoint has passed --stop-after epochs (at an arbitrary moment inside an epoch, so work
after the checkpoint is lost and redone); (3) the same command with --resume. The masks of (1) and (3) are
compared byte for byte, and the stored test/validation accuracy and loss.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from ticketcli.settings.readers import method_reads  # noqa: E402
from ticketcli.ticketfile import ticket as ticket_io  # noqa: E402


def extract(args: list[str], **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "ticketcli", "extract", *args], env=env, stdout=subprocess.DEVNULL, **kw
    )


def saved_epoch(ckpt: Path) -> tuple[int, int]:
    try:
        state = torch.load(ckpt, map_location="cpu", weights_only=True)["state"]
        return state.get("round", 1), state["epoch"]
    except Exception:
        return 0, 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="edge-popup,augmented,iterated,random")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--stop-after", type=int, default=12, help="send SIGTERM once a checkpoint past this exists")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="resume-"))
    common = [
        "--dataset",
        "digits",
        "--model",
        "mlp:64-64-64-10",
        "--n-extract",
        "400",
        "--n-val",
        "200",
        "--batch-size",
        "64",
        "--device",
        "cpu",
        "--quiet",
    ]
    print(
        f"{'method':11s} {'stopped at':>16s} {'exit':>4s} {'resumed':>7s} {'masks identical':>16s} "
        f"{'metrics identical':>18s}  test acc"
    )
    for method in a.methods.split(","):
        extra = ["--method", method] + (["--sparsity", "0.9", "--max-rounds", "3"] if method == "iterated" else [])
        extra += ["--epochs", str(a.epochs)] if method_reads(method, "epochs") else []  # random: refused
        ref, out = work / f"{method}-ref.safetensors", work / f"{method}.safetensors"
        assert extract([*common, *extra, "--out", str(ref)]).wait() == 0
        ckpt = Path(str(out) + ".ckpt")
        err = work / f"{method}-stderr.txt"
        with err.open("w") as f:
            p = extract([*common, *extra, "--out", str(out), "--checkpoint-every", str(a.every)], stderr=f)
            # iterated: wait for a checkpoint in round 2 (its epochs restart every round)
            target = (2, a.stop_after) if method == "iterated" else (1, a.stop_after)
            while p.poll() is None and saved_epoch(ckpt) < target:
                time.sleep(0.05)
            time.sleep(0.3)  # land somewhere inside a later epoch
            p.send_signal(signal.SIGTERM)
            code = p.wait()
        stopped = err.read_text().strip().splitlines()[-1] if err.read_text().strip() else ""
        where = saved_epoch(ckpt)
        # a run that finished before the signal (random has no epochs) has nothing to resume
        resumed = (
            extract([*common, *extra, "--out", str(out), "--checkpoint-every", str(a.every), "--resume"]).wait()
            if code != 0
            else 0
        )
        same_masks = out.exists() and {k: v.numpy().tobytes() for k, v in load_file(str(out)).items()} == {
            k: v.numpy().tobytes() for k, v in load_file(str(ref)).items()
        }
        mr, mo = ticket_io.load(ref).metrics, ticket_io.load(out).metrics if out.exists() else {}
        same_metrics = all(mr[s] == mo.get(s) for s in ("test", "val"))
        print(
            f"{method:11s} {'round {} epoch {}'.format(*where) if code != 0 else 'finished':>16s} {code:4d} "
            f"{resumed:7d} {str(same_masks):>16s} {str(same_metrics):>18s}  {mr['test']['accuracy']:.4f}"
        )
        print(f"    {stopped}")
        print(f"    checkpoint left after the resumed run: {ckpt.exists()}")


if __name__ == "__main__":
    main()
