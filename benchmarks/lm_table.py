"""Strong tickets of a character-level GPT on the fortunes corpus: test bits per character (mean ± std over seeds)
of augmented, edge-popup, iterated and random masks over the frozen random weights, against dense weight training
(train-weak's dense baseline) and one weight-training baseline (IMP, its trained sparse network), for two gpt-nano
sizes and several sparsities, with the achieved sparsity and the time per epoch against dense training.

    python benchmarks/lm_table.py --out lm_table.json                 # the full protocol: slow on a CPU
    python benchmarks/lm_table.py --epochs 1 --chars 60000 --threads 1 --out lm_table.json   # a reduced budget

Every run goes through the command line's own code (in this process), so each number is what `ticket extract
--json` / `ticket train-weak --json` report. --chars N cuts the corpus to its first N characters (written to a
temporary file and passed as --text), so the table says what it was measured on. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.lm import corpus_of
from ticketcli.settings.resolve import data_location
from ticketcli.specs.run import DataSpec

MODELS = ("gpt-nano:l2-d64-h4-c64", "gpt-nano:l4-d128-h4-c128")
SPARSITIES = (0.5, 0.8, 0.9)
SCORE_METHODS = ("augmented", "edge-popup", "iterated")
runner = CliRunner()


def cli(*args: str) -> dict[str, Any]:
    r = runner.invoke(app, [*args, "--json"])
    if r.exit_code != 0:
        raise SystemExit(f"ticket {' '.join(args)} failed: {r.output[-2000:]}")
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def fortunes_text(chars: int | None, folder: Path) -> list[str]:
    """[] (the fortunes files themselves), or --text of a file holding their first `chars` characters."""
    if chars is None:
        return []
    corpus = corpus_of(DataSpec(name="text", **data_location(None, False)))
    path = folder / "fortunes-head.txt"
    path.write_text(corpus.decode(corpus.ids[:chars]), encoding="utf-8")
    return ["--text", str(path)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--sparsities", type=float, nargs="+", default=list(SPARSITIES))
    ap.add_argument("--epochs", type=int, default=10, help="training epochs of every method that trains")
    ap.add_argument("--batch-size", type=int, default=512, help="blocks per training step (every method and dense)")
    ap.add_argument("--imp-rounds", type=int, default=None, help="IMP's rounds (default: --epochs, one epoch each)")
    ap.add_argument("--chars", type=int, default=None, help="only the corpus's first N characters")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write every run's numbers here (JSON)")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        text = fortunes_text(args.chars, folder)
        common = [*text, "--device", "cpu", "--quiet"]  # extract adds --dataset text; a ticket knows its dataset
        common += [] if args.threads is None else ["--threads", str(args.threads)]
        for model in args.models:
            for seed in args.seeds:
                t0 = time.perf_counter()
                rows += one_seed(model, seed, args, common, folder)
                print(f"{model} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    print(markdown(rows, args))


def one_seed(model: str, seed: int, args: argparse.Namespace, common: list[str], folder: Path) -> list[dict[str, Any]]:
    """Every method and sparsity of one model and seed, then dense weight training (train-weak's dense baseline,
    run beside a random ticket's masked training)."""
    rows: list[dict[str, Any]] = []

    def run(method: str, sparsity: float | None, *extra: str) -> dict[str, Any]:
        out = folder / f"{method}-{sparsity}-{seed}.safetensors"
        flags = [] if method == "random" else ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
        flags += [] if sparsity is None else ["--sparsity", str(sparsity)]
        doc = cli(
            "extract", "--dataset", "text", "--model", model, "--method", method, "--seed", str(seed), *flags, *extra,
            *common, "--out", str(out), "--force",
        )  # fmt: skip
        doc["path"] = str(out)
        return doc

    def record(method: str, sparsity: float | None, doc: dict[str, Any], **more: Any) -> None:
        epochs = 0 if method == "random" else args.epochs
        rows.append(
            {
                "model": doc["model"],
                "seed": seed,
                "method": method,
                "requested": sparsity,
                "achieved": doc["sparsity"]["achieved"],
                "test_bits_per_char": doc["metrics"]["test"]["bits_per_char"],
                "epoch_s": doc["wall_time_s"] / epochs if epochs else None,
                **more,
            }
        )

    random_ticket = ""
    for sparsity in args.sparsities:
        for method in (*SCORE_METHODS, "random"):
            doc = run(method, sparsity)
            record(method, sparsity, doc)
            if method == "augmented":
                matched = run("edge-popup", None, "--match-sparsity", doc["path"])
                record("edge-popup (augmented's sparsity)", sparsity, matched)
            if method == "random":
                random_ticket = doc["path"]
        imp = run("imp", sparsity, "--imp-rounds", str(args.imp_rounds or args.epochs))
        trained = (imp.get("trained") or {}).get("metrics", imp.get("trained") or {}).get("test", {})
        record("imp", sparsity, imp, trained_bits_per_char=trained.get("bits_per_char"))
    train = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--dense-baseline"]
    weak = cli("train-weak", random_ticket, *train, *common)
    dense = weak["dense"]
    rows.append(
        {
            "model": rows[-1]["model"],
            "seed": seed,
            "method": "dense weight training",
            "requested": 0.0,
            "achieved": 0.0,
            "test_bits_per_char": dense["metrics"]["test"]["bits_per_char"],
            "epoch_s": (dense.get("wall_time_s") or 0.0) / args.epochs,
        }
    )
    return rows


def mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    m = statistics.fmean(values)
    return f"{m:.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{m:.3f}"


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """One line per (model, method, requested sparsity): test bits per character mean ± std over the seeds, the
    mean achieved sparsity, and the mean time per epoch over dense training's of the same model."""
    lines = [
        "| model | method | requested | achieved | test bits/char (ticket) | trained bits/char | epoch vs dense |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys: list[tuple[str, str, Any]] = []
    for r in rows:
        k = (r["model"], r["method"], r["requested"])
        if k not in keys:
            keys.append(k)
    for model, method, requested in keys:
        group = [r for r in rows if (r["model"], r["method"], r["requested"]) == (model, method, requested)]
        dense = [r["epoch_s"] for r in rows if r["model"] == model and r["method"] == "dense weight training"]
        epoch = [r["epoch_s"] for r in group if r["epoch_s"]]
        ratio = f"{statistics.fmean(epoch) / statistics.fmean(dense):.2f}x" if epoch and dense else "-"
        bits = [r["test_bits_per_char"] for r in group]
        trained = [r["trained_bits_per_char"] for r in group if r.get("trained_bits_per_char") is not None]
        if method == "dense weight training":
            bits, trained = [], bits
        achieved = 100 * statistics.fmean(r["achieved"] for r in group)
        lines.append(
            f"| {model} | {method} | {100 * requested:.0f}% | {achieved:.1f}% | {mean_std(bits)} | {mean_std(trained)}"
            f" | {ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
