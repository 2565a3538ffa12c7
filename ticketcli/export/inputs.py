"""What an exported network expects of its input, recorded in every export's metadata (`input_metadata`, the one
function every format calls): the data's name, one example's shape and dtype, the number of classes, and the
dataset's normalisation with the raw input it starts from (data/registry.py declares it per dataset); for a
character-level language model, its character ids instead (TextInputs: the context, the vocabulary, how characters
become ids and the text they come from). What the ticket does not tell (a caller's own tensors, a factory model
without `@CxHxW-K`) is named in `not_recorded` with the reason, never guessed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ticketcli.contract.schema import JsonObject
from ticketcli.data.memory import IN_MEMORY
from ticketcli.data.registry import DATASETS, Normalization
from ticketcli.errors import UsageError
from ticketcli.models.gpt_family import gpt_numbers
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import text_model
from ticketcli.specs.run import ModelSpec
from ticketcli.ticketfile.ticket import Ticket

# where the normalisation is applied: by the caller before the network, in the exported graph, or nowhere (ids)
BY_CALLER = "by the caller: (raw - input_mean) / input_std per channel"
IN_GRAPH = "in the graph: feed raw values"
NONE = "none: the inputs are character ids"
IDS = "id i is the i-th distinct character of the text (text_sha256), in code-point order"


@dataclass(frozen=True)
class TextInputs:
    """A character-level language model's inputs: (batch, length) int64 ids with length at most `context` (the
    logits come for every position), each below `vocab_size`, made from characters as `ids` says, from the text
    whose digest and files the ticket records (None and () where it records none)."""

    context: int
    vocab_size: int
    ids: str
    sha256: str | None
    sources: tuple[str, ...]

    def to_dict(self) -> JsonObject:
        return {
            "context": self.context,
            "vocab_size": self.vocab_size,
            "ids": self.ids,
            "sha256": self.sha256,
            "sources": list(self.sources),
        }


@dataclass(frozen=True)
class Inputs:
    """What a ticket's network takes, as far as the ticket tells; None where it does not (`not_recorded` says
    why)."""

    dataset: str
    shape: tuple[int, ...] | None  # one example's, without the batch dimension
    dtype: str | None  # "float32", or "int64" for character ids
    classes: int | None
    normalization: Normalization | None
    preprocessing: str | None  # BY_CALLER, IN_GRAPH or NONE; None where the normalisation is not known
    not_recorded: dict[str, str] = field(default_factory=dict)  # metadata key -> why it is not recorded
    text: TextInputs | None = None  # a character-level language model's ids

    def metadata(self) -> dict[str, str]:
        """The export file's metadata entries (strings, JSON where the value is a list or an object): `dataset`,
        `input_shape`, `input_dtype`, `classes`, `input_mean`, `input_std`, `input_raw`, `preprocessing`; for a
        language model `context`, `vocab_size`, `character_ids`, `text_sha256` and `text_sources`; and
        `not_recorded` ({key: reason}) for those the ticket does not tell."""
        n = self.normalization
        values: dict[str, object] = {
            "dataset": self.dataset,
            "input_shape": None if self.shape is None else list(self.shape),
            "input_dtype": self.dtype,
            "classes": self.classes,
            "input_mean": None if n is None else list(n.mean),
            "input_std": None if n is None else list(n.std),
            "input_raw": None if n is None else n.raw,
            "preprocessing": self.preprocessing,
        }
        t = self.text
        if t is not None:
            values |= {"context": t.context, "vocab_size": t.vocab_size, "character_ids": t.ids}
            values |= {"text_sha256": t.sha256, "text_sources": list(t.sources) if t.sources else None}
        meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items() if v is not None}
        if self.not_recorded:
            meta["not_recorded"] = json.dumps(self.not_recorded)
        return meta

    def to_dict(self) -> JsonObject:
        """The `inputs` object of `ticket export --json`."""
        return {
            "dataset": self.dataset,
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
            "classes": self.classes,
            "normalization": None if self.normalization is None else dict(self.normalization.to_dict()),
            "preprocessing": self.preprocessing,
            "not_recorded": dict(self.not_recorded),
            "text": None if self.text is None else self.text.to_dict(),
        }


def inputs_of(tk: Ticket, net: MaskedNet, *, in_graph: bool = False) -> Inputs:
    """What `tk`'s network (rebuilt as `net`) takes; `in_graph`: the export folds the normalisation into its graph,
    so it takes raw values."""
    spec = net.spec
    assert spec is not None  # runs_build.rebuild records the ticket's parsed model spec
    name = tk.data.dataset
    missing: dict[str, str] = {}
    if text_model(spec.arch):
        return text_inputs(tk, spec)
    info = DATASETS.get(name) if name in DATASETS else None
    shape: tuple[int, ...] | None
    if info is not None:
        shape = info.shape
    elif spec.input is not None:
        shape = spec.input
    elif spec.arch == "mlp":
        shape = (spec.widths[0],)  # flat examples (an MLP flattens whatever it is given)
    else:
        shape = None
        missing["input_shape"] = f"the factory's model spec gives no @CxHxW and {where(name)}"
    classes = info.classes if info is not None else spec.classes
    if classes is None and spec.arch == "mlp":
        classes = spec.widths[-1]
    if classes is None:
        missing["classes"] = f"the factory's model spec gives no @CxHxW-K and {where(name)}"
    norm = info.normalization if info is not None else None
    if norm is None:
        if name == IN_MEMORY:
            why = (
                "the ticket's data were the caller's own tensors, taken as given: how they were normalised is not known"
            )
        elif info is not None:
            why = f"dataset {name!r} declares no normalisation in its registry entry"
        else:
            why = where(name)
        missing |= {"input_mean": why, "input_std": why, "input_raw": why, "preprocessing": why}
    preprocessing = None if norm is None else IN_GRAPH if in_graph else BY_CALLER
    return Inputs(name, shape, "float32", classes, norm, preprocessing, missing)


def text_inputs(tk: Ticket, spec: ModelSpec) -> Inputs:
    """A character-level language model's inputs: its ids, and the text the ticket records they come from."""
    n = gpt_numbers(spec)
    record = tk.data.stored.get("text")
    rec = record if isinstance(record, dict) else {}
    sha = rec.get("sha256") if isinstance(rec.get("sha256"), str) else None
    raw = rec.get("sources")
    sources = tuple(str(s) for s in raw) if isinstance(raw, list) else ()
    missing = {}
    if sha is None or not sources:
        why = f"the ticket records no text (its data: {tk.data.dataset[:40]!r})"
        missing = {k: why for k, v in (("text_sha256", sha), ("text_sources", sources)) if not v}
    text = TextInputs(n["c"], n["v"], IDS, sha, sources)
    return Inputs(tk.data.dataset, (n["c"],), "int64", n["v"], None, NONE, missing, text)


