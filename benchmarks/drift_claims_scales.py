"""The settings of each unit of the weight-drift claims benchmark (arXiv 2605.17659) at three scales: `quick` (a
smoke run), `default` (the CPU-sized run the benchmark has always made) and `source` (the source's own settings
wherever it states them, tens of thousands of steps on FashionMNIST MLPs, three seeds).

A unit is what one results file holds for one seed: "1mlp", "1resnet", "1vit" (claim 1, and claim 2 from the same
runs), "3", "4" (claims 4 and 5, one trade-off sweep), "6" (percentile against top-k), "6stop" (the accumulation
stop), "7" and "8". `settings(unit, scale, device)` is a plain JSON-able dict; a results file is reused only when
its settings equal these, so changing a number here reruns that unit.

What the source notes state, and so what `source` copies: the accumulation stop after 50,000 steps; ReLUfication
as one epoch of fine-tuning after full training; relu2-clip with c = 50; the activations (relu, gelu, silu, relu2,
gelu2), both losses and random inputs. They do not state the steps, widths, batch size, learning rate, optimiser
or dataset of any experiment, so `source` keeps ours there (Adam, lr 1e-3, batch 256, 784-128x4-10 MLPs on
FashionMNIST with its full 60,000 training images, 10,000 steps, about 51 epochs) and says so in every row. The
source's ResNet is ResNet-18 and its image data is not named; ours on a CPU are ResNet-20 and a small ViT on
sklearn digits, on a CUDA machine ResNet-18 and a ViT on CIFAR-10 (CIFAR-10 must be in a data directory).
"""

from __future__ import annotations

from typing import Any

SCALES = ("quick", "default", "source")
ACTS = ("relu", "gelu", "silu", "relu2", "gelu2")
LOSSES = ("mse", "cross-entropy")
INPUTS = ("data", "gaussian")
TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
UNITS = ("1mlp", "1resnet", "1vit", "3", "4", "6", "6stop", "7", "8")
# --only takes claim numbers too: 2 comes from claim 1's runs, 5 from claim 4's sweep
ALIASES = {"1": ("1mlp", "1resnet", "1vit"), "2": ("1mlp", "1resnet", "1vit"), "5": ("4",)}
# the lists a unit loops over: a timing run keeps the first entry of each and multiplies by their product
GRID_KEYS = (
    "models",
    "inputs",
    "acts",
    "losses",
    "norms",
    "targets",
    "sources",
    "control_targets",
    "modes",
    "variants",
)

SOURCE_STEPS = 10_000  # "tens of thousands of steps" is our reading; the notes give no step count
ACCUMULATION_STOP = 50_000  # the source's freeze, "after 50k steps"


def _mlp_data(scale: str) -> dict[str, Any]:
    """The control claims' data and MLP (claims 4-7): digits when quick, FashionMNIST otherwise."""
    if scale == "quick":
        return dict(dataset="digits", width=32, inputs_dim=64, batch_size=64, probe_size=300, n=[600, 300])
    full = [50_000, 10_000] if scale == "source" else None  # None: the dataset's default 5000 / 5000 split
    return dict(dataset="fashion-mnist", width=128, inputs_dim=784, batch_size=256, probe_size=1024, n=full)


def _mlp(d: dict[str, Any]) -> str:
    return f"mlp:{d['inputs_dim']}-" + "-".join([str(d["width"])] * 4) + "-10"


def _claim1(unit: str, scale: str, device: str) -> dict[str, Any]:
    seeds = [0] if scale == "quick" else [0, 1] if scale == "default" else [0, 1, 2]
    base: dict[str, Any] = dict(inputs=list(INPUTS), acts=list(ACTS), losses=list(LOSSES), seeds=seeds, n=None)
    small = {"1mlp": "mlp:64-32-32-32-10", "1resnet": "resnet20", "1vit": "vit:p4-d32-l2-h2"}[unit]
    if scale in ("quick", "default"):
        steps = 30 if scale == "quick" else 100
        s = dict(base, models=[small], dataset="digits", steps=steps, batch_size=64, probe_size=128)
        if scale == "quick" and unit != "1mlp":
            s.update(acts=["relu", "gelu"], losses=["cross-entropy"])
        return s
    if unit == "1mlp":
        d = _mlp_data(scale)
        return dict(
            base, models=[_mlp(d)], dataset=d["dataset"], n=d["n"], steps=SOURCE_STEPS, batch_size=256, probe_size=1024
        )
    if device == "cuda":
        model = "resnet18" if unit == "1resnet" else "vit:p4-d192-l6-h3"
        return dict(base, models=[model], dataset="cifar10", steps=20_000, batch_size=256, probe_size=1024)
    # a CPU: the default's models and data, ten times the steps (about an hour per network for three seeds)
    return dict(base, models=[small], dataset="digits", steps=1000, batch_size=64, probe_size=128)


