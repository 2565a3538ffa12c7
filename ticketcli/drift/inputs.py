"""Where drift's batches come from, for one seed: a dataset's images, random inputs, or a text's characters.
Each source gives training batches (`next()`) and one fixed probe batch that every statistic is measured on."""

from __future__ import annotations

import torch

from ticketcli.data.datasets import load_splits
from ticketcli.data.registry import DATASETS
from ticketcli.data.text import Corpus, split_blocks
from ticketcli.drift.spec import DriftSpec
from ticketcli.errors import UsageError
from ticketcli.runs import inputs as runs_inputs
from ticketcli.seeding import generator
from ticketcli.specs.run import DataSpec, ModelSpec


class _Epochs:
    """Indices of `n` training examples in seeded epochs of batches (the last partial batch included)."""

    def __init__(self, n: int, batch_size: int, g: torch.Generator, device: torch.device):
        self.n, self.batch_size, self.g, self.device = n, batch_size, g, device
        self.order, self.pos = torch.empty(0, dtype=torch.long), 0

    def next(self) -> torch.Tensor:
        if self.pos >= len(self.order):  # a new epoch in seeded order
            self.order, self.pos = torch.randperm(self.n, generator=self.g).to(self.device), 0
        idx = self.order[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return idx


class Inputs:
    """Training batches and the fixed probe batch for one seed (data: the extraction split in seeded epochs, the
    probe from the validation split; gaussian/uniform: fresh random inputs and labels every step)."""

    text = False  # the probe is a validation split of characters (TextInputs)

    def __init__(self, spec: DriftSpec, model: ModelSpec, data: DataSpec, seed: int, device: torch.device):
        self.spec, self.model, self.device = spec, model, device
        self.shape = (model.widths[0],) if model.arch == "mlp" else tuple(model.input or ())  # one example's
        self.classes = model.widths[-1] if model.arch == "mlp" else int(model.classes or 0)
        if spec.inputs == "data":
            splits = load_splits(data)
            runs_inputs.check_input_shape(model, splits)
            info = DATASETS.get(data.name)
            if self.classes < info.classes:
                raise UsageError(
                    f"model {model.to_string()} has {self.classes} outputs but {data.name} has {info.classes} classes"
                )
            self.x, self.y = splits.x_extract.to(device), splits.y_extract.to(device)
            self.probe = (splits.x_val[: spec.probe_size].to(device), splits.y_val[: spec.probe_size].to(device))
            self.epochs = _Epochs(self.y.numel(), spec.batch_size, generator(seed, "drift-batches"), device)
        else:
            self.g = generator(seed, "drift-inputs")
            self.probe = self._random(spec.probe_size, generator(seed, "drift-inputs/probe"))

    def _random(self, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.empty(n, *self.shape)
        x = x.normal_(generator=g) if self.spec.inputs == "gaussian" else x.uniform_(0.0, 1.0, generator=g)
        y = torch.randint(self.classes, (n,), generator=g)
        return x.to(self.device), y.to(self.device)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spec.inputs != "data":
            return self._random(self.spec.batch_size, self.g)
        idx = self.epochs.next()
        return self.x[idx], self.y[idx]


class TextInputs:
    """Next-character prediction on a corpus split for this seed (text.split_blocks): training blocks in seeded
    epochs, the probe from the validation blocks. x is (B, C) character ids, y the (B * C) next characters."""

    text = True

    def __init__(self, spec: DriftSpec, corpus: Corpus, context: int, seed: int, device: torch.device):
        assert spec.text is not None, "a character-level model's spec"
        train, val = split_blocks(corpus, context, spec.text.val_fraction, seed)
        self.blocks, self.n_train, self.n_val = train.to(device), len(train), len(val)
        self.probe = self._pair(val[: spec.probe_size].to(device))
        self.epochs = _Epochs(len(train), spec.batch_size, generator(seed, "drift-batches"), device)

    @staticmethod
    def _pair(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, C+1) blocks -> inputs (B, C) and their next characters (B * C,), as int64."""
        blocks = blocks.long()
        return blocks[:, :-1], blocks[:, 1:].reshape(-1)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._pair(self.blocks[self.epochs.next()])
