"""What a built-in model costs, in the terms every family's cost is written in: `Estimate` (its parameters, buffers,
depth and the activations of one forward and backward pass, and the bytes these come to at a run's batch sizes)
and `Cost`, the running totals a family's cost function adds layers to.

Each family works out its own cost from its spec alone, in microseconds (no module is built, not even on the meta
device), beside its grammar (models/<family>_family.py); models.registry.estimate asks the family, budget.py
weighs the estimate against a run's limits, and tests/test_budget.py checks every registered family against its
built model: parameter and buffer counts exactly, activations against the tensors autograd really saves. A user's
factory (pkg.module:function) cannot be estimated from its spec; it is counted once built (runs/build.py)."""

from __future__ import annotations

from dataclasses import dataclass

FLOAT = 4  # bytes of a float32 element: weights, activations and their gradients
HELD_BYTES_PER_PARAM = 16  # any command: the weights, their initial copy, the mask and the masked weights W * M
TRAINED_BYTES_PER_PARAM = 48  # a command that trains: + scores or weights, their gradient, Adam's two moments
EVAL_BATCH = 2048  # examples per evaluation forward pass (train.EVAL_CHUNK; a test keeps them equal)


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

    def memory_bytes(self, train_batch: int = 0, eval_batch: int = EVAL_BATCH) -> int:
        """Parameters (with the copies a run keeps of them), buffers and activations, in bytes."""
        per_param = TRAINED_BYTES_PER_PARAM if train_batch else HELD_BYTES_PER_PARAM
        # the peak of activations: a training step at train_batch (0: none) or an evaluation pass, the larger
        activations = max(self.training_bytes(train_batch), self.evaluation_bytes(eval_batch)) + self.fixed_bytes
        return self.params * per_param + self.buffer_bytes + activations


class Cost:
    """The running totals of an estimate, layer by layer (per example for activations); `many` adds `times`
    identical copies of a part at once, so that a cost stays constant-time in the depth."""

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

    def many(self, part: Cost, times: int) -> None:
        self.params += part.params * times
        self.buffer_bytes += part.buffer_bytes * times
        self.saved += part.saved * times
        self.largest = max(self.largest, part.largest)
        self.depth += times

    def done(self) -> Estimate:
        return Estimate(self.params, self.buffer_bytes, self.depth, self.saved, self.largest, self.fixed_bytes)
