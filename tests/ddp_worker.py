"""Run under torchrun by tests/test_distributed.py: one data-parallel step of each trainer, saved per rank.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/ddp_worker.py OUT_DIR

Each rank writes OUT_DIR/rank{R}.pt with the score and weight gradients and updated tensors of one step on a
fixed global batch, and whether check_identical caught a deliberately diverged rank; and, as the last thing
before the interpreter's finalization, OUT_DIR/rank{R}.teardown with the number of DistributedDataParallel
replicas still alive then (each one left is a process group freed during finalization, which aborts the
process now and then).
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from pathlib import Path

import torch


def count_replicas_at_teardown(out: Path) -> None:
    from torch.nn.parallel import DistributedDataParallel

    alive = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
    (out / f"rank{os.environ['RANK']}.teardown").write_text(str(alive))


# registered before ticketcli's own exit handlers, so it runs after them
atexit.register(count_replicas_at_teardown, Path(sys.argv[1]))

from ticketcli.errors import RunFailed  # noqa: E402
from ticketcli.runtime import distributed  # noqa: E402

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