def require_normalization(tk: Ticket) -> None:
    """--with-preprocessing's precondition, checked from the ticket's record before its network is rebuilt: its
    data are a registered dataset that declares a normalisation (not the caller's tensors, not a text)."""
    name = tk.data.dataset
    if name in DATASETS and DATASETS.get(name).normalization is not None and not DATASETS.get(name).text:
        return
    why = (
        "the ticket's data were the caller's own tensors, taken as given"
        if name == IN_MEMORY
        else "its inputs are character ids, which nothing normalises"
        if name in DATASETS and DATASETS.get(name).text
        else f"dataset {name[:40]!r} declares none"
        if name in DATASETS
        else where(name)
    )
    raise UsageError(
        f"--with-preprocessing needs the dataset's normalisation, which this ticket does not record: {why}",
        hint="export without it and normalise the inputs as the ticket's data were",
    )


def where(name: str) -> str:
    """Why the data do not tell a fact: what the ticket records of them."""
    if name == IN_MEMORY:
        return "the ticket's data were the caller's own tensors"
    return f"the ticket's data ({name[:40]!r}) are not a registered dataset"


def input_metadata(tk: Ticket, net: MaskedNet, *, in_graph: bool = False) -> dict[str, str]:
    """The metadata entries every export format writes (Inputs.metadata): one call per export, whatever its
    format."""
    return inputs_of(tk, net, in_graph=in_graph).metadata()
