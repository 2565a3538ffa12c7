"""The settings that shape a ticket: `ticket extract`'s options, which `ticket sweep-k` and `tc.extract` share.

Each is declared once below, and each method's own options in its registry entry (methods/registry.py), placed
among them. The defaults are the spec dataclasses' fields (specs/run.py) and the options' declarations; which
methods read a setting is what their registry entries say (Setting.methods): the refusal of an option a method does
not read and the help's "augmented, iterated: ..." prefix come from there."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from ticketcli.data.registry import DATASETS
from ticketcli.methods.registry import METHODS, own_options, placed
from ticketcli.models.init import INIT_SCHEMES
from ticketcli.settings.setting import Panel, Setting, Table
from ticketcli.specs.ranges import BOOL, CHOICE, FLOAT, INT, NUMBERS, SIZE, TEXT, OrAuto
from ticketcli.specs.run import DataSpec, InitSpec, MethodSpec, ModelSpec, Option, RunSpec

SEED = INT(0, 2**63, hi_open=True)  # a seed seeds torch generators (64-bit) and is stored in tickets
EPOCHS, BATCH = INT(1, 100_000), INT(1, 1 << 20)
LR = FLOAT(0, math.inf, lo_open=True, hi_open=True)  # any finite rate: a too large one diverges (runs catch it)
THREADS = OrAuto("int", 1, 4096)  # torch CPU threads (threads.py), every command that computes; auto: chosen


def split_sizes(field: Literal["n_extract", "n_val"]) -> str:
    """Each dataset's default split size, grouped: '5000 (cifar10, fashion-mnist, mnist), 1000 (digits)'."""
    groups: dict[int, list[str]] = {}
    for name in DATASETS.names():
        groups.setdefault(getattr(DATASETS.get(name), field), []).append(name)
    return ", ".join(f"{size} ({', '.join(names)})" for size, names in sorted(groups.items(), reverse=True))


def method_setting(name: str, help: str, panel: str, example: object, **kw: Any) -> Setting:
    """A setting several methods read (their registry entries' `reads`): the MethodSpec field of the same name holds
    its default; `example`: a valid value other than the default (Option.example)."""
    return Setting(name, help, panel, field=(MethodSpec, name), per_method=True, example=example, **kw)


def option_setting(o: Option) -> Setting:
    """A method's own option (methods/registry.py) as a setting; its flag parses what its range holds."""
    return Setting(o.name, o.help, o.panel, range=o.range, default=o.default, per_method=True, example=o.example)


def with_options(table: Table) -> Table:
    """`table` with every method's own options, each after the setting it follows."""
    own = {o.name: option_setting(o) for o in own_options()}
    return Table(*(table[n] if n in table else own[n] for n in placed(table.names(), own_options())))


M, V, MODEL, DATA, T, S = Panel.METHOD, Panel.VARIANTS, Panel.MODEL, Panel.DATA, Panel.TRAINING, Panel.SCALE_OUT

SHARED = Table(
    # what is extracted
    Setting("method", "Mask extraction method.", M, tuple(METHODS.names()), TEXT, (MethodSpec, "name")),
    Setting(
        "sparsity",
        "Requested sparsity in (0, 1) = 1 - keep density. For augmented it sets the augmented-space keep "
        "density 1 - s; the achieved sparsity is measured and reported.",
        M,
        range=FLOAT(0, 1, lo_open=True, hi_open=True),
        field=(MethodSpec, "sparsity"),
    ),
    method_setting(
        "layer_densities",
        "Comma-separated keep density per layer, e.g. 0.1,0.2,0.2,0.5.",
        M,
        "0.5,0.3",
        range=NUMBERS(0, 1, lo_open=True),
    ),
    # variants and ablations
    method_setting(
        "signed_scores", "Rank raw scores S instead of |S| (the paper's NoAbs ablation).", V, True, range=BOOL
    ),
    method_setting("global_topk", "One top-k across all layers instead of one per layer.", V, True, range=BOOL),
    # the network
    Setting(
        "seed",
        "Seed of the weights, the data split, score init and batch order.",
        MODEL,
        range=SEED,
        field=(InitSpec, "seed"),
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
        range=FLOAT(1e-6, 1e6),
        field=(InitSpec, "k"),
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
        range=BOOL,
        field=(DataSpec, "download"),
    ),
    Setting(
        "text",
        "--dataset text: any UTF-8 text file instead of the fortunes files (with a ticket: the same text, found "
        "elsewhere).",
        DATA,
        Path,
        TEXT,
        shown="the fortunes files literature, science, computers and wisdom",
    ),
    Setting(
        "n_extract",
        "Extraction examples drawn from the training set.",
        DATA,
        range=INT(1, 10_000_000),
        field=(DataSpec, "n_extract"),
        shown=split_sizes("n_extract"),
    ),
    Setting(
        "n_val",
        "Validation examples, disjoint from extraction.",
        DATA,
        range=INT(1, 10_000_000),
        field=(DataSpec, "n_val"),
        shown=split_sizes("n_val"),
    ),
    # training
    method_setting(
        "epochs",
        "Training epochs: of the scores, or of the weights for imp (split over its rounds), set, rigl, movement.",
        T,
        3,
        range=EPOCHS,
    ),
    method_setting("lr", "Adam learning rate for the scores.", T, 0.5, range=LR),
    method_setting("batch_size", "Minibatch size.", T, 32, range=BATCH),
    method_setting("betas", "Adam betas as 'b1,b2'.", T, "0.5,0.6", range=NUMBERS(0, 1, hi_open=True)),
    method_setting("eps", "Adam epsilon.", T, 0.5, range=FLOAT(0, 1, lo_open=True)),
    method_setting("weight_decay", "Adam weight decay.", T, 5.0, range=FLOAT(0, 100)),
    method_setting(
        "weight_lr", "Adam learning rate for the weights (--lr is movement's score rate).", T, 0.1, range=LR
    ),
    # another ticket's sparsity
    Setting(
        "match_sparsity",
        "Run at the achieved sparsity of this ticket (overrides --sparsity), e.g. a double-scoring ticket "
        "(paper, Appendix G); a folder: of its one ticket drawn with this --seed for this --model.",
        M,
        Path,
        TEXT,
    ),
    Setting(
        "match_sparsity_per_layer",
        "With --match-sparsity: match each layer's density (as --layer-densities) instead of the global sparsity.",
        M,
        range=BOOL,
        default=False,
    ),
    # where and how it runs
    Setting(
        "max_params",
        "Refuse a model with more parameters than this, before anything is built.",
        MODEL,
        range=INT(1, 10**12),
        field=(RunSpec, "max_params"),
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
        "bf16",
        kind=str,  # the flag takes text, refused by its range as the config key is (not a Typer choice)
        range=CHOICE("fp32", "bf16"),
    ),
    Setting(
        "threads",
        "Torch CPU threads for the run: auto, or 1 to 4096. auto takes the cores that are free when the run "
        "starts, fewer for a model with little work per step; the result reports the count "
        "(manual: docs/reference/scale.md, Threads).",
        S,
        kind=str,  # auto or a number: the range reads the text
        range=THREADS,
        shown="auto",
    ),
)
RUN = with_options(SHARED)  # with each method's own options placed among the shared ones

# The config keys (and API keywords) with the defaults the code uses, and the method options: derived from RUN.
EXTRACT_DEFAULTS = RUN.defaults()
METHOD_OPTIONS: tuple[str, ...] = RUN.method_options()
