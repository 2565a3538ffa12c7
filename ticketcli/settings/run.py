"""The settings that shape a ticket: `ticket extract`'s options, which `ticket sweep-k` and `tc.extract` share.

Each is declared once below. The defaults are the spec dataclasses' fields (specs.py); the readers of a method's
hyper-parameter are listed by method name (`methods=`): Method.options, the refusal of an option a method does not
read and the help's "augmented, iterated: ..." prefix all come from that list."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from ticketcli.data.registry import DATASETS
from ticketcli.methods.registry import METHODS
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.settings.baselines import BASELINES, SALIENCY, method_setting
from ticketcli.settings.ranges import BOOL, CHOICE, FLOAT, INT, NUMBERS, SIZE, TEXT
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelSpec, RunSpec

# The method families, by the settings they read
SCORES = ("augmented", "edge-popup", "iterated")  # score training (Adam on the scores at --lr)
AUGMENTED = ("augmented", "iterated")  # double-scoring: auxiliary scores
WEIGHTS = ("imp", "movement", "rigl", "set")  # weight training (Adam on the weights at --weight-lr)
PER_LAYER = ("edge-popup", "grasp", "imp", "movement", "random", "rigl", "set", "snip", "synflow")

SEED = INT(0, 2**63, hi_open=True)  # a seed seeds torch generators (64-bit) and is stored in tickets
EPOCHS, BATCH = INT(1, 100_000), INT(1, 1 << 20)
LR = FLOAT(0, math.inf, lo_open=True, hi_open=True)  # any finite rate: a too large one diverges (runs catch it)
THREADS = INT(1, 4096)  # torch CPU threads (threads.py), every command that computes


def split_sizes(field: Literal["n_extract", "n_val"]) -> str:
    """Each dataset's default split size, grouped: '5000 (cifar10, fashion-mnist, mnist), 1000 (digits)'."""
    groups: dict[int, list[str]] = {}
    for name in DATASETS.names():
        groups.setdefault(getattr(DATASETS.get(name), field), []).append(name)
    return ", ".join(f"{size} ({', '.join(names)})" for size, names in sorted(groups.items(), reverse=True))


M, V, MODEL, DATA, T, S = Panel.METHOD, Panel.VARIANTS, Panel.MODEL, Panel.DATA, Panel.TRAINING, Panel.SCALE_OUT

