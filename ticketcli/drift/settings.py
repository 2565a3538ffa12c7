"""`ticket drift`'s settings: the training run it measures (DRIFT: each a field of DriftSpec, spec.py, which holds
its default), the feature flags (FEATURES: activation-sparsity control, ReLUfication, the trade-off sweep; their
defaults are fields of ControlSpec, RelufySpec and Features), the options of --ticket's rebuild (DRIFT_READER) and
the command-line-only flags (DRIFT_FLAGS). Each value is checked by its setting, here only; options.py builds the
specs from them, and the combinations that make no sense are its rules, not a setting's. Torch-free: --help reads
them."""

from __future__ import annotations

from pathlib import Path

from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.drift.spec import (
    CONTROL_MODES,
    DEFAULT_TEXT_MODEL,
    INPUTS,
    RELUFY_TARGETS,
    ControlSpec,
    DriftSpec,
    Features,
    RelufySpec,
)
from ticketcli.settings.flags import FORCE, OUTPUTS, checkpoint_every, flag
from ticketcli.settings.reader import READER
from ticketcli.settings.run import BATCH, LR, RUN, SEED
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.ranges import FLOAT, INT, TEXT

T, MEASURE, DATA, MODEL = Panel.TRAINING, Panel.MEASURE, Panel.DATA, Panel.MODEL
STEPS = INT(1, 10_000_000)

DRIFT = Table(
    Setting(
        "model",
        "Model spec: an MLP, e.g. mlp:784-256-256-10 (+res for skips between equal-width hidden layers, "
        "+norm=batch|layer|rms before each hidden activation, +bias for biases), lenet300, resnet20, resnet18, "
        "vit:p4-d64-l4-h4, or the character-level gpt-nano:l2-d64-h4-c64 (trains on --text). With --ticket only "
        "the ticket's own model factory, confirming that it may be imported.",
        MODEL,
        range=TEXT,
        shown=f"the paper's MLP (three hidden layers of 256) sized to the dataset; with --text, {DEFAULT_TEXT_MODEL}",
    ),
    Setting(
        "activation",
        "Activation at every activation site (an MLP's hidden layers, a ResNet's ReLUs, the MLP blocks of a ViT or "
        "GPT-nano); relu2-clip is min(relu(x)^2, --clip).",
        T,
        tuple(ACTIVATIONS.names()),
        TEXT,
        (DriftSpec, "activation"),
    ),
    Setting("clip", "c of relu2-clip.", T, float, FLOAT(0, 1e6, lo_open=True), (DriftSpec, "clip")),
    Setting(
        "inputs",
        "data: the dataset's images; gaussian: N(0,1) features; uniform: U[0,1] features (random inputs get random "
        "labels, fresh every step).",
        DATA,
        INPUTS,
        TEXT,
        (DriftSpec, "inputs"),
    ),
    Setting(
        "loss", "cross-entropy, or mse against one-hot targets.", T, tuple(LOSSES.names()), TEXT, (DriftSpec, "loss")
    ),
    Setting("optimizer", "Weight optimiser.", T, ("adam", "sgd"), TEXT, (DriftSpec, "optim.name")),
    Setting("lr", "Learning rate.", T, float, LR, (DriftSpec, "optim.lr")),
    Setting("momentum", "SGD momentum.", T, float, FLOAT(0, 1, hi_open=True), (DriftSpec, "optim.momentum")),
    Setting("batch_size", "Minibatch size.", T, int, BATCH, (DriftSpec, "batch_size")),
    Setting("steps", "Optimiser steps.", T, int, STEPS, (DriftSpec, "steps")),
    Setting(
        "log_every",
        "Measure every this many steps (and at step 0 and the last step).",
        MEASURE,
        int,
        STEPS,
        (DriftSpec, "log_every"),
    ),
    Setting(
        "seeds",
        "Comma-separated seeds of the weights, split and batches; several give mean +- std.",
        MODEL,
        str,
        SEED,  # each entry's range (options.py parses the list)
        (DriftSpec, "seeds"),
    ),
    Setting(
        "probe_size",
        "Size of the fixed batch every statistic is measured on (validation split, or random inputs).",
        MEASURE,
        int,
        BATCH,
        (DriftSpec, "probe_size"),
    ),
    Setting(
        "zero_threshold",
        "Smooth activations (gelu, silu, gelu2): |a| below this counts as zero in sparsity and dead units; "
        "relu-type activations count exact zeros.",
        MEASURE,
        float,
        FLOAT(0, 1e6, lo_open=True),
        (DriftSpec, "zero_threshold"),
    ),
    RUN["dataset"].but(help="Dataset (sizes the default model; the inputs with --inputs data)."),
    RUN["device"].but(field=(DriftSpec, "device")),
    Setting(
        "text",
        "Plain UTF-8 text a gpt-nano model learns next-character prediction on, split into training and validation "
        "blocks by the seed. Default for gpt-nano: the fortunes files literature, science, computers, wisdom "
        "(<--data-dir>/fortunes, then /usr/share/games/fortunes).",
        DATA,
        Path,
        TEXT,
    ),
)

