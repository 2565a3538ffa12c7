"""`ticket sweep-k`'s run settings: extract's (settings/run.py), with the help that says what they do in a sweep.
sweep-k runs fixed methods, so no help names the methods that read an option; its own options (seeds, densities,
band, workers, executor) are command-line only and stay with the command (cli/sweep_k.py)."""

from __future__ import annotations

from ticketcli.settings.run import RUN

SHARED: tuple[str, ...] = ("sparsity", "model", "bias", "init", "init_k", "dataset", "data_dir", "download")
SHARED += ("n_extract", "n_val", "epochs", "lr", "batch_size", "device", "max_params", "max_memory")
HELP = {
    "sparsity": "Requested sparsity of fixed edge-popup, random and the double-scoring methods.",
    "model": "Model spec, e.g. mlp:784-256-256-256-10, conv6, resnet20, wrn:16-4, vit:p4-d64-l4-h4 (as for extract).",
    "init_k": "fan_in scale k of the init.",
    "n_extract": "Extraction examples.",
    "n_val": "Validation examples.",
    "epochs": "Score-training epochs per run.",
}
SWEEP = RUN.pick(*SHARED, **{n: {"methods": (), **({"help": HELP[n]} if n in HELP else {})} for n in SHARED})
