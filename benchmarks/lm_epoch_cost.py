"""Time per epoch of an extraction (augmented, edge-popup) against dense weight training of the same character-level
GPT on the same batches of the same text, in one process: the target is augmented <= 1.2x dense.

    python benchmarks/lm_epoch_cost.py                                  # gpt-nano:l2-d64-h4-c64 on the fortunes files
    python benchmarks/lm_epoch_cost.py --model gpt-nano:l4-d128-h4-c128 --steps 4 --threads 1

"dense" is train.WeightTrainer with no mask (Adam, fused, as train-weak's dense baseline runs it), and the score
methods are methods.score_training's loop (ScoreTrainer, Adam on the scores): both read the extraction blocks in the
same seeded order. Interleaved repeats, median; wall and process CPU time (on a loaded machine the CPU time is the
steadier one).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ticketcli.data.datasets import Splits, load_splits
from ticketcli.methods.score_training import ScoreTrainer, init_scores, train_scores
from ticketcli.methods.scores import Augmented, EdgePopup
from ticketcli.runs.build import build_net
from ticketcli.runs.inputs import check_input_shape
from ticketcli.seeding import generator
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.specs.run import MethodSpec
from ticketcli.train import WeightOptim, WeightTrainer, train_weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt-nano:l2-d64-h4-c64")
    ap.add_argument("--text", default=None, help="a UTF-8 file (default: the fortunes files)")
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per method and repeat")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; the median is reported")
    ap.add_argument("--steps", type=int, default=None, help="only this many batches an epoch")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = ap.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    settings = {"model": args.model, "dataset": "text", **({"text": args.text} if args.text else {})}
    spec = build_extract_spec(merge_settings(settings, None))
    data = load_splits(spec.data)
    mspec = MethodSpec(epochs=args.epochs)
    if args.steps is not None:
        m = args.steps * mspec.batch_size
        data = Splits(data.x_extract[:m], data.y_extract[:m], data.x_val, data.y_val, data.x_test, data.y_test, {})

    def make_runner(kind: str):
        net, _ = build_net(spec.model, spec.init, None)
        check_input_shape(spec.model, data, net)  # next-character logits in the layout the losses read
        g = generator(0, "bench")  # every kind: the same blocks in the same order
        if kind == "dense":
            trainer = WeightTrainer(net, None, WeightOptim())
            return lambda: train_weights(
                trainer, data.x_extract, data.y_extract, epochs=args.epochs, batch_size=mspec.batch_size, generator=g
            )
        sel = {"augmented": Augmented, "edge-popup": EdgePopup}[kind]().selection(net, mspec)
        st = ScoreTrainer(net, sel, mspec, init_scores(net, sel.parts, g))
        return lambda: train_scores(st, data, mspec, g, None)

    kinds = ["dense", "edge-popup", "augmented"]
    runners = {k: make_runner(k) for k in kinds}
    for k in kinds:  # warm-up
        runners[k]()
    wall: dict[str, list[float]] = {k: [] for k in kinds}
    cpu: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.repeats):
        for k in kinds:
            t0, c0 = time.perf_counter(), time.process_time()
            runners[k]()
            wall[k].append((time.perf_counter() - t0) / args.epochs)
            cpu[k].append((time.process_time() - c0) / args.epochs)
    blocks, context = data.x_extract.shape
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, model {spec.model.to_string()}, "
        f"text {data.info.get('source', args.text)}, {blocks} blocks of {context} characters an epoch, "
        f"batch {mspec.batch_size}, {args.epochs} epoch(s) x {args.repeats} repeats"
    )
    dense, dense_cpu = statistics.median(wall["dense"]), statistics.median(cpu["dense"])
    print(f"{'method':<12} {'ms/epoch':>9} {'x dense':>8} {'CPU ms/epoch':>13} {'x dense':>8}")
    for k in kinds:
        m, c = statistics.median(wall[k]), statistics.median(cpu[k])
        print(f"{k:<12} {m * 1e3:9.1f} {m / dense:8.2f} {c * 1e3:13.1f} {c / dense_cpu:8.2f}")


if __name__ == "__main__":
    main()
