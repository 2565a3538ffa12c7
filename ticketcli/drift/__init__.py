"""`ticket drift`: train a model's weights from the seeded init and measure weight drift, negative pre-activations
and activation sparsity, with activation-sparsity control, ReLUfication and the sparsity-accuracy trade-off.

Its modules, by concern: `spec` (the frozen specs and every default, torch-free), `options` (flags to validated
specs), `activations` (the activation and loss registries), `text` (character-level corpora), `inputs` (the
batches a run trains on), `sums` (exact float64 reductions), `sites` (the forward pass with an activation at every
site and the per-layer measurements), `control` (top-k and percentile control), `run` (one drift run and the mean
over seeds), `relufy`, `tradeoff` and `views` (the features' tables and plots).

What it may import: the standard library, torch, numpy and the layers below the workflows (foundations, building
blocks, `methods`' progress type, `runs` for rebuilding a ticket); `views` also `report`; `options` also the
registries. Nothing outside `cli/` imports this package except tests and benchmarks; this file exports nothing.
"""
