"""MaskedNet: a frozen network plus its masked parameter names, whose forward pass multiplies every masked
weight by its mask; which parameters get masks (`masked_names`), the layer that owns one, a weight's fan-in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn
from torch.func import functional_call

from ticketcli.models import batchnorm
from ticketcli.specs.run import ModelSpec

MASKABLE = (nn.Linear, nn.Conv2d)


def masked_names(module: nn.Module) -> list[str]:
    """Parameters that get masks: weights and biases of nn.Linear and nn.Conv2d, in named_parameters order.

    Built-in models consist of these layers only, so every parameter is masked; a user's model may have others
    (norm layers, embeddings), which stay frozen and unmasked."""
    owned = {
        f"{prefix}.{n}" if prefix else n
        for prefix, m in module.named_modules()
        if isinstance(m, MASKABLE)
        for n, _ in m.named_parameters(recurse=False)
    }
    return [n for n, _ in module.named_parameters() if n in owned]


def layer_of(param_name: str) -> str:
    """The module that owns a parameter: 'layers.0.weight' -> 'layers.0'."""
    return param_name.rpartition(".")[0]


def fan_in(param: torch.Tensor, weight_for_bias: torch.Tensor | None = None) -> int:
    """Fan-in of a weight (in_features * receptive field); a bias uses its layer's weight."""
    w = weight_for_bias if weight_for_bias is not None else param
    return int(w[0].numel()) if w.dim() > 1 else int(w.numel())


class MaskedNet:
    """A frozen network plus its masked parameter names; forward(x, masks) uses W * M for every masked W.

    BatchNorm (batchnorm.py): training passes (forward_with) normalise with batch statistics, evaluation passes
    (forward) with running statistics, which `calibrate` recomputes from `calibration` (the extraction split's
    inputs) for the masks and weights being evaluated; train.evaluate calls it."""

    def __init__(self, module: nn.Module, spec: ModelSpec | None = None):
        self.module = module
        self.spec = spec
        self.weights: dict[str, torch.Tensor] = {n: p.detach() for n, p in module.named_parameters()}
        self.names: list[str] = masked_names(module)  # Linear/Conv2d parameters (all, in built-in models)
        self.batchnorms = batchnorm.find(module)
        self.bn_statistics = "recalibrate"  # one of batchnorm.MODES: "frozen" for a ticket without a BatchNorm record
        self.calibration: torch.Tensor | None = None  # inputs the running statistics are recomputed on
        self.calibration_batch = batchnorm.CALIBRATION_BATCH
        # next-character prediction (--dataset text): a (B, T, V) output is returned as (B, V, T), the layout of
        # cross_entropy's and argmax(1)'s K-dimensional case, so that every loss and count reads it as it reads
        # (B, classes) logits against (B, T) targets; runs.inputs.check_input_shape sets it from the data
        self.sequence = False
        self._version = 0  # bumped whenever the weights change, so calibrate knows its statistics are stale
        self._calibrated: _CalibrationKey | None = None

    def to(self, device: torch.device) -> MaskedNet:
        self.module.to(device)
        self.weights = {n: p.detach() for n, p in self.module.named_parameters()}
        self._version += 1
        return self

    @property
    def device(self) -> torch.device:
        return next(iter(self.weights.values())).device

    def shapes(self) -> dict[str, list[int]]:
        """Shapes of the masked parameters (a ticket's masks)."""
        return {n: list(self.weights[n].shape) for n in self.names}

    def param_shapes(self) -> dict[str, list[int]]:
        """Shapes of every parameter, masked or frozen."""
        return {n: list(w.shape) for n, w in self.weights.items()}

    def layers(self) -> dict[str, list[str]]:
        """Layer name -> its masked parameter names, in order."""
        out: dict[str, list[str]] = {}
        for n in self.names:
            out.setdefault(layer_of(n), []).append(n)
        return out

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.module.named_parameters():
                p.copy_(weights[n])
        self._version += 1

    def masked(self, masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """W * M for every masked parameter."""
        return {n: self.weights[n] * masks[n].to(self.weights[n].dtype) for n in self.names}

    def forward(self, x: torch.Tensor, masks: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Evaluation: W * M (or the module's own weights without masks), BatchNorm on running statistics."""
        with batchnorm.statistics(self.batchnorms, self.bn_statistics, "running"):
            if masks is None:
                out = cast(torch.Tensor, self.module(x))  # a Module call is typed Any
                return out.transpose(1, 2) if self.sequence else out
            return self._run(x, self.masked(masks))

    def forward_with(
        self, x: torch.Tensor, params: Mapping[str, torch.Tensor], *, batch_statistics: bool = True, **options: Any
    ) -> torch.Tensor:
        """Training: the module's forward with these tensors in place of its parameters, BatchNorm on the batch's
        statistics (`batch_statistics=False`: on the running ones, as SynFlow's data-free pass wants). `options`
        go to a built-in model's own forward_with (the MLP takes act= and trace=)."""
        if not self.batchnorms:
            return self._run(x, params, **options)
        if batch_statistics and self.bn_statistics != "frozen":
            batchnorm.check_batch(x.shape[0])
        with batchnorm.statistics(self.batchnorms, self.bn_statistics, "batch" if batch_statistics else "running"):
            return self._run(x, params, **options)

    def _run(self, x: torch.Tensor, params: Mapping[str, torch.Tensor], **options: Any) -> torch.Tensor:
        fast = getattr(self.module, "forward_with", None)  # our own models skip functional_call's overhead
        # both typed Any: a model's forward_with is found by name, functional_call returns what the module does
        out = cast(
            torch.Tensor,
            fast(x, params, **options) if fast is not None else functional_call(self.module, dict(params), (x,)),
        )
        return out.transpose(1, 2) if self.sequence else out

    def calibrate(self, masks: dict[str, torch.Tensor] | None, chunks: batchnorm.ChunkProgress | None = None) -> None:
        """Recompute BatchNorm's running statistics for these masks (None: the dense weights) and the current
        weights from `calibration`; a no-op without BatchNorm, outside recalibrate mode, or when neither masks
        nor weights changed since the last call. `chunks` is told the recalibration's chunks as they finish."""
        if not self.batchnorms or self.bn_statistics != "recalibrate":
            return
        key = (self._version, self.calibration, None if masks is None else [(m, m._version) for m in masks.values()])
        if self._calibrated is not None and _same_state(key, self._calibrated):
            return
        if self.calibration is None:
            raise RuntimeError("a BatchNorm network was evaluated before MaskedNet.calibration was set")
        params = None if masks is None else self.masked(masks)
        batchnorm.recalibrate(
            self.batchnorms,
            self.module if params is None else lambda c: self._run(c, params),
            self.calibration,
            self.calibration_batch,
            chunks,
        )
        self._calibrated = key

    __call__ = forward


# calibrate's key: (weights version, calibration inputs, [(mask, its in-place version)] or None for no masks)
_CalibrationKey = tuple[int, torch.Tensor | None, list[tuple[torch.Tensor, int]] | None]


def _same_state(a: _CalibrationKey, b: _CalibrationKey) -> bool:
    """calibrate's keys: same weights version, the very same calibration inputs and mask tensors (held, so their
    ids cannot be reused) at the same in-place version."""
    if a[0] != b[0] or a[1] is not b[1]:
        return False
    ma, mb = a[2], b[2]
    if ma is None or mb is None:
        return ma is None and mb is None
    return len(ma) == len(mb) and all(m is n and v == w for (m, v), (n, w) in zip(ma, mb))