AC, RELUFY, TRADEOFF = Panel.ACT_CONTROL, Panel.RELUFY, Panel.TRADEOFF

FEATURES = Table(
    Setting(
        "act_sparsity",
        "Control activation sparsity while training, at every activation site: topk keeps each example's largest "
        "activations per layer and zeroes the rest; percentile subtracts a running per-unit quantile of the "
        "pre-activations so that the --act-target share falls below zero.",
        AC,
        CONTROL_MODES,
        shown="no control",
    ),
    Setting(
        "act_target",
        "Target activation sparsity for --act-sparsity, in (0, 1).",
        AC,
        float,
        FLOAT(0, 1, lo_open=True, hi_open=True),
        (ControlSpec, "target"),
    ),
    Setting(
        "freeze_stats_after",
        "Percentile centering: stop updating the statistics after this many training steps (accumulation stop).",
        AC,
        int,
        STEPS,
        (ControlSpec, "freeze_after"),
        shown="never",
    ),
    Setting(
        "relufy",
        "ReLUfication: train --steps with --from, swap --to in at every activation keeping the weights, fine-tune "
        "--relufy-epochs epochs; report accuracy and post-activation sparsity before and after.",
        RELUFY,
        bool,
    ),
    Setting(
        "relufy_from",
        "--relufy: the smooth activation trained first.",
        RELUFY,
        tuple(ACTIVATIONS.names()),
        flag_name="--from",
    ),
    Setting("relufy_to", "--relufy: the ReLU variant swapped in.", RELUFY, RELUFY_TARGETS, flag_name="--to"),
    Setting(
        "relufy_epochs",
        "--relufy: fine-tuning epochs over the extraction split.",
        RELUFY,
        int,
        INT(1, 1000),
        (RelufySpec, "epochs"),
    ),
    Setting(
        "tradeoff",
        "Trade-off sweep: comma-separated target activation sparsities, one controlled run each (with "
        "--act-sparsity, default topk); accuracy vs achieved sparsity and the cliff (largest accuracy drop between "
        "neighbouring targets). --model may list several models, comma-separated, to overlay them. --plot draws the "
        "curves.",
        TRADEOFF,
    ),
    Setting(
        "workers",
        "--tradeoff: runs in parallel in this many processes (--threads torch threads each, by default one, so "
        "that the results do not depend on it); workers x threads must not exceed the CPU cores.",
        TRADEOFF,
        int,
        INT(1, 256),
        (Features, "workers"),
    ),
)

# --ticket: drift declares its own --model, --device and --weights
# --threads: torch's own count unless given, never chosen from the load (drift's sums move with the count)
DRIFT_READER = READER.pick(
    "trust_model_code",
    "max_params",
    "max_memory",
    "data_dir",
    "download",
    "threads",
    threads={
        "help": "Torch CPU threads for the run: 1 to 4096, or auto, which for drift is torch's own count, not one "
        "chosen from the load: drift's sums move in their last digits with the count, and a rerun on the same "
        "machine gives the same numbers; the result reports it (manual: docs/reference/scale.md, Threads).",
        "shown": "torch's own count",
    },
)

OUT, SCALE = Panel.OUTPUT, Panel.SCALE_OUT
DRIFT_FLAGS = Table(
    flag(
        "ticket",
        "Rebuild this ticket's network (fingerprint-checked) and train only its surviving weights.",
        MODEL,
        Path,
    ),
    flag("weights", "The checkpoint a --ticket was extracted from, if it was.", MODEL, Path),
    flag(
        "plot",
        "Write a PNG: weight mean per layer, negative pre-activation share and sparsity vs step.",
        OUT,
        Path,
    ),
    FORCE.but(help="Overwrite --plot if it exists."),
    flag(
        "run_dir",
        "Keep the run in this folder (new or empty): its settings (run.json), every measurement as it is taken "
        "(measurements.jsonl) and a resumable state (state.safetensors, atomically, every --checkpoint-every "
        "steps); ticket drift --resume DIR continues it after a crash or a signal. Plain drift and --act-sparsity.",
        SCALE,
        Path,
        metavar="DIR",
    ),
    checkpoint_every(
        "step",
        "With --run-dir: save the resumable state every N training steps (and at the end of each seed); --log-to "
        "trackers get each measurement once a checkpoint keeps it.",
        "every --log-every steps",
    ),
    flag(
        "resume",
        "Continue the run kept in this --run-dir with the settings it recorded (flags that differ from them are "
        "refused); the measurements and the --json document come out as an uninterrupted run's, and its --log-to "
        "trackers go on in the same runs.",
        SCALE,
        Path,
        metavar="DIR",
    ),
    *OUTPUTS,
)
