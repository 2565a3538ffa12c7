"""`ticket export --format onnx`: the masked network as an ONNX model through torch's dynamo-based exporter (one
named input and output, a dynamic batch dimension; gpt-nano's sequence length too), checked with onnxruntime against
the ticket's own network before it is written. Needs the `onnx` extra (onnx, onnxruntime, onnxscript), imported only
when an ONNX export runs."""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ticketcli.contract.schema import JsonObject
from ticketcli.data.registry import DATASETS, Normalization
from ticketcli.errors import UsageError
from ticketcli.models.gpt import gpt_numbers
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import text_model

ONNX_OPSET = 18  # the dynamo exporter's own default opset: every built-in model's operators are in it
ONNX_INPUT, ONNX_OUTPUT = "input", "logits"
ONNX_CHECK_BATCH = 3  # examples in the onnxruntime check, one more than the traced batch (the batch dim is dynamic)
ONNX_TOLERANCE = 1e-4  # onnxruntime's logits against torch's, relative to the logits' scale (at least 1)


def onnx_example(net: MaskedNet, dataset: str, batch: int, seed: int) -> torch.Tensor:
    """`batch` inputs of the shape and dtype the network takes: character ids (int64, the full context) for
    gpt-nano, else float32 examples of the ticket's dataset's shape (for a caller's own data: the model spec's
    @CxHxW, or flat examples as wide as a first Linear layer)."""
    model = net.spec
    assert model is not None  # runs_build.rebuild records the ticket's parsed model spec
    first = net.weights[net.names[0]] if net.names else None
    g = torch.Generator().manual_seed(seed)
    if text_model(model.arch):
        n = gpt_numbers(model)  # the vocabulary and the context
        return torch.randint(0, n["v"], (batch, n["c"]), generator=g)
    shape: tuple[int, ...]
    if dataset in DATASETS:
        shape = DATASETS.get(dataset).shape
    elif model.input is not None:
        shape = model.input
    elif first is not None and first.dim() == 2:  # a Linear first (the MLPs): flat examples of its width
        shape = (first.shape[1],)
    else:
        raise UsageError(
            f"cannot tell the input shape of model {model.to_string()[:80]}: the ticket's data "
            f"({dataset[:40]!r}) is not a known dataset and the spec gives no @CxHxW-K"
        )
    return torch.randn(batch, *shape, generator=g)


def raw_example(dataset: str, batch: int, seed: int) -> torch.Tensor:
    """`batch` raw inputs of a registered dataset's shape, uniform in [0, 1] (what --with-preprocessing's graph
    takes)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, *DATASETS.get(dataset).shape, generator=g)


def normalized(x: torch.Tensor, norm: Normalization) -> torch.Tensor:
    """Raw (N, C, H, W) inputs as the dataset's loader normalises them: (raw - mean) / std per channel."""
    channels = len(norm.mean)
    mean = torch.tensor(norm.mean, dtype=x.dtype).view(1, channels, 1, 1)
    std = torch.tensor(norm.std, dtype=x.dtype).view(1, channels, 1, 1)
    return (x - mean) / std


