"""`ticket drift`: train a model's weights from the seeded init and measure weight drift, negative pre-activations
and activation sparsity, with activation-sparsity control, ReLUfication and the sparsity-accuracy trade-off.

Its modules, by concern: `inputs` (the batches a run trains on), `sums` (float64 reductions), `sites` (the forward
pass with an activation at every site, and the per-layer measurements), `control` (top-k and percentile control),
`run` (one drift run and the mean over seeds), `rundir`, `state` and `keep` (--run-dir and --resume: the run dir's
files, the resumable state, checkpointing and restoring), `relufy`, `tradeoff` and `result` (the typed results and
their --json documents). Its specs are specs/drift.py, its flags' builder settings/drift_options.py, its activation
and loss registries models/activations.py, its corpora data/text.py and its feature views report/drift_views.py.

What it may import (tests/test_layers.py places the package among the workflows): the foundations, the building
blocks (models, data, training, the ticket file), `methods`' progress type and `runs` for rebuilding a ticket; never
reporting, settings or the command line. Nothing outside `cli/` imports this package, tests and benchmarks aside;
this file exports nothing.
"""
