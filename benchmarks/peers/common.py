"""What the peer scripts share: `ticket`'s network, weights, data and minibatches for a run, a reference
repository's code imported from a checkout, and the side-by-side measures (kept counts, Jaccard, accuracy).

The reference code is imported from the path given with --repo; nothing of it is copied into this repository.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ticketcli.data.datasets import Splits, load_splits
from ticketcli.methods.saliency import minibatches
from ticketcli.models.masked import MaskedNet
from ticketcli.runs.build import build_net, run_budget
from ticketcli.seeding import generator
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.specs.run import RunSpec
from ticketcli.train import evaluate

Masks = dict[str, torch.Tensor]


def arguments(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="a checkout of the reference repository")
    ap.add_argument("--dataset", default="fashion-mnist", help="fashion-mnist (the paper's protocol) or digits")
    ap.add_argument("--seeds", default="7,8,9", help="seeds of the weights, split and minibatches")
    ap.add_argument("--sparsities", default="0.9,0.95")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    return ap


def import_from(repo: Path, module: str, stubs: dict[str, types.ModuleType] | None = None) -> types.ModuleType:
    """`module` imported from the checkout at `repo` (put first on sys.path), with `stubs` standing in for modules
    the reference imports but these measurements never use."""
    if not repo.is_dir():
        sys.exit(f"error: --repo {repo} is not a directory (give a checkout of the reference repository)")
    for name, stub in (stubs or {}).items():
        sys.modules.setdefault(name, stub)
    sys.path.insert(0, str(repo.resolve()))
    return importlib.import_module(module)


@dataclass
class Run:
    """One ticket run's frozen network (its initial weights, fingerprinted as the ticket's weights_sha256 would
    be), its data splits and its settings."""

    spec: RunSpec
    net: MaskedNet
    weights: dict[str, torch.Tensor]
    splits: Splits


def ticket_run(settings: dict) -> Run:
    """The network, weights and splits `ticket extract` would build for these settings."""
    spec = build_extract_spec(merge_settings({**settings}, None))
    net, weights = build_net(spec.model, spec.init, spec.weights, run_budget(spec))
    return Run(spec, net, weights, load_splits(spec.data))


def method_generator(run: Run) -> torch.Generator:
    """The generator `ticket extract` gives the method (runs_extract.run_extraction)."""
    return generator(run.spec.init.seed, "method")


def collections(run: Run, count: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The first `count` collections of minibatches a saliency method of this run draws, in its order."""
    gen = method_generator(run)
    return [minibatches(run.splits, run.spec.method, gen) for _ in range(count)]


def reference_mlp(linear: type, run: Run, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """The ticket's MLP (no biases, ReLU between layers) built from the reference's masked Linear class, holding
    the ticket's initial weights."""
    names = [n for n in run.net.names if n.endswith(".weight")]
    if len(names) != len(run.net.names):
        sys.exit("error: the peer scripts compare bias-free MLPs (the paper's); drop +bias")
    mods: list[nn.Module] = [nn.Flatten()]
    for i, n in enumerate(names):
        out_f, in_f = run.weights[n].shape
        layer = linear(in_f, out_f, bias=False)
        with torch.no_grad():
            layer.weight.copy_(run.weights[n])
        mods += [layer] + ([nn.ReLU()] if i < len(names) - 1 else [])
    return nn.Sequential(*mods).to(dtype)


def linears(model: nn.Module, linear: type) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, linear)]


def as_masks(run: Run, tensors: list[torch.Tensor]) -> Masks:
    """Reference masks (one per Linear, in order) as ticket masks (bool, by parameter name)."""
    return {n: t.detach().bool().view(run.weights[n].shape) for n, t in zip(run.net.names, tensors)}


def kept(masks: Masks) -> int:
    return sum(int(m.sum()) for m in masks.values())


def jaccard(a: Masks, b: Masks) -> float:
    inter = sum(int((a[n] & b[n]).sum()) for n in a)
    union = sum(int((a[n] | b[n]).sum()) for n in a)
    return inter / union if union else 1.0


def accuracy(run: Run, masks: Masks) -> float:
    """Test accuracy of the masks on the run's initial weights, measured by ticket's evaluate."""
    return evaluate(run.net, masks, run.splits.x_test, run.splits.y_test)["accuracy"]


def flat(scores: dict[str, torch.Tensor] | list[torch.Tensor]) -> torch.Tensor:
    values = scores.values() if isinstance(scores, dict) else scores
    return torch.cat([s.detach().flatten().double() for s in values])


def relative_error_up_to_scale(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - c b| / max |a| for the least-squares positive scale c (inf when the best scale is negative)."""
    c = float((a * b).sum() / (b * b).sum())
    return float((a - c * b).abs().max() / a.abs().max()) if c > 0 else float("inf")


def row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