RUN = Table(
    # what is extracted
    Setting("method", "Mask extraction method.", M, tuple(METHODS.names()), TEXT, (MethodSpec, "name")),
    method_setting(
        "sparsity",
        "Requested sparsity in (0, 1) = 1 - keep density. For augmented it sets the augmented-space keep "
        "density 1 - s; the achieved sparsity is measured and reported.",
        M,
        kind=float,
        range=FLOAT(0, 1, lo_open=True, hi_open=True),
    ),
    method_setting(
        "layer_densities",
        "Comma-separated keep density per layer, e.g. 0.1,0.2,0.2,0.5.",
        M,
        range=NUMBERS(0, 1, lo_open=True),
        methods=PER_LAYER,
    ),
    method_setting(
        "aug_density",
        "Augmented-space keep density; 0.5 is the canonical fixed-density double-scoring. "
        "Overrides --sparsity's augmented density.",
        M,
        kind=float,
        range=FLOAT(0, 1, lo_open=True),
        methods=("augmented",),
    ),
    method_setting(
        "aux_width",
        "Auxiliary score width as a multiple m of the original, i.e. scores of width n + m*n per layer (the "
        "paper's Aug-x1/x2/x4).",
        M,
        kind=int,
        range=INT(1, 64),
        methods=AUGMENTED,
    ),
    # variants and ablations
    method_setting(
        "frozen_aux",
        "Auxiliary scores keep their random init and are never updated. Under Algorithm 1 they get zero gradient "
        "anyway, so this only differs from the default with --weight-decay > 0.",
        V,
        kind=bool,
        range=BOOL,
        methods=AUGMENTED,
    ),
    method_setting(
        "signed_scores",
        "Rank raw scores S instead of |S| (the paper's NoAbs ablation).",
        V,
        kind=bool,
        range=BOOL,
        methods=SCORES,
    ),
    method_setting(
        "project_final",
        "Train as usual, then keep exactly the requested density of the original coordinates (top-k of the "
        "original scores) as the final mask.",
        V,
        kind=bool,
        range=BOOL,
        methods=("augmented",),
    ),
    method_setting(
        "global_topk",
        "One top-k across all layers instead of one per layer.",
        V,
        kind=bool,
        range=BOOL,
        methods=SCORES,
    ),
    method_setting(
        "iter_tolerance",
        "Stop once the achieved sparsity is within this of the requested one.",
        V,
        kind=float,
        range=FLOAT(0, 1, lo_open=True, hi_open=True),
        methods=("iterated",),
    ),
    method_setting(
        "max_rounds",
        "At most this many rounds, each a full score training of --epochs.",
        V,
        kind=int,
        range=INT(1, 1000),
        methods=("iterated",),
    ),
    # the network
    Setting(
        "seed", "Seed of the weights, the data split, score init and batch order.", MODEL, int, SEED, (InitSpec, "seed")
    ),
    Setting(
        "model",
        "Model spec: mlp:784-256-256-256-10 (+res: skips between equal-width hidden layers; +norm=batch|layer|rms), "
        "lenet300, conv2, conv4, conv6, vgg:64-64-M-128-128-M-256-256-M, resnet20, resnet18, wrn:16-4 "
        "(depth-width), vit:p4-d64-l4-h4 (patch, width, blocks, heads; -m2: MLP ratio) (append +bias for biases; "
        "input shape and classes come from the dataset), or a factory my_pkg.my_module:build_net or "
        "torchvision.models:resnet18 returning an nn.Module (its Linear/Conv2d weights and biases are masked; a "
        "factory taking num_classes gets the dataset's).",
        MODEL,
        range=TEXT,
        shown="the paper's MLP (three hidden layers of 256), sized to the dataset",
    ),
    Setting(
        "bias",
        "Give every layer a (masked) bias.",
        MODEL,
        "negatable",
        BOOL,
        (ModelSpec, "bias"),
        shown="bias" if ModelSpec.bias else "no bias",
    ),
    Setting(
        "init",
        "Weight initialisation scheme. Every masked weight is drawn from it from --seed, a model factory's too (its "
        "other parameters keep the factory's values); module keeps a factory's own weights as it created them "
        "(under a fixed seed, so the same for every --seed, which still draws the split, scores and batch order).",
        MODEL,
        tuple(INIT_SCHEMES.names()),
        TEXT,
        (InitSpec, "scheme"),
    ),
    Setting(
        "init_k",
        "fan_in scale k of the init: bound or std gain/sqrt(k*fan_in).",
        MODEL,
        float,
        FLOAT(1e-6, 1e6),
        (InitSpec, "k"),
    ),
    Setting(
        "weights",
        "Frozen weights from this safetensors or PyTorch state-dict file instead of the seed.",
        MODEL,
        Path,
        TEXT,
        (RunSpec, "weights"),
    ),
    # the data
    Setting("dataset", "Dataset.", DATA, tuple(DATASETS.names()), TEXT, (DataSpec, "name")),
    Setting(
        "data_dir",
        "Look for dataset files here first (then $TICKET_DATA, ~/.cache/ticketcli, /usr/share/datasets).",
        DATA,
        Path,
        TEXT,
    ),
    Setting(
        "download",
        "Allow torchvision to download the dataset into ~/.cache/ticketcli if it is not found.",
        DATA,
        bool,
        BOOL,
        (DataSpec, "download"),
    ),
    Setting(
        "n_extract",
        "Extraction examples drawn from the training set.",
        DATA,
        int,
        INT(1, 10_000_000),
        (DataSpec, "n_extract"),
        shown=split_sizes("n_extract"),
    ),
    Setting(
        "n_val",
        "Validation examples, disjoint from extraction.",
        DATA,
        int,
        INT(1, 10_000_000),
        (DataSpec, "n_val"),
        shown=split_sizes("n_val"),
    ),
    # training
    method_setting(
        "epochs",
        "Training epochs: of the scores, or of the weights for imp (split over its rounds), set, rigl, movement.",
        T,
        kind=int,
        range=EPOCHS,
        methods=SCORES + WEIGHTS,
    ),
    method_setting("lr", "Adam learning rate for the scores.", T, kind=float, range=LR, methods=(*SCORES, "movement")),
    method_setting("batch_size", "Minibatch size.", T, kind=int, range=BATCH, methods=SCORES + WEIGHTS + SALIENCY),
    method_setting("betas", "Adam betas as 'b1,b2'.", T, range=NUMBERS(0, 1, hi_open=True), methods=SCORES + WEIGHTS),
    method_setting("eps", "Adam epsilon.", T, kind=float, range=FLOAT(0, 1, lo_open=True), methods=SCORES + WEIGHTS),
    method_setting("weight_decay", "Adam weight decay.", T, kind=float, range=FLOAT(0, 100), methods=SCORES + WEIGHTS),
    method_setting(
        "weight_lr",
        "Adam learning rate for the weights (--lr is movement's score rate).",
        T,
        kind=float,
        range=LR,
        methods=WEIGHTS,
    ),
    # the baselines' own settings (settings/baselines.py)
    *BASELINES,
    # another ticket's sparsity
    Setting(
        "match_sparsity",
        "Run at the achieved sparsity of this ticket (overrides --sparsity), e.g. a double-scoring ticket "
        "(paper, Appendix G).",
        M,
        Path,
        TEXT,
    ),
    Setting(
        "match_sparsity_per_layer",
        "With --match-sparsity: match each layer's density (as --layer-densities) instead of the global sparsity.",
        M,
        bool,
        BOOL,
        default=False,
    ),
    # where and how it runs
    Setting(
        "max_params",
        "Refuse a model with more parameters than this, before anything is built.",
        MODEL,
        int,
        INT(1, 10**12),
        (RunSpec, "max_params"),
    ),
    Setting(
        "max_memory",
        "Refuse a built-in model whose parameters, buffers and activations at this command's batch size need more "
        "memory than this (512M, 8G, or bytes), worked out from the spec before anything is built.",
        MODEL,
        str,
        SIZE(1 << 20, 1 << 50),
        (RunSpec, "max_memory"),
        shown="half of the machine's physical memory",
    ),
    Setting(
        "device",
        "auto | cpu | cuda | cuda:N | mps (auto: CUDA if available, else the CPU; under torchrun cuda means "
        "cuda:LOCAL_RANK).",
        S,
        str,
        TEXT,
        (RunSpec, "device"),
    ),
    method_setting(
        "precision",
        "fp32, or bf16: autocast the training forward pass to bfloat16 (meant for ConvNets on a GPU; usually "
        "slower on the CPU). Accuracies are always measured in fp32.",
        S,
        range=CHOICE("fp32", "bf16"),
        methods=SCORES,
    ),
    Setting(
        "threads",
        "Torch CPU threads for the run, 1 to 4096. Fewer are often faster on a loaded machine or beside other "
        "jobs (manual: docs/reference/scale.md, Threads).",
        S,
        int,
        THREADS,
        shown="torch's own (usually one per core)",
    ),
)

# The config keys (and API keywords) with the defaults the code uses, and the method options: derived from RUN.
EXTRACT_DEFAULTS: dict[str, Any] = RUN.defaults()
METHOD_OPTIONS: tuple[str, ...] = RUN.method_options()
