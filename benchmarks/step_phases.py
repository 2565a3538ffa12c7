"""CPU time per phase of one training step (select, forward, backward, Adam): dense weights vs score training.

    OMP_NUM_THREADS=1 python benchmarks/step_phases.py --steps 40
    python benchmarks/step_phases.py --steps 60 --wall     # torch's default threads, wall clock

The paper's MLP (784-256-256-256-10), batch 512 of synthetic FashionMNIST-shaped data. Dense weight training
(fused Adam on all weights) and edge-popup and augmented score training step in turn (interleaved, so load on a
shared machine hits all alike), and the two score methods once more with every layer's W * H recomputed in the
backward pass (the trainer does it only for layers of at least RECOMPUTE_MIN weights, none in this MLP: the rows
show what recomputing costs); each phase is timed with time.thread_time (CPU time of this thread: steadier
than wall time on a loaded machine, and exact with one thread; with several threads it misses the others' work,
so --wall times them by the wall clock instead). Medians over the steps.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ticketcli, not the installed one

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from ticketcli.methods.score_training import ScoreTrainer, seeded_scores  # noqa: E402
from ticketcli.methods.scores import Augmented, EdgePopup  # noqa: E402
from ticketcli.runs.build import build_net  # noqa: E402
from ticketcli.runtime import distributed  # noqa: E402
from ticketcli.seeding import generator  # noqa: E402
from ticketcli.settings.resolve import build_extract_spec, merge_settings  # noqa: E402
from ticketcli.specs.run import MethodSpec  # noqa: E402

clock = time.thread_time  # --wall: time.perf_counter


def dense_step(spec, x, y):
    net, _ = build_net(spec.model, spec.init, None)
    params = {n: nn.Parameter(w.clone()) for n, w in net.weights.items()}
    opt = torch.optim.Adam(params.values(), lr=1e-3, fused=True)

    def step() -> list[float]:
        t0 = clock()
        logits = net.forward_with(x, params)
        loss = F.cross_entropy(logits, y)
        float(loss.detach()), int((logits.argmax(1) == y).sum())  # what the score step reports, too
        t1 = clock()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = clock()
        opt.step()
        return [0.0, t1 - t0, t2 - t1, clock() - t2]

    return step


def score_step(spec, method, x, y, recompute_min: int | None = None, window: bool = True):
    net, _ = build_net(spec.model, spec.init, None)
    mspec = MethodSpec()
    sel = method().selection(net, mspec)
    if not window:  # a "window" holding all of the sorted auxiliary ranking: what the selector kept before
        sel.topk.window_share = 1.0
    tr = ScoreTrainer(net, sel, mspec, *seeded_scores(net, sel.parts, generator(0, "phases")))
    if recompute_min is not None:  # which layers' W * H the backward pass makes again (default: the trainer's)
        tr.recompute_min = recompute_min

    def step() -> list[float]:  # ScoreTrainer.step, phase by phase
        t0 = clock()
        tr.opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            hard = tr.selection.select(tr.scores, aux_fixed=not tr.aux_trains)
        if tr.redraw is not None and not tr.released:  # as ScoreTrainer.step: fixed T let go after the first
            tr._release_aux()
        t1 = clock()
        loss, _, _ = distributed.cross_entropy_step(lambda xb: tr.forward(xb, hard), x, y)
        t2 = clock()
        loss.backward()
        t3 = clock()
        tr.opt.step()
        return [t1 - t0, t2 - t1, t3 - t2, clock() - t3]

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="timed steps per kind (interleaved)")
    ap.add_argument("--warm", type=int, default=10, help="untimed steps per kind first")
    ap.add_argument("--wall", action="store_true", help="wall clock instead of this thread's CPU time")
    args = ap.parse_args()
    if args.wall:
        global clock
        clock = time.perf_counter
    spec = build_extract_spec(merge_settings({}, None))
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 1, 28, 28, generator=g), torch.randint(0, 10, (512,), generator=g)
    steps = {
        "dense": dense_step(spec, x, y),
        "edge-popup": score_step(spec, EdgePopup, x, y),
        "augmented": score_step(spec, Augmented, x, y),
        "augmented, all of |T|": score_step(spec, Augmented, x, y, window=False),
        "edge-popup, recompute": score_step(spec, EdgePopup, x, y, recompute_min=0),
        "augmented, recompute": score_step(spec, Augmented, x, y, recompute_min=0),
    }
    for s in steps.values():
        for _ in range(args.warm):
            s()
    times: dict[str, list[list[float]]] = {k: [] for k in steps}
    for _ in range(args.steps):
        for k, s in steps.items():
            times[k].append(s())
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.steps} steps; "
        f"{'wall' if args.wall else 'CPU'} ms, medians"
    )
    print(f"{'kind':<22} {'select':>7} {'forward':>8} {'backward':>8} {'adam':>7} {'step':>7} {'x dense':>7}")
    dense = statistics.median(sum(t) for t in times["dense"])
    for k, ts in times.items():
        cols = [statistics.median(t[i] for t in ts) * 1e3 for i in range(4)]
        total = statistics.median(sum(t) for t in ts)
        print(f"{k:<22} " + " ".join(f"{c:7.2f}" for c in cols) + f" {total * 1e3:7.2f} {total / dense:7.2f}")


if __name__ == "__main__":
    main()
