"""`ticket drift`: train a model's weights from the seeded init and measure weight drift, negative pre-activations
and activation sparsity, with activation-sparsity control, ReLUfication and the sparsity-accuracy trade-off.

Its modules, by concern: `spec` (the frozen specs, every default written once as their fields, and the flags'
choices), `options` (the command's one builder: flags to validated specs), `activations` (the activation and
loss registries), `text` (character-level corpora), `inputs` (the batches a run trains on), `sums` (float64
reductions), `sites` (the forward pass with an activation at every site, and the per-layer measurements),
`control` (top-k and percentile control), `run` (one drift run and the mean over seeds), `relufy`, `tradeoff`,
`result` (the typed results and their --json documents) and `views` (the features' tables and plots).

What it may import (tests/test_layers.py places each module): `spec` only the torch-free foundations (`specs`,
`errors`), so that the command line reads defaults and choices for --help without torch; `sums` and `text` the
standard library, torch, numpy and the foundations; the workflow modules also the building blocks (models, data,
training, the ticket file), `methods`' progress type and `runs` for rebuilding a ticket; `views` also `report`;
`options` also the registries. Nothing outside `cli/` imports this package, tests and benchmarks aside; this file
exports nothing.
"""
