"""The fixed trainers and batch that tests/ddp_worker.py (under torchrun) and tests/test_distributed.py (single
process, the oracle) both build, so their one-step results can be compared."""

from __future__ import annotations

import torch

from ticketcli.methods.score_training import ScoreTrainer, init_scores
from ticketcli.methods.scores import Augmented
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.seeding import generator
from ticketcli.specs.run import InitSpec, MethodSpec
from ticketcli.train import WeightOptim, WeightTrainer

SPEC = "mlp:12-16-16-3"
BATCH = 37  # odd: the two shards differ in size (19 and 18)


def net() -> MaskedNet:
    m = parse_model(SPEC)
    module = build_model(m)
    n = MaskedNet(module, m)
    n.load_weights(init_weights(module, InitSpec(seed=3)))
    return n


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    return torch.randn(BATCH, 12, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def score_trainer() -> ScoreTrainer:
    n = net()
    spec = MethodSpec(name="augmented", sparsity=0.7, batch_size=BATCH)
    method = Augmented()
    selection = method.selection(n, spec)
    return ScoreTrainer(n, selection, spec, init_scores(n, selection.parts, generator(3, "method")))


def weight_trainer() -> WeightTrainer:
    n = net()
    g = torch.Generator().manual_seed(5)
    masks = {name: torch.rand(n.weights[name].shape, generator=g) < 0.5 for name in n.names}
    return WeightTrainer(n, masks, WeightOptim())
