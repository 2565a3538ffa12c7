"""Options shared by several commands: registry choices (from the torch-free catalog), help panels, reused option
types, and help texts whose "Default: X" is rendered from the spec dataclasses (specs.EXTRACT_DEFAULTS, ...), so
that help cannot drift from code."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import typer

from ticketcli import catalog
from ticketcli.specs import EXTRACT_DEFAULTS, ModelPolicy, RunSpec
from ticketcli.world import RENDEZVOUS_TIMEOUT_S


def choices(names: Iterable[str]) -> Any:
    """A Literal of a registry's names: Typer lists them in --help and refuses any other; the value is the str."""
    return Literal.__getitem__(tuple(names))


# Built at run time from the catalog (the registries' names without importing torch; tests/test_catalog.py keeps
# them equal), so mypy cannot read them: to mypy each is the str its value is.
if TYPE_CHECKING:
    MethodName = str
    InitName = str
    DatasetName = str
    GraspDirection = str
    GraspData = str
else:
    MethodName = choices(sorted(catalog.METHODS))
    InitName = choices(sorted(catalog.INITS))
    DatasetName = choices(sorted(catalog.DATASETS))
    GraspDirection = choices(catalog.GRASP_DIRECTIONS)
    GraspData = choices(catalog.GRASP_DATA)


def show(value: object) -> str:
    """A default as help prints it: 0.01, 1e-8, 200, 0.9,0.999, augmented."""
    if isinstance(value, (tuple, list)):
        return ",".join(show(v) for v in value)
    if isinstance(value, float):
        text = repr(value).removesuffix(".0")  # 200.0 -> 200
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", text)  # 1e-08 -> 1e-8
    return str(value)


def with_default(text: str, default: object) -> str:
    """Help text ending in 'Default: X.', X rendered from the value the code really uses."""
    return f"{text} Default: {show(default)}."


def extract_help(key: str, text: str) -> str:
    """Help of an extract setting (flag or config key), its default taken from specs.EXTRACT_DEFAULTS."""
    return with_default(text, EXTRACT_DEFAULTS[key])


def split_sizes(field: Literal["n_extract", "n_val"]) -> str:
    """Each dataset's default split size, grouped: '5000 (cifar10, fashion-mnist, mnist), 1000 (digits)'."""
    groups: dict[int, list[str]] = {}
    for name, entry in sorted(catalog.DATASETS.items()):
        groups.setdefault(getattr(entry, field), []).append(name)
    return ", ".join(f"{size} ({', '.join(names)})" for size, names in sorted(groups.items(), reverse=True))


class Panel:
    """The help panels options are grouped in (Typer's rich_help_panel), the same names in every command."""

    METHOD = "Method"
    VARIANTS = "Variants"  # ablations and the settings of one method family
    MODEL = "Model and init"
    DATA = "Data"
    TRAINING = "Training"
    OUTPUT = "Output"
    SCALE_OUT = "Scale-out"  # where and how wide it runs: device, precision, workers, checkpoints
    MEASURE = "Measurement"  # drift's own panels from here on
    ACT_CONTROL = "Activation control"
    RELUFY = "ReLUfication"
    TRADEOFF = "Trade-off sweep"


def setting(key: str, text: str, panel: str | None = None) -> Any:
    """The typer.Option of an extract setting (flag or config key): its help ends in the setting's default."""
    return typer.Option(help=extract_help(key, text), rich_help_panel=panel)


BIAS_DEFAULT = EXTRACT_DEFAULTS["bias"]

