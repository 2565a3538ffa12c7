"""`ticket sweep-k`: edge-popup over scalar and layerwise keep densities vs double-scoring, one independent extraction
per run, resumable from --out-dir, and the paper's Section 6.3 stability summary.

Its modules, by concern: `options` (sweep-k's own options checked, and the settings a sweep reports), `plan` (the
grid: every run of a sweep as a `SweepTask`, in a fixed order, and the paper's density pool), `execute` (running the
tasks: one extraction at a fixed torch thread count, in-process, in a local spawn pool or on Ray), `records` (each
finished run in --out-dir: its ticket and JSON record, written and read back for resuming), `outputs` (the note of
the files a sweep wrote, which it may replace without --force, the folder's lock, and bounded JSON reads), `claims`
(each run claimed before it starts, so two sweeps on one --out-dir share the runs), `summary` (the stability table:
the edge-popup range, the oracles, mean and std over seeds; torch-free) and `run` (a whole sweep: resume, check,
run, keep, summarise).

What it may import (tests/test_layers.py places each module): `summary` only the standard library, so the command
line reads its default band for --help without torch; the others the foundations, the building blocks (models, the
ticket file, the pool), the methods' registry and `runs` (one extraction per task). Nothing outside `cli/` and
`api/` imports this package, tests and benchmarks aside; this file exports nothing.
"""