class Preprocessed(nn.Module):
    """The network behind the dataset's normalisation, (raw - mean) / std per channel: the graph
    --with-preprocessing exports."""

    mean: torch.Tensor  # buffers, (1, C, 1, 1)
    std: torch.Tensor

    def __init__(self, module: nn.Module, norm: Normalization):
        super().__init__()
        self.network = module
        shape = (1, len(norm.mean), 1, 1)
        self.register_buffer("mean", torch.tensor(norm.mean, dtype=torch.float32).view(shape))
        self.register_buffer("std", torch.tensor(norm.std, dtype=torch.float32).view(shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.network((x - self.mean) / self.std)
        return out


@dataclass(frozen=True)
class OnnxInfo:
    """An onnx export's graph signature (dimension names for the dynamic ones) and its onnxruntime check."""

    opset: int
    input: str
    input_shape: tuple[int | str, ...]
    input_dtype: str
    output: str
    output_shape: tuple[int | str, ...]
    max_abs_diff: float  # onnxruntime's logits against the ticket's network, on a batch of synthetic inputs

    def to_dict(self) -> JsonObject:
        """The `onnx` object."""
        return {
            "opset": self.opset,
            "input": {"name": self.input, "shape": list(self.input_shape), "dtype": self.input_dtype},
            "output": {"name": self.output, "shape": list(self.output_shape)},
            "max_abs_diff": self.max_abs_diff,
        }


@contextlib.contextmanager
def quiet_loggers() -> Iterator[None]:
    """torch's exporter and onnxscript log warnings and tracing details through `logging`; only errors pass."""
    loggers = [logging.getLogger(name) for name in ("torch", "onnxscript", "onnx_ir")]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, saved):
            logger.setLevel(level)


def root_cause(e: BaseException) -> str:
    """The innermost exception of a chain (the exporter wraps torch.export's own error in its step report) as
    `Type: its first line`, terminal colours removed."""
    seen = {id(e)}
    while (inner := e.__cause__ or e.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        e = inner
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(e).__name__}: {first[:200]}"


def onnx_bytes(
    net: MaskedNet,
    state: dict[str, torch.Tensor],
    example: torch.Tensor,
    metadata: dict[str, str],
    norm: Normalization | None = None,
) -> tuple[bytes, int]:
    """The masked network (W * M in eval mode: BatchNorm on its running statistics, as evaluate runs it) as a
    serialized ONNX model, input and output named, the batch dimension dynamic (and gpt-nano's sequence length, up
    to its context); returns it with its initializer count. `state` is the
    masked state dict (W * M) loaded into a copy of the module; with `norm`, the graph takes raw inputs and
    normalises them first (Preprocessed). A network torch.onnx.export cannot trace is refused in one line."""
    import onnx

    module: nn.Module = copy.deepcopy(net.module).cpu().eval()
    module.load_state_dict(state)
    if norm is not None:
        module = Preprocessed(module, norm).eval()
    assert net.spec is not None  # runs_build.rebuild records the ticket's parsed model spec
    dims: dict[int, Any] = {0: torch.export.Dim("batch")}
    if text_model(net.spec.arch):
        dims[1] = torch.export.Dim("sequence", min=1, max=int(example.shape[1]))
    try:  # the exporter prints its progress and warns about its internals: none of it is ours to show
        with (
            warnings.catch_warnings(),
            quiet_loggers(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                (example,),
                dynamo=True,
                input_names=[ONNX_INPUT],
                output_names=[ONNX_OUTPUT],
                dynamic_shapes=(dims,),
                opset_version=ONNX_OPSET,
                external_data=False,
                verbose=False,
            )
            assert program is not None  # f=None: the exporter returns its ONNXProgram
            proto = program.model_proto
    except Exception as e:  # whatever the exporter raises on a network it cannot trace
        raise UsageError(
            f"model {net.spec.to_string()[:80]} cannot be exported to ONNX: {root_cause(e)}",
            hint="torch.onnx.export (dynamo) must be able to trace its forward pass; the other formats need no trace",
        ) from None
    onnx.helper.set_model_props(proto, metadata)
    return proto.SerializeToString(), len(proto.graph.initializer)


def check_onnx(
    data: bytes,
    net: MaskedNet,
    masks: dict[str, torch.Tensor],
    x: torch.Tensor,
    threads: int,
    norm: Normalization | None = None,
) -> OnnxInfo:
    """Run the serialized model with onnxruntime on `x` against the ticket's own network (MaskedNet.forward; with
    `norm`, `x` is raw and the network gets it normalised); a model whose logits differ beyond ONNX_TOLERANCE
    (relative to their scale) is refused before it is written."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    onnx.checker.check_model(onnx.load_from_string(data))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # errors only: its warnings about the graph are not the user's
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    with torch.no_grad():
        expected = net.forward(x if norm is None else normalized(x, norm), masks).numpy()
    got = session.run([ONNX_OUTPUT], {ONNX_INPUT: x.numpy()})[0]
    diff = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    assert net.spec is not None
    if not diff <= ONNX_TOLERANCE * max(1.0, float(np.abs(expected).max())):
        raise UsageError(
            f"model {net.spec.to_string()[:80]}: its ONNX graph does not reproduce the network (onnxruntime's "
            f"logits {tuple(got.shape)} differ from torch's {tuple(expected.shape)} by {diff:.3g}); nothing written",
            hint="a forward pass whose control flow depends on the input's values cannot be traced faithfully",
        )
    i, o = session.get_inputs()[0], session.get_outputs()[0]
    return OnnxInfo(
        ONNX_OPSET,
        i.name,
        tuple(i.shape),
        str(x.dtype).removeprefix("torch."),
        o.name,
        tuple(o.shape),
        diff,
    )
