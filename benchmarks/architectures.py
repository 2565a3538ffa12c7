"""Strong tickets on ResNet-20 and a tiny ViT (FashionMNIST): edge-popup at 90%, augmented at requested 90%, and
edge-popup at augmented's achieved sparsity (the matched comparison), several seeds; score-training time per
epoch against dense weight training of the same network on the same batches; and, for BatchNorm networks, test
accuracy with recalibrated running statistics (what tickets store) against edge-popup's trajectory statistics.

    PYTHONPATH=. python benchmarks/architectures.py --epochs 3 --seeds 0,1,2 --json arch.json
    PYTHONPATH=. python benchmarks/architectures.py --device cuda --epochs 100          # on a GPU, unchanged

Every run is what `ticket extract --model M --method X --sparsity S --seed s --epochs E` does (the paper's other
defaults: Adam 1e-2, batch 512, 5000/5000 split, full test set; the same generators, so the same masks), written
out here so that one training run yields both BatchNorm evaluations: the network trains in edge-popup's
"trajectory" mode (batch statistics, running averages updated with momentum 0.1 along the way; the forward
values are those of the default mode), is evaluated on those averages, then recalibrated (batchnorm.py) and
evaluated again. `--check-ticket` also runs one real `extract_ticket` and checks that its stored accuracy is the
recalibrated one reported here. Timing: one epoch each of dense weight training (Adam 1e-3, all weights),
edge-popup and augmented score training on the same network and the same batches, interleaved
`--timing-repeats` times, minimum over the repeats (wall and CPU time, device synchronised).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ticketcli.data.datasets import load_splits
from ticketcli.methods import METHODS
from ticketcli.runs import build as runs_build
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import inputs as runs_inputs
from ticketcli.seeding import generator
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.train import WeightOptim, WeightTrainer, evaluate, train_weights


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class EpochClock:
    """Wall time of every epoch, from the progress callback (the device synchronised at each tick)."""

    def __init__(self, device: torch.device, label: str):
        self.device, self.label, self.times = device, label, []
        self.last = time.perf_counter()

    def __call__(self, record: dict) -> None:
        sync(self.device)
        now = time.perf_counter()
        self.times.append(now - self.last)
        self.last = now
        print(
            f"    {self.label} epoch {record['epoch']}: loss {record['loss']:.3f} train acc "
            f"{record['accuracy']:.3f} ({self.times[-1]:.1f} s)",
            flush=True,
        )

    def per_epoch_ms(self) -> float:
        return 1000 * statistics.median(self.times)


def spec_for(model: str, method: str, sparsity: float, seed: int, args) -> object:
    return build_extract_spec(
        merge_settings(
            {
                "model": model,
                "method": method,
                "sparsity": sparsity,
                "seed": seed,
                "epochs": args.epochs,
                "device": args.device,
            },
            None,
        )
    )


def extract(model: str, method: str, sparsity: float, seed: int, args) -> dict:
    """One extraction (as extract_ticket, minus the file), both BatchNorm evaluations, and the epoch times."""
    spec = spec_for(model, method, sparsity, seed, args)
    device = runs_inputs.resolve_device(spec.device)
    net, weights = runs_build.build_net(spec.model, spec.init, None)
    splits = load_splits(spec.data)
    runs_inputs.check_input_shape(spec.model, splits, net)
    net.to(device)
    splits = splits.to(device)
    net.bn_statistics = "trajectory"  # same forward values; the running averages follow training as edge-popup's
    clock = EpochClock(device, f"{method} seed {seed}")
    masks = (
        METHODS.get(method)
        .load()()
        .extract(net, splits, spec.method, device=device, generator=generator(seed, "method"), progress=clock)
        .masks
    )
    masks = {n: masks[n].to(device) for n in net.names}
    net.load_weights(weights)
    out = {
        "model": spec.model.to_string(),
        "method": method,
        "seed": seed,
        "requested": sparsity,
        "achieved": 1.0 - sum(int(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values()),
        "ms_per_epoch": clock.per_epoch_ms(),
        "device": str(device),
    }
    if net.batchnorms:
        out["test_trajectory"] = evaluate(net, masks, splits.x_test, splits.y_test)["accuracy"]
    net.bn_statistics, net.calibration = "recalibrate", splits.x_extract
    out["test"] = evaluate(net, masks, splits.x_test, splits.y_test)["accuracy"]
    print(
        f"  {out['model']} {method} seed {seed}: test {100 * out['test']:.2f}% at {100 * out['achieved']:.2f}% "
        + (f"(trajectory statistics {100 * out['test_trajectory']:.2f}%) " if net.batchnorms else "")
        + f"{out['ms_per_epoch']:.0f} ms/epoch",
        flush=True,
    )
    return out


def timed_epochs(model: str, seed: int, args) -> dict[str, dict[str, float]]:
    """ms per epoch of dense weight training, edge-popup and augmented score training on the same network and
    the same batches (one generator state, re-used), interleaved `--timing-repeats` times; the minimum over the
    repeats of the wall time and of the process's CPU time (all threads). Other jobs on a shared machine only ever
    add time, so the minimum is the least disturbed estimate (timeit's rule); CPU time drifts less than wall time
    there, so both are shown (on a GPU, read the wall time)."""
    from dataclasses import replace

    from ticketcli.methods.score_training import ScoreTrainer, init_scores, train_scores
    from ticketcli.methods.scores import Augmented, EdgePopup

    spec = spec_for(model, "edge-popup", args.sparsity, seed, args)
    device = runs_inputs.resolve_device(spec.device)
    net, _ = runs_build.build_net(spec.model, spec.init, None)
    splits = load_splits(spec.data).to(device)
    net.to(device)
    one = replace(spec.method, epochs=1)
    state = generator(seed, "timing").get_state()

    def batches() -> torch.Generator:
        return torch.Generator().set_state(state)  # every trainer sees the same batch order

    def score_epoch(method) -> Callable[[], None]:
        m_spec = replace(one, name=method.name)
        sel = method.selection(net, m_spec)
        trainer = ScoreTrainer(net, sel, m_spec, init_scores(net, sel.parts, generator(seed, "method")))
        return lambda: train_scores(trainer, splits, m_spec, batches(), None)

    dense = WeightTrainer(net, None, WeightOptim())
    epochs = {
        "dense": lambda: train_weights(
            dense, splits.x_extract, splits.y_extract, epochs=1, batch_size=one.batch_size, generator=batches()
        ),
        "edge-popup": score_epoch(EdgePopup()),
        "augmented": score_epoch(Augmented()),
    }
    wall: dict[str, list[float]] = {k: [] for k in epochs}
    cpu: dict[str, list[float]] = {k: [] for k in epochs}
    for r in range(args.timing_repeats):
        for name, run in epochs.items():
            sync(device)
            t, c = time.perf_counter(), time.process_time()
            run()
            sync(device)
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            print(
                f"    timing {model} repeat {r + 1} {name}: {wall[name][-1]:.1f} s wall, {cpu[name][-1]:.1f} s CPU",
                flush=True,
            )
    return {k: {"wall_ms": 1000 * min(wall[k]), "cpu_ms": 1000 * min(cpu[k])} for k in epochs}


def check_ticket(record: dict, args) -> bool:
    """A real extract_ticket at the same settings stores exactly the recalibrated accuracy reported here."""
    spec = spec_for(record["model"], record["method"], record["requested"], record["seed"], args)
    with tempfile.TemporaryDirectory() as d:
        r = runs_extract.extract_ticket(spec, out=Path(d) / "t.safetensors")
    return r["metrics"]["test"]["accuracy"] == record["test"]


def mean_std(values: list[float]) -> str:
    m = 100 * statistics.mean(values)
    return f"{m:.2f} ± {100 * statistics.stdev(values):.2f}" if len(values) > 1 else f"{m:.2f}"


def table(records: list[dict]) -> str:
    rows = [
        "| model | method | requested | achieved sparsity % | test acc % (recalibrated BN) | "
        "test acc % (trajectory BN) | ms/epoch in the run |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["model"], r["label"]), []).append(r)
    for (model, label), rs in groups.items():
        traj = [r["test_trajectory"] for r in rs if "test_trajectory" in r]
        rows.append(
            f"| {model} | {label} | {rs[0]['requested_label']} | "
            f"{mean_std([r['achieved'] for r in rs])} | {mean_std([r['test'] for r in rs])} | "
            f"{mean_std(traj) if traj else '—'} | {statistics.mean(r['ms_per_epoch'] for r in rs):.0f} |"
        )
    return "\n".join(rows)


def timing_table(timing: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = [
        "| model | training | CPU ms/epoch (all threads) | × dense (CPU) | wall ms/epoch | × dense (wall) |",
        "|---|---|---|---|---|---|",
    ]
    for model, t in timing.items():
        rows += [
            f"| {model} | {name} | {v['cpu_ms']:.0f} | {v['cpu_ms'] / t['dense']['cpu_ms']:.2f} | "
            f"{v['wall_ms']:.0f} | {v['wall_ms'] / t['dense']['wall_ms']:.2f} |"
            for name, v in t.items()
        ]
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet20,vit:p4-d64-l4-h4")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument(
        "--timing-repeats",
        type=int,
        default=3,
        help="interleaved one-epoch repeats of dense, edge-popup and augmented training per model",
    )
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--check-ticket", action="store_true", help="one real extract_ticket per model, compared")
    ap.add_argument(
        "--bn-only",
        action="store_true",
        help="edge-popup at --sparsity only (the BatchNorm comparison at a longer budget), no timing",
    )
    ap.add_argument("--timing-only", action="store_true", help="only the interleaved time per epoch")
    ap.add_argument("--json", type=Path, help="also write every run's record here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    t0, records, timing, checks = time.perf_counter(), [], {}, {}
    for model in args.models.split(","):
        if args.timing_only:
            timing[spec_for(model, "edge-popup", args.sparsity, seeds[0], args).model.to_string()] = timed_epochs(
                model, seeds[0], args
            )
            continue
        for seed in seeds:
            ep = extract(model, "edge-popup", args.sparsity, seed, args)
            if args.bn_only:
                records.append({**ep, "label": "edge-popup", "requested_label": f"{args.sparsity:.0%}"})
                continue
            aug = extract(model, "augmented", args.sparsity, seed, args)
            matched = extract(model, "edge-popup", aug["achieved"], seed, args)
            asked = f"{args.sparsity:.0%}"
            for r, label, req in (
                (ep, "edge-popup", asked),
                (aug, "augmented", asked),
                (matched, "edge-popup matched", "augmented's"),
            ):
                records.append({**r, "label": label, "requested_label": req})
        key = records[-1]["model"]
        if not args.bn_only and args.timing_repeats > 0:
            timing[key] = timed_epochs(model, seeds[0], args)
        if args.check_ticket:
            checks[key] = check_ticket(next(r for r in records if r["model"] == key), args)
            print(f"  extract_ticket stores the same accuracy: {checks[key]}", flush=True)

    device = str(runs_inputs.resolve_device(args.device))
    print(
        f"\nFashionMNIST, seeds {args.seeds}, {args.epochs} score epochs (Adam 1e-2, batch 512, 5000/5000 split, "
        f"full test set), device {device}, {torch.get_num_threads()} threads, total "
        f"{(time.perf_counter() - t0) / 60:.1f} min"
    )
    if records:
        print(table(records))
    if timing:
        print(f"\ntime per epoch, same network and batches, {args.timing_repeats} interleaved repeats (minimum):")
        print(timing_table(timing))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "records": records,
                    "timing_ms_per_epoch": timing,
                    "checks": checks,
                    "epochs": args.epochs,
                    "device": device,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
