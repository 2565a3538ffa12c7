"""The baselines' own settings (Appendix B): SNIP's and GraSP's minibatches, GraSP's reading, SynFlow's and IMP's
rounds, SET/RigL's regrowth and movement pruning's schedule, each a MethodSpec field read by the baselines named in
its `methods=`. They are part of extract's table (settings/run.py's RUN), in this order."""

from __future__ import annotations

from typing import Any

from ticketcli.settings.ranges import CHOICE, FLOAT, INT
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


BASELINES: tuple[Setting, ...] = (
    method_setting(
        "saliency_batches",
        "snip: minibatches whose gradients are summed; grasp: minibatches in each of its collections (two with "
        "--grasp-data separate, one with shared).",
        V,
        kind=int,
        range=INT(1, 10_000),
        methods=SALIENCY,
    ),
    method_setting(
        "grasp_temperature",
        "Logits are divided by this.",
        V,
        kind=float,
        range=FLOAT(0, 1e6, lo_open=True),
        methods=("grasp",),
    ),
    method_setting(
        "grasp_direction",
        "Which end of the ranking it keeps. paper: the k largest -θ⊙Hg (the double-scoring paper's Appendix B, "
        "signed score then top-k); original: the k largest θ⊙Hg, i.e. it removes the largest -θ⊙Hg (Wang et al. "
        "2020, and the Synaptic-Flow code).",
        V,
        kind=GRASP_DIRECTIONS,
        range=CHOICE(*GRASP_DIRECTIONS),
        methods=("grasp",),
    ),
    method_setting(
        "grasp_data",
        "separate: g and Hg from two independent collections of --saliency-batches minibatches; shared: both from "
        "one collection (the original GraSP code).",
        V,
        kind=GRASP_DATA,
        range=CHOICE(*GRASP_DATA),
        methods=("grasp",),
    ),
    method_setting(
        "synflow_rounds",
        "Pruning rounds; round r keeps density d^(r/R).",
        V,
        kind=int,
        range=INT(1, 10_000),
        methods=("synflow",),
    ),
    method_setting(
        "imp_rounds",
        "Prune-and-rewind rounds, each training --epochs / rounds epochs.",
        V,
        kind=int,
        range=INT(1, 1000),
        methods=("imp",),
    ),
    method_setting(
        "regrow_every",
        "Optimisation steps between prune-and-regrow updates.",
        V,
        kind=int,
        range=INT(1, 10_000_000),
        methods=SPARSE,
    ),
    method_setting(
        "regrow_fraction",
        "Fraction of active weights pruned by magnitude and regrown per update.",
        V,
        kind=float,
        range=FLOAT(0, 1, hi_open=True),
        methods=SPARSE,
    ),
    method_setting(
        "movement_warmup",
        "Fraction of steps kept dense before the cubic schedule.",
        V,
        kind=float,
        range=FLOAT(0, 1, hi_open=True),
        methods=("movement",),
    ),
    method_setting(
        "movement_cooldown",
        "Final fraction of steps at the target density.",
        V,
        kind=float,
        range=FLOAT(0, 1, hi_open=True),
        methods=("movement",),
    ),
    method_setting(
        "movement_noise",
        "Std of the Gaussian noise on the zero score init.",
        V,
        kind=float,
        range=FLOAT(0, 1),
        methods=("movement",),
    ),
)
