"""sweep-k's stability summary (Section 6.3 of arXiv 2607.20555, docs/method.md): the edge-popup range over all runs,
the constrained and unconstrained oracles per seed, and mean +- std over seeds for each fixed method. A language
model's runs (records with `test_bits_per_char`) add their test bits per character to every group, and their
oracles select by validation bits per character (lowest) instead of validation accuracy."""

from __future__ import annotations

import statistics
from typing import Any

from ticketcli.contract.schema import JsonObject
from ticketcli.settings.sweep import PAPER_BAND as PAPER_BAND  # declared with its help

BAND_TOL = 1e-9  # in percentage points: 100 * 0.95 need not be exactly 95.0 in floating point
SHOWN_DECIMALS = 2  # tables print achieved sparsity as a percentage with two decimals (report's pct)
PICK_KEYS = ("id", "config", "val_accuracy", "test_accuracy", "achieved_sparsity")  # an oracle's pick, per seed
LM_PICK_KEYS = ("val_bits_per_char", "test_bits_per_char")  # and a language model's


def _stats(values: list[float]) -> JsonObject:
    """Mean, sample standard deviation (None below two values: one seed has no spread to show), min and max."""
    return {
        "n": len(values),
        "mean": statistics.fmean(values) if values else None,
        "std": statistics.stdev(values) if len(values) > 1 else None,
        "min": min(values, default=None),
        "max": max(values, default=None),
    }


def shown_percent(fraction: float) -> float:
    """The percentage a table prints for this fraction (rounded to SHOWN_DECIMALS), as a number."""
    return float(f"{100 * fraction:.{SHOWN_DECIMALS}f}")


def in_band(achieved: float, band: tuple[float, float]) -> bool:
    """Whether the achieved sparsity, rounded as tables print it, lies in the band: a run shown at 95.00% is inside
    a band that ends at 95%, whatever digits follow the printed ones."""
    return 100 * band[0] - BAND_TOL <= shown_percent(achieved) <= 100 * band[1] + BAND_TOL


def oracle(records: list[dict[str, Any]], band: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """The edge-popup sweep record with the best validation accuracy (inside the achieved-sparsity band if given); a
    language model's: the lowest validation bits per character.

    Ties go to the sparser mask (higher achieved sparsity), then to the earlier record in plan order, so the choice
    never depends on the executor's completion order."""
    candidates = [
        r for r in records if r["group"] == "edge-popup" and (band is None or in_band(r["achieved_sparsity"], band))
    ]
    # max keeps the first of equal keys: the earlier record in plan order
    if all(is_language_model(r) for r in candidates):  # (none: no pick)
        return max(candidates, key=lambda r: (-r["val_bits_per_char"], r["achieved_sparsity"]), default=None)
    return max(candidates, key=lambda r: (r["val_accuracy"], r["achieved_sparsity"]), default=None)


def is_language_model(record: dict[str, Any]) -> bool:
    """Whether a flat record is a language model's run: it has bits per character."""
    return record.get("test_bits_per_char") is not None


def _oracle_summary(records: list[dict[str, Any]], seeds: list[int], band: tuple[float, float] | None) -> JsonObject:
    picks = {str(seed): oracle([r for r in records if r["seed"] == seed], band) for seed in seeds}
    lm = _language_model(records)
    keys = PICK_KEYS + LM_PICK_KEYS if lm else PICK_KEYS
    per_seed = {s: None if r is None else {k: r[k] for k in keys} for s, r in picks.items()}
    chosen = [v for v in per_seed.values() if v is not None]
    return {
        "band": None if band is None else list(band),
        "per_seed": per_seed,
        **_measures(chosen, lm),
        "seeds_without_candidate": [s for s, v in per_seed.items() if v is None],
    }


def _language_model(records: list[dict[str, Any]]) -> bool:
    """Whether the sweep's runs are a language model's (every record has bits per character)."""
    return bool(records) and all(is_language_model(r) for r in records)


def _measures(rs: list[dict[str, Any]], lm: bool) -> JsonObject:
    """The statistics of some runs: test accuracy, achieved sparsity and a language model's test bits per char."""
    stats = {
        "test": _stats([r["test_accuracy"] for r in rs]),
        "achieved_sparsity": _stats([r["achieved_sparsity"] for r in rs]),
    }
    return stats | ({"test_bits_per_char": _stats([r["test_bits_per_char"] for r in rs])} if lm else {})


def _group_summary(rs: list[dict[str, Any]], lm: bool) -> JsonObject:
    return _measures(rs, lm)


def summarize(records: list[dict[str, Any]], *, band: tuple[float, float] = PAPER_BAND) -> JsonObject:
    """Section 6.3's quantities: edge-popup range and std over all sweep runs (all seeds), both oracles per seed
    (aggregated over seeds), and mean ± std over seeds for fixed edge-popup, random and each double-scoring method."""
    seeds = sorted({r["seed"] for r in records})
    lm = _language_model(records)
    sweep = [r for r in records if r["group"] == "edge-popup"]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r["group"] not in ("edge-popup", "fixed"):
            groups.setdefault(r["group"], []).append(r)
    return {
        "seeds": seeds,
        "edge_popup": {**_group_summary(sweep, lm), "configs": len(sweep)},
        "oracle_constrained": _oracle_summary(records, seeds, band),
        "oracle_unconstrained": _oracle_summary(records, seeds, None),
        "fixed_edge_popup": _group_summary([r for r in records if r["fixed"]], lm),
        "methods": {g: _group_summary(rs, lm) for g, rs in groups.items()},
    }