def settings(unit: str, scale: str, device: str = "cpu") -> dict[str, Any]:
    """The settings of `unit` at `scale` on `device` ("cpu" or "cuda"): everything its runs read."""
    if unit not in UNITS or scale not in SCALES:
        raise ValueError(f"unknown unit {unit!r} or scale {scale!r}")
    common: dict[str, Any] = {"unit": unit, "scale": scale, "device": device, "optimizer": "adam", "lr": 1e-3}
    if unit.startswith("1"):
        return {**common, **_claim1(unit, scale, device)}
    if unit == "3":
        if scale == "source":
            d = _mlp_data(scale)
            run = dict(
                models=[_mlp(d)],
                dataset=d["dataset"],
                n=d["n"],
                steps=SOURCE_STEPS,
                batch_size=256,
                probe_size=1024,
                seeds=[0, 1, 2],
            )
        else:
            run = dict(
                models=["mlp:64-64-64-64-10"],
                dataset="digits",
                n=None,
                steps=150 if scale == "quick" else 400,
                batch_size=64,
                probe_size=256,
                seeds=[0] if scale == "quick" else [0, 1],
            )
        return {**common, **run, "norms": ["layer", "rms", "batch", "none"], "activation": "relu2"}
    if unit == "8":
        if scale == "source" and device == "cuda":
            # nanoGPT's character-level defaults (6 blocks, width 384, 6 heads, context 256, batch 64); the notes
            # give GPT-nano's losses, not its size or corpus
            run = dict(model="gpt-nano:l6-d384-h6-c256", steps=5000, batch_size=64, probe_size=256, seeds=[0, 1, 2])
        elif scale == "source":
            run = dict(model="gpt-nano:l2-d64-h4-c64", steps=5000, batch_size=32, probe_size=128, seeds=[0, 1, 2])
        else:
            quick = scale == "quick"
            run = dict(
                model="gpt-nano:l1-d32-h2-c32" if quick else "gpt-nano:l2-d64-h4-c64",
                steps=150 if quick else 500,
                batch_size=32,
                probe_size=128,
                seeds=[0] if quick else [0, 1],
            )
        return {**common, **run, "acts": ["relu2-clip", "gelu", "relu2"], "clip": 50.0}
    # claims 4-7 on the control MLPs
    d = _mlp_data(scale)
    steps = 150 if scale == "quick" else 400 if scale == "default" else SOURCE_STEPS
    seeds = [0, 1, 2] if scale == "source" else [0]
    s = {**common, **d, "plain": _mlp(d), "steps": steps, "seeds": seeds}
    if unit == "4":
        return {**s, "models": [_mlp(d), _mlp(d) + "+res"], "targets": list(TARGETS)}
    if unit == "6":
        return {**s, "control_targets": [0.7, 0.9], "modes": ["percentile", "topk"]}
    if unit == "6stop":
        if scale == "source":  # the source's stop, then long enough after it to see the statistics stay put
            return {
                **s,
                "steps": 60_000,
                "freeze_after": ACCUMULATION_STOP,
                "target": 0.8,
                "variants": ["live", "frozen"],
            }
        return {**s, "freeze_after": steps // 4, "target": 0.8, "variants": ["live", "frozen"]}
    return {**s, "sources": ["gelu", "silu"], "relufy_to": "relu", "relufy_epochs": 1}


def units(only: str | None) -> list[str]:
    """The units `--only` names (claim numbers or unit names, comma-separated); all of them without it."""
    if not only:
        return list(UNITS)
    out: list[str] = []
    for key in (k.strip() for k in only.split(",") if k.strip()):
        if key not in UNITS and key not in ALIASES:
            raise SystemExit(f"--only: unknown claim {key!r}; choose from {', '.join([*ALIASES, *UNITS])}")
        out += [u for u in ALIASES.get(key, (key,)) if u not in out]
    return sorted(out, key=UNITS.index)


def shrink(s: dict[str, Any], steps: int) -> tuple[dict[str, Any], int]:
    """A timing run's settings: `steps` steps and the first entry of each grid list; and how many such runs the
    real unit makes (the product of the grid lists' lengths)."""
    out, factor = dict(s), 1
    for key in GRID_KEYS:
        if key in s:
            factor *= len(s[key])
            out[key] = s[key][:1]
    if "freeze_after" in s:
        out["freeze_after"] = max(1, steps * s["freeze_after"] // s["steps"])
    out["steps"] = steps
    return out, factor
