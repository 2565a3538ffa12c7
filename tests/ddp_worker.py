"""Run under torchrun by tests/test_distributed.py: one data-parallel step of each trainer, saved per rank.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py OUT_DIR

Each rank writes OUT_DIR/rank{R}.pt with the score and weight gradients and updated tensors of one step on a
fixed global batch, and whether check_identical caught a deliberately diverged rank.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from ticketcli.errors import RunFailed
from ticketcli.runtime import distributed

sys.path.insert(0, str(Path(__file__).parent))
from ddp_cases import batch, score_trainer, weight_trainer  # noqa: E402


def main(out: Path) -> None:
    with distributed.joined(lambda: torch.device("cpu")) as world:
        x, y = batch()
        st = score_trainer()
        loss, correct, _ = st.step(x, y)
        scores = {n: (parts[0].grad.clone(), parts[0].detach().clone()) for n, parts in st.scores.items()}
        wt = weight_trainer()
        wloss, wcorrect = wt.step(x, y)
        weights = {n: (p.grad.clone(), p.detach().clone()) for n, p in wt.params.items()}
        tensors = {"a": torch.zeros(5)}
        distributed.check_identical(tensors, "equal tensors")  # must pass
        if world.rank == 1:
            tensors["a"][2] = 1.0
        try:
            distributed.check_identical(tensors, "the test tensors")
            caught = None
        except RunFailed as e:
            caught = str(e)
        torch.save(
            {
                "world": world.size,
                "loss": loss,
                "correct": correct,
                "scores": scores,
                "wloss": wloss,
                "wcorrect": wcorrect,
                "weights": weights,
                "caught": caught,
                "shard": distributed.shard(y),
            },
            out / f"rank{world.rank}.pt",
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
