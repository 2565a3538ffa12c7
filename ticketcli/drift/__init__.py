"""`ticket drift`, whole: train a model's weights from the seeded init and measure weight drift, negative
pre-activations and activation sparsity, with activation-sparsity control, ReLUfication and the sparsity-accuracy
trade-off.

Its modules, by concern: `spec` (its specs, every default, torch-free), `activations` (the ACTIVATIONS and LOSSES
registries, torch-free), `settings` (its flags, each checked by its setting, torch-free for --help), `options` (the
flags checked together into a DriftRequest and its DriftSpecs), `command` (the command's workflow from its flags to
a result), `inputs` (the batches a run trains on), `sums` (float64 reductions), `sites` (the forward pass with an
activation at every site, and the per-layer measurements), `control` (top-k and percentile control), `run` (one
drift run and the mean over seeds), `rundir`, `runflags`, `state` and `keep` (--run-dir and --resume: the run dir's
files, the flags it records, the resumable state, checkpointing and restoring), `relufy`, `tradeoff`, `result` (the
typed results and their --json documents, whose JSON Schemas ship in `schemas/`), `views` (tables and plots) and
`feed` (what --log-to logs). Its corpora are data/text.py's.

What it may import (tests/test_layers.py places the package above presentation and the trackers): the foundations,
the building blocks, settings, the workflows' `runs` for rebuilding a ticket, `report` and `track`; never the
command line. Nothing outside `cli/` and `api/` imports this package, tests and benchmarks aside; this file exports
nothing.
"""