Json = Annotated[
    bool,
    typer.Option(
        "--json", help="Print exactly one JSON document on stdout instead of tables.", rich_help_panel=Panel.OUTPUT
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", help="No progress bar.", rich_help_panel=Panel.OUTPUT)]
Device = Annotated[
    Optional[str],
    typer.Option(
        help=with_default(
            "auto | cpu | cuda | cuda:N | mps (auto: CUDA if available, else "
            "the CPU; under torchrun cuda means cuda:LOCAL_RANK).",
            RunSpec.device,
        ),
        rich_help_panel=Panel.SCALE_OUT,
    ),
]
Threads = Annotated[
    Optional[int],
    typer.Option(
        help="Torch CPU threads for the run, 1 to 4096. Fewer are often faster on a loaded machine or beside other "
        "jobs (README: Threads). Default: torch's own (usually one per core).",
        rich_help_panel=Panel.SCALE_OUT,
    ),
]
RendezvousTimeout = Annotated[
    Optional[float],
    typer.Option(
        metavar="SECONDS",
        help="Under torchrun: how long each process waits for all the others to join before giving up with one "
        f"error line (exit 2); a signal ends the wait at once. Default: {RENDEZVOUS_TIMEOUT_S:g}.",
        rich_help_panel=Panel.SCALE_OUT,
    ),
]
Precision = Annotated[
    Optional[str],
    setting(
        "precision",
        "fp32, or bf16: autocast the training forward pass to bfloat16 (meant for ConvNets on a GPU; usually "
        "slower on the CPU). Accuracies are always measured in fp32.",
        Panel.SCALE_OUT,
    ),
]
DataDir = Annotated[
    Optional[Path],
    typer.Option(
        help="Look for dataset files here first (then $TICKET_DATA, ~/.cache/ticketcli, /usr/share/datasets).",
        rich_help_panel=Panel.DATA,
    ),
]
Download = Annotated[
    bool,
    typer.Option(
        "--download",
        help="Allow torchvision to download the dataset into ~/.cache/ticketcli if it is not found.",
        rich_help_panel=Panel.DATA,
    ),
]
CheckpointWeights = Annotated[
    Optional[Path],
    typer.Option(
        help="The checkpoint the ticket was extracted from (checked against its sha256).", rich_help_panel=Panel.MODEL
    ),
]
TrustModelCode = Annotated[
    bool,
    typer.Option(
        "--trust-model-code",
        help=(
            "Allow importing and running the model factory (pkg.module:function) the ticket names. A ticket alone "
            "never runs code: without this (or --model naming the same factory) such a ticket is refused."
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
TicketModel = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "The ticket's own model factory pkg.module:function: confirms that it may be imported (like "
            "--trust-model-code, for that factory only). Any other model is refused."
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
MaxParams = Annotated[
    Optional[int],
    typer.Option(
        help=with_default(
            "Refuse a model with more parameters than this, before anything is built.", ModelPolicy.max_params
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
MaxMemory = Annotated[
    Optional[str],
    typer.Option(
        help=(
            "Refuse a built-in model whose parameters, buffers and activations at this command's batch size "
            "need more memory than this (512M, 8G, or bytes), worked out from the spec before anything is built. "
            "Default: half of the machine's physical memory."
        ),
        rich_help_panel=Panel.MODEL,
    ),
]
TicketFile = Annotated[Path, typer.Argument(help="A ticket file written by `ticket extract`.")]

# Options extract and sweep-k share (sweep-k's model and data options are extract's).
Bias = Annotated[
    Optional[bool],
    typer.Option(
        "--bias/--no-bias",
        help=f"Give every layer a (masked) bias. Default: {'bias' if BIAS_DEFAULT else 'no bias'}.",
        rich_help_panel=Panel.MODEL,
    ),
]
Init = Annotated[
    Optional[InitName],
    setting(
        "init",
        "Weight initialisation scheme. Every masked weight is drawn from it from --seed, a model factory's too (its "
        "other parameters keep the factory's values); module keeps a factory's own weights as it created them "
        "(under a fixed seed, so the same for every --seed, which still draws the split, scores and batch order).",
        Panel.MODEL,
    ),
]
Dataset = Annotated[Optional[DatasetName], setting("dataset", "Dataset.", Panel.DATA)]
Lr = Annotated[Optional[float], setting("lr", "Adam learning rate for the scores.", Panel.TRAINING)]
BatchSize = Annotated[Optional[int], setting("batch_size", "Minibatch size.", Panel.TRAINING)]
