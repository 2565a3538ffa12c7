"""`ticket compare --aggregate`: compare's result with its tickets grouped over their seeds (runs/aggregate.py) and
its pairs of tickets drawn with the same seed grouped by their two methods. Torch-free, as compare is."""

from __future__ import annotations

from dataclasses import replace

from ticketcli.runs.aggregate import MeanStd, PairGroup, Sample, matched_folder, seed_groups
from ticketcli.runs.compare import CompareResult


def compared(result: CompareResult) -> CompareResult:
    """compare's result with its tickets grouped over seeds (their stored values) and its same-seed pairs grouped by
    their two methods (in the order the tickets were given) and model."""
    tickets = result.tickets
    samples = [
        Sample(
            method=t.method.name,
            model=t.model,
            seed=t.seed,
            requested_sparsity=t.requested,
            matched_in=matched_folder(t.method.option("matched_to")),
            achieved_sparsity=t.achieved,
            test_accuracy=t.accuracy("test"),
            val_accuracy=t.accuracy("val"),
            test_bits_per_char=t.bits_per_char("test"),
            val_bits_per_char=t.bits_per_char("val"),
        )
        for t in tickets
    ]
    pairs: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for p in result.pairs:
        a, b = tickets[p.a], tickets[p.b]
        if a.seed == b.seed and a.model == b.model:
            pairs.setdefault((a.method.name, b.method.name, a.model), []).append((a.seed, p.overlap.jaccard))
    groups = tuple(
        PairGroup(ma, mb, model, tuple(s for s, _ in members), MeanStd.of(j for _, j in members))
        for (ma, mb, model), members in pairs.items()
    )
    return replace(result, aggregate=seed_groups(samples), aggregate_pairs=groups)
