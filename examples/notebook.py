"""The Python API from a notebook or a training script: extract a ticket on scikit-learn's digits, evaluate it,
make a module you wrote yourself the ticket's network, and fine-tune the surviving weights on the ticket's data.

    python examples/notebook.py            # about a minute on a laptop CPU
    python examples/notebook.py --epochs 2 # quicker (what the test runs)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn

import ticketcli as tc


class MyNet(nn.Module):
    """Your own network: what matters is its parameter names and shapes (layers.0.weight, layers.1.weight), the
    same as those of the built-in mlp:64-32-10, so that the ticket's weights and masks fit it."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 32, bias=False), nn.Linear(32, 10, bias=False)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](torch.relu(self.layers[0](x.flatten(1))))


def accuracy(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def main(epochs: int) -> None:
    torch.manual_seed(0)  # only the fine-tuning's batch order below uses the global RNG
    # 1. extract: the same run as `ticket extract --model mlp:64-32-10 --dataset digits ...`
    ticket = tc.extract(
        "mlp:64-32-10", "digits", method="augmented", sparsity=0.5, epochs=epochs, seed=0, progress=False, device="cpu"
    )
    print(f"extracted: {ticket}")
    print(f"test accuracy at extraction: {ticket.metrics.test.accuracy:.4f}")

    # 2. save, load and evaluate: the numbers `ticket evaluate ticket.safetensors --json` prints
    with tempfile.TemporaryDirectory() as d:
        path = ticket.save(Path(d) / "ticket.safetensors")
        result = tc.load(path).evaluate(device="cpu")
    print(f"re-evaluated: test {result['metrics']['test']['accuracy']:.4f}, reproduced: {result['reproduced']}")

    # 3. your own module made the ticket's network (its weights and masks), on the ticket's own data splits
    mine = ticket.apply(MyNet())
    splits = ticket.splits()  # normalised and split exactly as evaluate() measures the ticket
    x, y = splits.extract
    x_test, _ = splits.test
    same = torch.equal(mine(x_test), ticket.build("cpu")(x_test))
    print(
        f"my module with the masks: accuracy on the extraction split {accuracy(mine, x, y):.4f}, "
        f"same logits as build(): {same}"
    )

    # 4. fine-tune the kept weights (a weak ticket): masked entries get zero gradient and stay zero
    opt = torch.optim.Adam(mine.parameters(), lr=1e-2)
    for _ in range(3 * epochs):
        for batch in torch.randperm(len(y)).split(128):
            opt.zero_grad()
            nn.functional.cross_entropy(mine(x[batch]), y[batch]).backward()
            opt.step()
    kept = ticket.masks["layers.0.weight"]
    still_zero = bool((mine.layers[0].weight[~kept] == 0).all())
    tuned = accuracy(mine, x, y)
    print(f"fine-tuned on the extraction split: training accuracy {tuned:.4f}, masked weights still zero: {still_zero}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20, help="score-training epochs of the extraction")
    main(parser.parse_args().epochs)
