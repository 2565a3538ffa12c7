"""The baselines' own settings (Appendix B): SNIP's and GraSP's minibatches, GraSP's reading, SynFlow's and IMP's
rounds, SET/RigL's regrowth and movement pruning's schedule, each a MethodSpec field read by the baselines named in
its `methods=`. They are part of extract's table (settings/run.py's RUN), in this order."""

from __future__ import annotations

from typing import Any

from ticketcli.settings.ranges import CHOICE, FLOAT, INT, Range
from ticketcli.settings.setting import Panel, Setting
from ticketcli.specs.run import MethodSpec

GRASP_DIRECTIONS = ("paper", "original")  # grasp keeps the largest -θ⊙Hg (the paper's reading) or θ⊙Hg
GRASP_DATA = ("separate", "shared")  # grasp's g and Hg from two independent collections of minibatches or one
SALIENCY = ("grasp", "snip")  # gradients summed over minibatches
SPARSE = ("rigl", "set")  # prune and regrow
V = Panel.VARIANTS


def method_setting(name: str, help: str, panel: str, **kw: Any) -> Setting:
    """A method's hyper-parameter: the MethodSpec field of the same name (which holds its default)."""
    return Setting(name, help, panel, field=(MethodSpec, name), **kw)


def baseline(name: str, help: str, range: Range, methods: tuple[str, ...]) -> Setting:
    """A baseline's hyper-parameter, on the variants panel; its flag parses what its range holds (a whole number, a
    real number, or one of its choices), so the kind is not written a second time."""
    kind = {"int": int, "float": float}.get(range.kind, range.choices)
    return method_setting(name, help, V, kind=kind, range=range, methods=methods)


BASELINES: tuple[Setting, ...] = (
    baseline(
        "saliency_batches",
        "snip: minibatches whose gradients are summed; grasp: minibatches in each of its collections (two with "
        "--grasp-data separate, one with shared).",
        INT(1, 10_000),
        SALIENCY,
    ),
    baseline("grasp_temperature", "Logits are divided by this.", FLOAT(0, 1e6, lo_open=True), ("grasp",)),
    baseline(
        "grasp_direction",
        "Which end of the ranking it keeps. paper: the k largest -θ⊙Hg (the double-scoring paper's Appendix B, "
        "signed score then top-k); original: the k largest θ⊙Hg, i.e. it removes the largest -θ⊙Hg (Wang et al. "
        "2020, and the Synaptic-Flow code).",
        CHOICE(*GRASP_DIRECTIONS),
        ("grasp",),
    ),
    baseline(
        "grasp_data",
        "separate: g and Hg from two independent collections of --saliency-batches minibatches; shared: both from "
        "one collection (the original GraSP code).",
        CHOICE(*GRASP_DATA),
        ("grasp",),
    ),
    baseline("synflow_rounds", "Pruning rounds; round r keeps density d^(r/R).", INT(1, 10_000), ("synflow",)),
    baseline("imp_rounds", "Prune-and-rewind rounds, each training --epochs / rounds epochs.", INT(1, 1000), ("imp",)),
    baseline("regrow_every", "Optimisation steps between prune-and-regrow updates.", INT(1, 10_000_000), SPARSE),
    baseline(
        "regrow_fraction",
        "Fraction of active weights pruned by magnitude and regrown per update.",
        FLOAT(0, 1, hi_open=True),
        SPARSE,
    ),
    baseline(
        "movement_warmup",
        "Fraction of steps kept dense before the cubic schedule.",
        FLOAT(0, 1, hi_open=True),
        ("movement",),
    ),
    baseline(
        "movement_cooldown", "Final fraction of steps at the target density.", FLOAT(0, 1, hi_open=True), ("movement",)
    ),
    baseline("movement_noise", "Std of the Gaussian noise on the zero score init.", FLOAT(0, 1), ("movement",)),
)
