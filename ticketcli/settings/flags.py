"""Each command's command-line-only options (config=False: no config key, no API keyword): where its outputs go,
whether to overwrite them, its gates and output modes, and the ones every command or several share (--json,
--quiet, --force, --rendezvous-timeout), declared once like the run settings so that help, panel and default
come from one place. A command reads them as typed parameters (cli.declared's `flags=`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ticketcli.runtime.world import RENDEZVOUS_TIMEOUT_S
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.bench import CLOCKS as BENCH_CLOCKS
from ticketcli.specs.bench import FORMS as BENCH_FORMS
from ticketcli.specs.bench import BenchSpec
from ticketcli.specs.ranges import FLOAT, Range, Worded

OUT, SCALE, M = Panel.OUTPUT, Panel.SCALE_OUT, Panel.MODEL


def flag(name: str, help: str, panel: str, kind: Any = None, range: Range | None = None, **more: Any) -> Setting:
    """A command-line-only setting (kind None: what its range holds, text without one)."""
    return Setting(name, help, panel, kind, range, config=False, **more)


def checkpoint_every(unit: str, help: str, shown: str) -> Setting:
    """--checkpoint-every N: a resumable state every N epochs or steps (`unit`), at least 1."""
    every = Worded("int", 1, None, words=f"must be >= 1 {unit}", described="an integer >= 1")
    return flag("checkpoint_every", help, SCALE, int, every, shown=shown)


JSON = flag("json_out", "Print exactly one JSON document on stdout instead of tables.", OUT, bool, flag_name="--json")
QUIET = flag("quiet", "No progress bar.", OUT, bool)
OUTPUTS = Table(JSON, QUIET)  # every command takes both (the commands without progress accept --quiet for scripts)
FORCE = flag("force", "Overwrite --out if it exists.", OUT, bool)
RENDEZVOUS = flag(
    "rendezvous_timeout",
    "Under torchrun: how long each process waits for all the others to join before giving up with one error line "
    "(exit 2); a signal ends the wait at once.",
    SCALE,
    float,
    shown=f"{RENDEZVOUS_TIMEOUT_S:g}",
    metavar="SECONDS",
)
FRACTION = Worded("float", 0, 1, words="must lie in [0, 1] (a fraction)", described="a fraction in [0, 1]")

EXTRACT_FLAGS = Table(
    flag(
        "config",
        "TOML file (at most 1 MiB) with any of these options (underscored names), each checked against the same "
        "range as its flag (manual: docs/guide/extract.md, Config files and value ranges); flags override it.",
        Panel.METHOD,
        Path,
    ),
    flag("out", "Where to write the ticket.", OUT, Path, default=Path("ticket.safetensors")),
    FORCE.but(help="Overwrite --out (and OUT.ckpt, with --checkpoint-every) if it exists."),
    checkpoint_every(
        "epoch",
        "Save resumable state to OUT.ckpt every N epochs (atomically; removed once the ticket is written; an "
        "existing OUT.ckpt is only read with --resume, replaced only with --force).",
        "no checkpoints",
    ),
    flag(
        "resume",
        "Continue from OUT.ckpt (same options required); the masks come out bit-identical to an uninterrupted run. "
        "Without a checkpoint the run starts from the beginning.",
        SCALE,
        bool,
    ),
    flag(
        "global_old", "Deprecated spelling of --global-topk.", Panel.VARIANTS, bool, flag_name="--global", hidden=True
    ),
    RENDEZVOUS,
    *OUTPUTS,
)

AGGREGATE = flag(
    "aggregate",
    "For a folder (a glob, several files): also group the tickets over their seeds, one row per method, model "
    "and requested sparsity (runs made with --match-sparsity: per folder they were matched in), with the mean and "
    "standard deviation of the achieved sparsity and the accuracies (the table shows the groups instead of the "
    "tickets; --json adds `aggregate`; --csv writes the groups).",
    OUT,
    bool,
)

COMPARE_FLAGS = Table(
    AGGREGATE,
    flag("plot", "Write a PNG: the pairwise mask overlap (Jaccard) as a heat map.", OUT, Path, shown="no plot"),
    FORCE.but(help="Overwrite --plot if it exists."),
    JSON,
    QUIET,
)

EVALUATE_FLAGS = Table(
    flag(
        "min_accuracy",
        "Exit with code 1 if the test accuracy is below this (a fraction, e.g. 0.8).",
        OUT,
        range=FRACTION,
    ),
    flag(
        "max_drop",
        "Exit with code 1 if the test accuracy is more than this below the one stored in the ticket (a fraction, "
        "e.g. 0.005): a check that the ticket reproduces on this machine and torch.",
        OUT,
        range=FRACTION,
    ),
    AGGREGATE,
    flag(
        "max_bits_per_char",
        "A language model's ticket (--dataset text): exit with code 1 if the test loss is above this many bits "
        "per character (e.g. 2.5); for a folder, each ticket is gated, and one without bits per character (an "
        "image model's) fails.",
        OUT,
        range=FLOAT(0, math.inf, lo_open=True, hi_open=True),
    ),
    flag(
        "csv_out",
        "For a folder (a glob, several files): print one CSV line per ticket on stdout instead of the table (with "
        "--aggregate: one per group).",
        OUT,
        bool,
        flag_name="--csv",
    ),
    *OUTPUTS,
)

INSPECT_FLAGS = Table(
    JSON,
    AGGREGATE,
    flag(
        "plot",
        "Write a PNG of one ticket: each layer's density and, for a convolution, its kept-filter map (the share of "
        "each output x input kernel kept).",
        OUT,
        Path,
        shown="no plot",
    ),
    FORCE.but(help="Overwrite --plot if it exists."),
    flag(
        "csv_out",
        "Print the one-row-per-ticket listing as CSV on stdout (also for a single ticket).",
        OUT,
        bool,
        flag_name="--csv",
    ),
    flag(
        "command",
        "Print the `ticket extract` command line that reproduces the ticket from its recorded settings.",
        OUT,
        bool,
    ),
    flag(
        "toml",
        "Print the --config TOML file that reproduces the ticket (after the command with --command).",
        OUT,
        bool,
    ),
    QUIET,
)

EXPORT_FORMATS = ("masked", "prune", "csr", "masks", "onnx", "sparse")
EXPORT_LAYOUTS = ("auto", "csr", "bsr", "2:4")  # export/request.py's LAYOUTS
EXPORT_FLAGS = Table(
    flag(
        "format",
        "masked: W*M state dict for plain load_state_dict; prune: torch.nn.utils.prune layout (<name>_orig + "
        "<name>_mask); csr: per-layer crow/col/values + a size report; masks: unpacked bool masks keyed by parameter "
        "name; onnx: the masked network as an ONNX model (input 'input', output 'logits', dynamic batch), checked "
        "with onnxruntime (needs the onnx extra); sparse: the sparse runtime form, CSR where a layer measured faster "
        "sparse than dense on this CPU (safetensors; tc.load_sparse reads it).",
        OUT,
        EXPORT_FORMATS,
        Range("choice", choices=EXPORT_FORMATS),
        required=True,
    ),
    flag(
        "out",
        "Where to write: .safetensors for safetensors, anything else (e.g. .pt) for a torch.save state dict; .onnx "
        "for --format onnx.",
        OUT,
        Path,
        required=True,
    ),
    flag(
        "layout",
        "--format sparse only: how the sparse layers are stored. csr: CSR arrays, each layer where it measured faster "
        "sparse than dense on this CPU; bsr: a --block ticket's layers as block-sparse (BSR) arrays, computed with "
        "torch's BSR or CSR product, whichever measured faster (BSR on the CPU: square blocks only), or dense; "
        "2:4: a ticket keeping at most 2 of every 4 inputs (--structure 2:4, 1:4) in a compressed 2:4 layout, "
        "computed with torch's semi-structured kernels on CUDA and as CSR or dense elsewhere; auto: bsr for a block "
        "ticket, 2:4 for an N:M ticket that fits it, csr otherwise. A layout the ticket's masks do not allow is "
        "refused.",
        OUT,
        EXPORT_LAYOUTS,
        Range("choice", choices=EXPORT_LAYOUTS),
        shown="auto",
    ),
    flag(
        "with_preprocessing",
        "--format onnx only: fold the dataset's normalisation into the graph, so that it takes raw values in [0, 1] "
        "(pixels / 255; digits: counts / 16) instead of normalised ones.",
        OUT,
        bool,
    ),
    FORCE,
    *OUTPUTS,
)

BENCH_FLAGS = Table(
    flag(
        "batch",
        "Comma-separated batch sizes at which the forms are timed (a language model's: sequences of its context).",
        Panel.MEASURE,
        str,
        shown=",".join(str(b) for b in BenchSpec().batches),
        metavar="SIZES",
    ),
    flag(
        "repeats",
        "Timed samples per form and batch size (their median is the latency, their interquartile range the spread).",
        Panel.MEASURE,
        int,
        shown=str(BenchSpec().repeats),
    ),
    flag(
        "forms",
        "Comma-separated forms to measure besides dense (which is always measured: speed-ups are over it). One of: "
        + ", ".join(BENCH_FORMS)
        + ".",
        Panel.MEASURE,
        str,
        shown="every form",
    ),
    flag(
        "clock",
        "wall: latency by the wall clock. thread: the timing thread's CPU time, which other processes' load does not "
        "inflate; it counts all the work only with one torch thread on the CPU (--threads 1), and is refused "
        "otherwise.",
        Panel.MEASURE,
        BENCH_CLOCKS,
        Range("choice", choices=BENCH_CLOCKS),
        shown=BenchSpec().clock,
    ),
    flag("plot", "Write a PNG of latency against batch size, one line per form.", OUT, Path, shown="no plot"),
    FORCE.but(help="Overwrite --plot if it exists."),
    *OUTPUTS,
)

WEAK_FLAGS = Table(
    flag(
        "dense_baseline",
        "Also train the unmasked network from the same init with the same optimiser and batch order, and report it "
        "beside.",
        Panel.TRAINING,
        bool,
    ),
    flag(
        "out",
        "Write the trained weights here as a plain safetensors state dict (masked entries zero), with metadata "
        "linking it to the ticket.",
        OUT,
        Path,
        shown="not written",
    ),
    flag(
        "plot",
        "Write a PNG of validation accuracy and training loss per epoch (masked vs dense).",
        OUT,
        Path,
        shown="no plot",
    ),
    FORCE.but(help="Overwrite --out and --plot if they exist."),
    RENDEZVOUS,
    *OUTPUTS,
)

SWEEP_FLAGS = Table(
    flag(
        "out_dir",
        "Keep every run's ticket and record here; re-running skips runs already finished there (a record or ticket "
        "that is not one sweep-k wrote is a warning, and that run is recomputed).",
        OUT,
        Path,
    ),
    flag(
        "plot",
        "Write a PNG: accuracy per configuration (left), accuracy vs achieved sparsity (right).",
        OUT,
        Path,
        shown="no plot",
    ),
    FORCE.but(
        help="Overwrite --plot, and files in --out-dir at the names of its runs, if they exist (not needed for the "
        "files an earlier run with the same --out-dir wrote: rerunning the command resumes and redraws them)."
    ),
    EXTRACT_FLAGS["config"].but(
        help="TOML file with model, data and training options (as for extract); flags override it."
    ),
    *OUTPUTS,
)
