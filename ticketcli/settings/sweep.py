"""`ticket sweep-k`'s settings: extract's (settings/run.py), with the help that says what they do in a sweep (sweep-k
runs fixed methods, so no help names the methods that read an option), and its own, command-line-only options
(OWN: seeds, densities, layerwise draws, the oracle's band, workers, threads, executor)."""

from __future__ import annotations

from ticketcli.settings.run import RUN
from ticketcli.settings.setting import Panel, Setting, Table, show
from ticketcli.specs.ranges import INT

SHARED: tuple[str, ...] = ("sparsity", "model", "bias", "init", "init_k", "dataset", "text", "data_dir", "download")
SHARED += ("n_extract", "n_val", "epochs", "lr", "batch_size", "device", "max_params", "max_memory")
HELP = {
    "sparsity": "Requested sparsity of fixed edge-popup, random and the double-scoring methods.",
    "model": "Model spec, e.g. mlp:784-256-256-256-10, conv6, resnet20, wrn:16-4, vit:p4-d64-l4-h4 (as for extract).",
    "init_k": "fan_in scale k of the init.",
    "n_extract": "Extraction examples.",
    "n_val": "Validation examples.",
    "epochs": "Score-training epochs per run.",
}
M, S = Panel.METHOD, Panel.SCALE_OUT
SWEEP = RUN.pick(*SHARED, **{n: {"per_method": False, **({"help": HELP[n]} if n in HELP else {})} for n in SHARED})

# sweep-k's own options: the grid, the oracle's band, where it runs (command-line only; --threads is also read from
# the config file, as extract's key)
SEEDS = "0,1,2"
# the paper's grid and band (Appendix B, Section 6.3), declared here for the help and read by sweep/plan.py and
# sweep/summary.py
PAPER_DENSITIES = (0.01, 0.02, 0.05, 0.075, 0.10, 0.15, 0.20, 0.30, 0.40, 0.50, 0.65, 0.80)
PAPER_LAYERWISE = 8  # random layerwise tuples per seed
PAPER_BAND = (0.85, 0.95)  # the constrained oracle's achieved-sparsity band
OWN = Table(
    Setting("seeds", "Comma-separated seeds; each seed's runs share one initialisation.", M, str, default=SEEDS),
    Setting(
        "densities",
        "Comma-separated scalar keep densities for the edge-popup sweep, also the pool of the layerwise draws.",
        M,
        shown="the paper's " + ", ".join(show(d) for d in PAPER_DENSITIES),  # spaces: help wraps between them
    ),
    Setting(
        "layerwise",
        "Random layerwise keep-density tuples per seed, drawn from the density pool.",
        M,
        range=INT(0, 10_000),
        default=PAPER_LAYERWISE,
    ),
    Setting(
        "band",
        "Achieved-sparsity band LO-HI of the constrained validation oracle.",
        M,
        default="-".join(show(b) for b in PAPER_BAND),
    ),
    Setting(
        "workers",
        "Local worker processes (spawned); workers x threads must not exceed the CPU cores.",
        S,
        range=INT(1, 4096),
        default=1,
    ),
    RUN["threads"].but(
        help="Torch threads per run (config key threads); workers x threads must not exceed the CPU cores.",
        shown="1 per run, so that the results do not depend on --workers or the executor",
    ),
    Setting(
        "executor",
        # \\[ prints [: Rich would take [ray] for markup and drop it
        "local (a process pool of --workers) or ray (needs pip install 'ticketcli\\[ray]').",
        S,
        ("local", "ray"),
        default="local",
    ),
    Setting(
        "ray_address",
        "Ray cluster address for --executor ray (e.g. auto or ray://host:10001).",
        S,
        shown="a new local Ray instance",
    ),
)
OWN = Table(*(s.but(config=False) for s in OWN))
