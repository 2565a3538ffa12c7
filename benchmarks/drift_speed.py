"""What a logged drift measurement costs next to the training it measures, per model.

    PYTHONPATH=. python benchmarks/drift_speed.py [--models mlp,resnet20] [--probe 1024] [--batch 512] [--threads 1]

For each model: the time of one training step (forward, backward, Adam) on a batch the size of the probe, the time
of one measurement of every drift statistic on the probe (as `ticket drift` logs it), their ratio, and the peak
RSS of a short drift run (training at --batch, a measurement after every step) against plain training of the same
model with the same forward pass at --batch and at the probe size. Times are medians of interleaved repeats within
one process (shared machines are noisy); each peak RSS (VmHWM) comes from its own child process, so that the runs
do not contaminate each other. Inputs are Gaussian (the text model's: a generated text). Not run by the test suite.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

MODELS = {
    "mlp": "mlp:784-256-256-256-10",
    "mlp+res": "mlp:784-256-256-256-10+res",
    "mlp+norm": "mlp:784-256-256-256-10+norm=layer",
    "mlp+bn": "mlp:784-256-256-256-10+norm=batch",
    "resnet20": "resnet20",
    "vit": "vit:p4-d64-l4-h4",
    "gpt-nano": "gpt-nano:l2-d64-h4-c64",
}


def write_text(folder: Path, n: int = 40000) -> str:
    """A generated text for the character model (no corpus needed)."""
    g = torch.Generator().manual_seed(0)
    words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "Dogs ", "bark!\n", "quietly ", "zebra "]
    path = folder / "text.txt"
    path.write_text("".join(words[int(i)] for i in torch.randint(len(words), (n,), generator=g)), encoding="utf-8")
    return str(path)


def setup(model: str, probe: int, batch: int, steps: int, text: str):
    """(spec, net, inputs, trainer, forward, loss) the way drift.drift_one sets them up for seed 0."""
    from ticketcli.data.text import load_corpus
    from ticketcli.drift import run as drift
    from ticketcli.drift.activations import ACTIVATIONS, LOSSES
    from ticketcli.drift.options import build_drift_spec
    from ticketcli.drift.sites import drift_forward
    from ticketcli.models.gpt import gpt_numbers, with_vocab
    from ticketcli.runs import build as runs_build
    from ticketcli.settings.resolve import data_location
    from ticketcli.specs.run import ModelPolicy
    from ticketcli.train import WeightTrainer

    is_text = model.startswith("gpt-nano")
    s = {"model": model, "probe_size": probe, "batch_size": batch, "steps": steps, "log_every": 1}
    s.update({"text": text} if is_text else {"inputs": "gaussian"})
    spec = build_drift_spec(s, data_location(None, False))
    corpus = None
    if is_text:
        assert spec.text is not None
        corpus = load_corpus(spec.text)
        spec = replace(spec, model=with_vocab(spec.model, len(corpus.vocab)))
        gpt_numbers(spec.model)
    net, _ = runs_build.build_net(spec.model, replace(spec.init, seed=0), None, runs_build.policy_budget(ModelPolicy()))
    inputs = drift._inputs(spec, corpus, spec.model, spec.data, 0, torch.device("cpu"))
    act = ACTIVATIONS.get(spec.activation)
    forward = drift_forward(net, lambda h: act.fn(h, spec.clip))
    return spec, net, inputs, WeightTrainer(net, None, spec.optim), forward, LOSSES.get(spec.loss)


def time_one(model: str, probe: int, repeats: int, text: str, clock=time.perf_counter) -> dict:
    """Median ms of a training step on a probe-sized batch and of a measurement on the probe."""
    from ticketcli.drift import run as drift
    from ticketcli.drift.activations import ACTIVATIONS
    from ticketcli.drift.sites import measure_traced
    from ticketcli.models import batchnorm

    spec, net, inputs, trainer, forward, loss = setup(model, probe, probe, 1, text)
    act = ACTIVATIONS.get(spec.activation)
    x, y = inputs.probe
    # trees before streaming measured the whole probe in one pass (no chunk argument)
    chunk = {"chunk": drift.probe_chunk(net, None, spec.batch_size)} if hasattr(drift, "probe_chunk") else {}

    def measure() -> None:
        measure_traced(
            trainer.effective(),
            None,
            x,
            y,
            forward=forward,
            exact_zeros=act.exact_zeros,
            zero_threshold=spec.zero_threshold,
            loss_fn=loss,
            **chunk,
        )

    step_s, measure_s = [], []
    with batchnorm.statistics(net.batchnorms, net.bn_statistics, "batch"):
        trainer.step(x, y, loss, forward=forward)  # warm-up
        for _ in range(repeats):
            t = clock()
            trainer.step(x, y, loss, forward=forward)
            step_s.append(clock() - t)
            t = clock()
            measure()
            measure_s.append(clock() - t)
    step, meas = statistics.median(step_s) * 1e3, statistics.median(measure_s) * 1e3
    return {"step_ms": step, "measure_ms": meas, "ratio": meas / step, "chunk": chunk.get("chunk")}


def child(kind: str, model: str, probe: int, batch: int, steps: int, text: str) -> None:
    """One run in this (child) process; prints its peak RSS in MiB. drift: run_drift with a measurement after every
    step; train: the same number of plain training steps at --batch; train-probe: at the probe size."""
    from ticketcli.drift import run as drift
    from ticketcli.models import batchnorm

    if kind == "drift":
        spec = setup(model, probe, batch, steps, text)[0]
        if not model.startswith("gpt-nano"):
            spec = replace(spec, inputs="gaussian")
        drift.run_drift(spec)
    else:
        size = batch if kind == "train" else probe
        spec, net, inputs, trainer, forward, loss = setup(model, probe, size, steps, text)
        with batchnorm.statistics(net.batchnorms, net.bn_statistics, "batch"):
            for _ in range(steps):
                trainer.step(*inputs.next(), loss, forward=forward)
    print(json.dumps({"peak_mib": peak_mib()}))


def peak_mib() -> float:
    """This process's peak resident set (VmHWM). Not ru_maxrss: Linux carries the parent's peak into a child's
    ru_maxrss across the vfork and exec that start it, so every child would report at least the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak(kind: str, model: str, a: argparse.Namespace, text: str) -> float:
    args = [sys.executable, __file__, "--child", kind, "--models", model, "--probe", str(a.probe)]
    args += ["--batch", str(a.batch), "--steps", str(a.steps), "--threads", str(a.threads), "--text", text]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    ap.add_argument("--probe", type=int, default=1024, help="probe size (drift's default: 1024)")
    ap.add_argument("--batch", type=int, default=512, help="training batch size (drift's default: 512)")
    ap.add_argument("--steps", type=int, default=3, help="training steps of the memory runs")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats (median)")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time with the process's CPU time instead of the wall clock (steadier on a loaded machine; with one "
        "thread it is the compute itself)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--no-memory", action="store_true", help="times only")
    ap.add_argument("--child", choices=("drift", "train", "train-probe"), help=argparse.SUPPRESS)
    ap.add_argument("--text", help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    names = a.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        text = a.text or write_text(Path(tmp))
        if a.child:
            child(a.child, MODELS.get(names[0], names[0]), a.probe, a.batch, a.steps, text)
            return
        clock = time.process_time if a.cpu_time else time.perf_counter
        what = "CPU time" if a.cpu_time else "wall clock"
        print(f"probe {a.probe}, training batch {a.batch}, {a.threads} thread(s), medians of {a.repeats} ({what})")
        print(
            "| model | chunk | train step ms (batch = probe) | measurement ms | ratio | peak MiB drift "
            "| plain @batch | plain @probe | drift / plain @batch |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name in names:
            t = time_one(MODELS.get(name, name), a.probe, a.repeats, text, clock)
            row = (
                f"| {name} | {t['chunk'] or 'whole'} | {t['step_ms']:.0f} | {t['measure_ms']:.0f} | {t['ratio']:.2f} |"
            )
            if a.no_memory:
                print(row + " - | - | - | - |", flush=True)
                continue
            d, p, q = (peak(k, name, a, text) for k in ("drift", "train", "train-probe"))
            print(row + f" {d:.0f} | {p:.0f} | {q:.0f} | {d / p:.2f} |", flush=True)


if __name__ == "__main__":
    main()
