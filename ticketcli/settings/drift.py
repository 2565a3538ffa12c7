"""`ticket drift`'s settings: the training run it measures (DRIFT: each a field of DriftSpec, specs/drift.py, which
holds its default) and the feature flags (FEATURES: activation-sparsity control, ReLUfication, the trade-off sweep;
their defaults are fields of ControlSpec, RelufySpec and Features). settings/drift_options.py builds the specs from
them; the combinations that make no sense are its rules, not a setting's."""

from __future__ import annotations

from pathlib import Path

from ticketcli.models.activations import ACTIVATIONS, LOSSES
from ticketcli.settings.run import BATCH, LR, RUN, SEED
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.drift import (
    CONTROL_MODES,
    DEFAULT_TEXT_MODEL,
    INPUTS,
    RELUFY_TARGETS,
    ControlSpec,
    DriftSpec,
    Features,
    RelufySpec,
)
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
        SEED,  # each entry's range (settings/drift_options.py parses the list)
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
