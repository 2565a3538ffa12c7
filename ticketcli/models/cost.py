"""What a built-in model costs, worked out from its spec alone in microseconds (no module is built, not even on the
meta device): its parameters, buffers, depth and the activations of one forward and backward pass, and the bytes
these come to at a run's batch sizes. budget.py weighs the estimate against a run's limits.

The arithmetic follows the builders (models/mlp.py, conv.py, resnet.py, vit.py, gpt.py) and
tests/test_budget.py checks it against every registered model: parameter and buffer counts exactly, activations
against the tensors autograd really saves. A user's factory (pkg.module:function) cannot be estimated from its
spec; it is counted once built (runs/build.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ticketcli.errors import UsageError
from ticketcli.specs import catalog
from ticketcli.specs.run import ModelSpec
from ticketcli.specs.syntax import BUILTIN_SPEC, FACTORY_SPEC, GPT_BODY, VIT_BODY, spec_text

FLOAT = 4  # bytes of a float32 element: weights, activations and their gradients
HELD_BYTES_PER_PARAM = 16  # any command: the weights, their initial copy, the mask and the masked weights W * M
TRAINED_BYTES_PER_PARAM = 48  # a command that trains: + scores or weights, their gradient, Adam's two moments
EVAL_BATCH = 2048  # examples per evaluation forward pass (train.EVAL_CHUNK; a test keeps them equal)
FIXED_BYTES = 64 << 20  # what a run holds besides the model (interpreter objects, small tensors): not counted


@dataclass(frozen=True)
class Estimate:
    """A built-in model's cost. Activations are float32 elements per example: `saved` what one forward pass keeps
    for the backward pass (every intermediate tensor, attention's T x T scores included), `largest` the biggest
    single intermediate (a forward pass without gradients holds a few of these at a time)."""

    params: int
    buffer_bytes: int  # BatchNorm statistics, fixed position embeddings
    depth: int  # layers or blocks built one module each
    saved: int
    largest: int
    fixed_bytes: int = 0  # per-run tensors independent of the batch (a causal attention mask)

    def training_bytes(self, batch: int) -> int:
        """Activations of one training step: its saved tensors plus two gradients of the largest one in flight."""
        return FLOAT * batch * (self.saved + 2 * self.largest)

    def evaluation_bytes(self, batch: int) -> int:
        """Activations of one forward pass without gradients: three of the largest intermediate at a time."""
        return FLOAT * batch * 3 * self.largest

    def activation_bytes(self, train_batch: int, eval_batch: int) -> int:
        """Peak activation memory: a training step at train_batch (0: none) or an evaluation pass, the larger."""
        return max(self.training_bytes(train_batch), self.evaluation_bytes(eval_batch)) + self.fixed_bytes

    def memory_bytes(self, train_batch: int = 0, eval_batch: int = EVAL_BATCH) -> int:
        """Parameters (with the copies a run keeps of them), buffers and activations, in bytes."""
        per_param = TRAINED_BYTES_PER_PARAM if train_batch else HELD_BYTES_PER_PARAM
        return self.params * per_param + self.buffer_bytes + self.activation_bytes(train_batch, eval_batch)


class _Cost:
    """The running totals of an estimate, layer by layer (per example for activations)."""

    def __init__(self) -> None:
        self.params = self.buffer_bytes = self.depth = self.saved = self.largest = self.fixed_bytes = 0

    def act(self, elements: int, times: int = 1) -> None:
        self.saved += elements * times
        self.largest = max(self.largest, elements)

    def linear(self, a: int, b: int, bias: bool, tokens: int = 1) -> None:
        self.params += a * b + (b if bias else 0)
        self.act(b * tokens)

    def conv(self, cin: int, cout: int, k: int, bias: bool, hw: int) -> None:
        self.params += cin * cout * k * k + (cout if bias else 0)
        self.act(cout * hw)

    def batchnorm(self, channels: int, hw: int = 1) -> None:
        self.buffer_bytes += 2 * FLOAT * channels + 8  # running mean and variance, num_batches_tracked (int64)
        self.act(channels * hw)

    def done(self) -> Estimate:
        return Estimate(self.params, self.buffer_bytes, self.depth, self.saved, self.largest, self.fixed_bytes)


def _mlp(widths: tuple[int, ...], bias: bool, residual: bool = False, norm: str | None = None) -> Estimate:
    c = _Cost()
    c.depth = len(widths) - 1
    c.act(widths[0])  # the flattened input
    last = len(widths) - 2
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        c.linear(a, b, bias)
        if i == last:
            c.act(b)  # the loss's log-softmax
            break
        if norm == "batch":
            c.batchnorm(b)
        elif norm is not None:
            c.act(b)
        c.act(b)  # the activation
        if residual and 1 <= i and widths[i] == b:
            c.act(b)  # the identity skip's sum
    return c.done()


def _convnet(
    layers: tuple[str, ...], head: tuple[int, ...], shape: tuple[int, int, int], k: int, bias: bool
) -> Estimate:
    c = _Cost()
    ch, h, w = shape
    c.act(ch * h * w)
    for item in layers:
        if item == "M":
            if h < 2 or w < 2:  # as models.conv.ConvNet refuses it
                raise UsageError(
                    f"a {shape[1]}x{shape[2]} input is too small for {len(layers)} layers "
                    f"with {layers.count('M')} 2x2 max-pools"
                )
            h, w = h // 2, w // 2
            c.act(ch * h * w, 3)  # the pooled output and its int64 indices
        else:
            c.conv(ch, int(item), 3, bias, h * w)
            ch = int(item)
            c.act(ch * h * w)  # ReLU
        c.depth += 1
    widths = (ch * h * w, *head, k)
    for a, b in zip(widths[:-1], widths[1:]):
        c.linear(a, b, bias)
        c.act(b)  # ReLU, or the loss's log-softmax after the last
        c.depth += 1
    return c.done()


def _half(n: int) -> int:
    """A side after a stride-2 convolution (3x3 with padding 1, or 1x1): ceil(n / 2)."""
    return (n + 1) // 2


def _resnet(
    widths: tuple[int, ...], blocks: tuple[int, ...], shape: tuple[int, int, int], k: int, bias: bool
) -> Estimate:
    c = _Cost()
    ch, h, w = shape
    c.act(ch * h * w)
    c.conv(ch, widths[0], 3, bias, h * w)
    c.batchnorm(widths[0], h * w)
    c.act(widths[0] * h * w)
    cin = widths[0]
    for i, (width, n) in enumerate(zip(widths, blocks)):
        for j in range(n):
            if i > 0 and j == 0:
                h, w = _half(h), _half(w)
            c.conv(cin, width, 3, bias, h * w)
            c.batchnorm(width, h * w)
            c.act(width * h * w)  # ReLU
            c.conv(width, width, 3, bias, h * w)
            c.batchnorm(width, h * w)
            if (i > 0 and j == 0) or cin != width:
                c.conv(cin, width, 1, bias, h * w)
                c.batchnorm(width, h * w)
            c.act(width * h * w, 2)  # the residual sum and its ReLU
            cin = width
            c.depth += 1
    c.act(cin)  # global average pooling
    c.linear(cin, k, bias)
    c.act(k)
    return c.done()


def _wide_block(c: _Cost, cin: int, cout: int, stride: int, bias: bool, hw_in: int, hw_out: int, times: int) -> None:
    """`times` identical WideBlocks at once (a stage's blocks after its first are all alike): O(1) in the depth."""
    if times <= 0:
        return
    one = _Cost()
    one.batchnorm(cin, hw_in)
    one.act(cin * hw_in)  # ReLU
    one.conv(cin, cout, 3, bias, hw_out)
    one.batchnorm(cout, hw_out)
    one.act(cout * hw_out)  # ReLU
    one.conv(cout, cout, 3, bias, hw_out)
    if stride != 1 or cin != cout:
        one.conv(cin, cout, 1, bias, hw_out)
    one.act(cout * hw_out)  # the residual sum
    c.params += one.params * times
    c.buffer_bytes += one.buffer_bytes * times
    c.saved += one.saved * times
    c.largest = max(c.largest, one.largest)
    c.depth += times


def _wrn(depth: int, k: int, shape: tuple[int, int, int], classes: int, bias: bool) -> Estimate:
    c = _Cost()
    n = (depth - 4) // 6
    ch, h, w = shape
    c.act(ch * h * w)
    c.conv(ch, 16, 3, bias, h * w)
    cin = 16
    for i, width in enumerate((16 * k, 32 * k, 64 * k)):
        stride = 2 if i > 0 else 1
        h2, w2 = (_half(h), _half(w)) if stride == 2 else (h, w)
        if n > 0:
            _wide_block(c, cin, width, stride, bias, h * w, h2 * w2, 1)
            _wide_block(c, width, width, 1, bias, h2 * w2, h2 * w2, n - 1)
            cin, h, w = width, h2, w2
    c.batchnorm(cin, h * w)
    c.act(cin * h * w)  # ReLU
    c.act(cin)  # global average pooling
    c.linear(cin, classes, bias)
    c.act(classes)
    return c.done()


def _blocks(c: _Cost, dim: int, heads: int, ratio: int, depth: int, tokens: int, bias: bool, causal: bool) -> None:
    """`depth` transformer blocks over `tokens` tokens (models.vit.Block), at once."""
    one = _Cost()
    one.act(dim * tokens)  # norm1
    one.linear(dim, 3 * dim, bias, tokens)  # qkv
    one.act(dim * tokens, 2)  # q and k made contiguous for the product
    one.act(heads * tokens * tokens, 4 if causal else 3)  # scores, scaled, (masked), softmax
    one.act(dim * tokens, 2)  # weights @ v, and its heads merged back
    one.linear(dim, dim, bias, tokens)  # proj
    one.act(dim * tokens, 2)  # the residual sum, norm2
    one.linear(dim, ratio * dim, bias, tokens)  # fc1
    one.act(ratio * dim * tokens)  # GELU
    one.linear(ratio * dim, dim, bias, tokens)  # fc2
    one.act(dim * tokens)  # the residual sum
    c.params += one.params * depth
    c.saved += one.saved * depth
    c.largest = max(c.largest, one.largest)
    c.depth += depth


def _vit(spec: ModelSpec, shape: tuple[int, int, int], classes: int) -> Estimate:
    m = re.fullmatch(VIT_BODY, "-".join(spec.layers))
    if m is None:
        raise UsageError(f"invalid vit arguments {'-'.join(spec.layers)[:80]!r}")
    patch, dim, depth, heads, ratio = (int(v) if v is not None else 4 for v in m.groups())
    bias = spec.bias
    ch, h, w = shape
    if spec.input is not None and (h % patch or w % patch):  # as models.vit.build_vit refuses it
        raise UsageError(
            f"model {spec.to_string()}: {patch}x{patch} patches do not tile {h}x{w} inputs (shape {shape})",
            hint="choose a patch size that divides the image's height and width",
        )
    tokens = (h // patch) * (w // patch)
    c = _Cost()
    c.act(ch * h * w)
    c.conv(ch, dim, patch, bias, tokens)
    c.buffer_bytes += FLOAT * tokens * dim  # the sin-cos position embedding
    c.act(dim * tokens)  # + position embedding
    _blocks(c, dim, heads, ratio, depth, tokens, bias, causal=False)
    c.act(dim * tokens)  # final norm
    c.act(dim)  # mean over tokens
    c.linear(dim, classes, bias)
    c.act(classes)
    return c.done()


def _gpt(layers: tuple[str, ...], bias: bool) -> Estimate:
    m = re.fullmatch(GPT_BODY, "-".join(layers))
    if m is None:
        raise UsageError(f"invalid gpt-nano arguments {'-'.join(layers)[:80]!r}")
    n = {k: int(v) for k, v in zip("ldhcmv", m.groups()) if v is not None}
    depth, dim, heads, context, ratio = n["l"], n["d"], n["h"], n["c"], n.get("m", 4)
    vocab = n.get("v", 256)  # filled in from the text's characters later; 256 bounds a byte-level one
    c = _Cost()
    c.params += vocab * dim  # the token embedding (no bias)
    c.buffer_bytes += FLOAT * context * dim  # the sin-cos position embedding
    c.fixed_bytes += 2 * context * context  # the causal mask and its complement (bool)
    c.act(context, 2)  # the character ids (int64)
    c.act(dim * context, 2)  # embedding, + position embedding
    _blocks(c, dim, heads, ratio, depth, context, bias, causal=True)
    c.act(dim * context)  # final norm
    c.linear(dim, vocab, bias, context)  # head
    c.act(vocab * context)  # the loss's log-softmax
    return c.done()


CONV_HEAD = (256, 256)  # conv2/4/6's fully connected head (models/conv.py)
RESNETS = {"resnet20": ((16, 32, 64), (3, 3, 3)), "resnet18": ((64, 128, 256, 512), (2, 2, 2, 2))}


def estimate(spec: ModelSpec) -> Estimate | None:
    """The cost of a built-in model from its spec alone; None for a user's factory (known only once built).
    A spec whose geometry is still open (no @CxHxW-K) is estimated as if for a 1x1x1 input and 1 class."""
    if spec.arch == "user":
        return None
    shape, classes = spec.input or (1, 1, 1), spec.classes or 1
    if spec.arch == "mlp":
        return _mlp(spec.widths, spec.bias, spec.residual, spec.norm)
    if spec.arch == "lenet300":
        return _mlp((math.prod(shape), 300, 100, classes), spec.bias)
    if spec.arch in ("conv2", "conv4", "conv6"):
        layers = ("64", "64", "M", "128", "128", "M", "256", "256", "M")[: 3 * int(spec.arch[-1]) // 2]
        return _convnet(layers, CONV_HEAD, shape, classes, spec.bias)
    if spec.arch == "vgg":
        return _convnet(spec.layers, (), shape, classes, spec.bias)
    if spec.arch in RESNETS:
        return _resnet(*RESNETS[spec.arch], shape, classes, spec.bias)
    if spec.arch == "wrn":
        depth, k = (int(v) for v in spec.layers)
        return _wrn(depth, k, shape, classes, spec.bias)
    if spec.arch == "vit":
        return _vit(spec, shape, classes)
    if spec.arch == "gpt-nano":
        return _gpt(spec.layers, spec.bias)
    raise UsageError(f"no cost estimate for model {spec.arch!r}")  # a registered model without one: a test fails


def declared_params(text: str) -> int | None:
    """The parameter count of the built-in model a spec string names (a ticket's `model.spec`), torch-free; None
    for a factory or a spec that does not parse (refused with its own message when the model is rebuilt)."""
    try:
        t = spec_text(text)
        factory = FACTORY_SPEC.fullmatch(t)
        if factory and factory.group(1).partition(":")[0] not in catalog.MODELS:
            return None
        m = BUILTIN_SPEC.fullmatch(t)
        if m is None or m.group(1) not in catalog.MODELS:
            return None
        spec = ModelSpec.from_builtin(t, m)
        if not spec.resolved and spec.arch != "mlp":
            return None
        est = estimate(spec)
    except UsageError:
        return None
    return None if est is None else est.params
