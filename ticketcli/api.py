"""The Python API (`import ticketcli as tc`): load, extract, build and evaluate tickets in a notebook or a training
script. It is the command line without the flags: the same spec building (resolve.py), the same core calls
(runs.extract.run_extraction, runs.evaluate.evaluate_loaded, runs.build.rebuild), the same errors, raised instead
of turned into exit codes."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ticketcli import api_data, export, report
from ticketcli.api_masks import apply_masks, masked
from ticketcli.checkpoint import saved_at
from ticketcli.data import DATASETS, Splits
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.models.registry import MODELS, parse_model
from ticketcli.resolve import build_extract_spec, build_model_policy, check_keywords, data_location, merge_settings
from ticketcli.runs import build as runs_build
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import extract as runs_extract
from ticketcli.runs import inputs as runs_inputs
from ticketcli.settings.run import RUN
from ticketcli.specs import DataSpec, ModelPolicy, ModelSpec
from ticketcli.threads import check_threads, using
from ticketcli.ticketfile import ticket as ticket_io

Progress = Callable[
    [dict[str, Any]], None
]  # called after each epoch with {"epoch", "epochs", "loss", "accuracy", "sparsity"}
UNSAVED = Path("<unsaved ticket>")  # how messages name a ticket that extract() returned and nobody saved yet
# extract() takes these as its own arguments (model, data) or not at all (where the ticket goes: Ticket.save)
NOT_OPTIONS = frozenset({"model", "dataset", "method", "sparsity", "epochs", "seed", "device", "threads"})


class Ticket:
    """A strong lottery ticket: bool masks over frozen weights that its seed regenerates, and its provenance."""

    def __init__(self, record: ticket_io.Ticket, path: Path | None = None):
        self._record = record
        self._path = path

    def __repr__(self) -> str:
        where = "unsaved" if self._path is None else str(self._path)
        return f"Ticket({self.method}, {self.model}, seed {self.seed}, sparsity {self.sparsity:.4f}, {where})"

    @property
    def masks(self) -> dict[str, torch.Tensor]:
        """Parameter name -> bool mask of its shape (True = kept), in the model's named_parameters() order (copies:
        changing them does not change the ticket)."""
        return {n: m.clone() for n, m in self._record.masks.items()}

    @property
    def metadata(self) -> dict[str, Any]:
        """Everything the file records beside the masks (model, init, method, data, sparsity, metrics, ...)."""
        r = self._record
        fields = ("model", "init", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by")
        meta = {k: getattr(r, k) for k in fields}
        if r.checkpoint is not None:
            meta["checkpoint"] = r.checkpoint
        return {**meta, "shapes": r.shapes, "masks_sha256": r.masks_sha256, "integrity": r.integrity}

    @property
    def sparsity(self) -> float:
        """The achieved sparsity (fraction of masked-out weights over all masked parameters)."""
        return float(self._record.sparsity["achieved"])

    @property
    def method(self) -> str:
        """The extraction method's name (its hyper-parameters: metadata["method"])."""
        return str(self._record.method.get("name"))

    @property
    def model(self) -> str:
        """The model spec string ("mlp:64-16-10", "resnet20@3x32x32-10", "pkg.module:factory")."""
        return str(self._record.model["spec"])

    @property
    def seed(self) -> int:
        """The seed of the weights (and of the data split, score init and batch order at extraction)."""
        return int(self._record.init["seed"])

    @property
    def dataset(self) -> str:
        """The dataset the ticket was extracted on ("in-memory" for the caller's own tensors)."""
        return str(self._record.data["dataset"])

    @property
    def metrics(self) -> dict[str, Any]:
        """Test and validation accuracy and loss measured at extraction."""
        return dict(self._record.metrics)

    @property
    def path(self) -> Path | None:
        """The file the ticket was loaded from or last saved to; None until it is saved."""
        return self._path

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the ticket file (format v1, atomically), which `ticket evaluate/inspect/export` read."""
        # a ticket and its checkpoint shared as a folder find each other: the path is stored relative to the ticket
        path = _path_arg(path, "path")
        record = replace(self._record, checkpoint=saved_at(self._record.checkpoint, path))
        ticket_io.save(record, path, overwrite=overwrite)
        self._path = Path(path)
        return self._path

    def build(
        self,
        device: str = "auto",
        *,
        module: nn.Module | None = None,
        data: api_data.Data | None = None,
        weights: str | Path | None = None,
        trust_model_code: bool = False,
        data_dir: str | Path | None = None,
        threads: int | None = None,
    ) -> nn.Module:
        """The ticket's network as a plain nn.Module: weights regenerated as `ticket evaluate` does and checked
        against the recorded fingerprint, masks registered with apply_masks, in eval mode, parameters frozen.

        module: an instance of your own architecture for a ticket extracted from one (its weights are redrawn
        from the seed). BatchNorm statistics are recomputed for the masks from the extraction split (found
        through data_dir, or `data` for tickets of in-memory data), as evaluation does. threads: torch CPU threads
        while building (None: torch's own)."""
        _module_arg(module)
        with using(check_threads(threads, "threads")):
            net, _ = runs_build.rebuild(
                self._record, self._label, _path(weights, "weights"), self._policy(trust_model_code), module
            )
            masks = {n: self._record.masks[n] for n in net.names}
            if net.batchnorms and net.bn_statistics == "recalibrate":
                splits = None if data is None else self._splits(data)
                if splits is None:  # the ticket's own dataset
                    export.recalibrate(net, masks, self._record, self._label, _data_spec(data_dir))
                else:
                    net.calibration = splits.x_extract
                    net.calibrate(masks)
        net.to(runs_inputs.resolve_device(device))
        return apply_masks(net.module, masks)

    def evaluate(
        self,
        data: api_data.Data | None = None,
        *,
        device: str = "auto",
        module: nn.Module | None = None,
        weights: str | Path | None = None,
        trust_model_code: bool = False,
        data_dir: str | Path | None = None,
        threads: int | None = None,
    ) -> runs_evaluate.EvaluateResult:
        """What `ticket evaluate` reports, as an EvaluateResult: test and validation accuracy re-measured (identical
        to the CLI's on the CPU), next to those stored, whether they reproduced, sparsity and integrity. Read its
        attributes (`result.test.accuracy`), or the `--json` document: `result.to_document()`, or `result[...]`
        directly (`result["metrics"]["test"]["accuracy"]`).

        data: None for the ticket's own dataset and split; your tensors/Dataset/DataLoaders (split as extract
        splits them) for a ticket of in-memory data. threads: torch CPU threads for the measurement (None:
        torch's own), reported as `threads`."""
        _module_arg(module)
        with using(check_threads(threads, "threads")) as used:
            opened = runs_build.open_loaded(
                self._record,
                self._label,
                data=_data_spec(data_dir),
                device=device,
                weights=_path(weights, "weights"),
                policy=self._policy(trust_model_code),
                splits=None if data is None else self._splits(data),
                module=module,
            )
            result = runs_evaluate.evaluate_loaded(opened, self._label)
        return replace(result, threads=used)

    @property
    def _label(self) -> Path:
        return UNSAVED if self._path is None else self._path

    def _policy(self, trust_model_code: bool) -> ModelPolicy:
        return build_model_policy(trust_model_code=trust_model_code)

    def _splits(self, data: api_data.Data) -> Splits | None:
        """The caller's data split as it was at extraction (same sizes and seed), or checked against the ticket's
        dataset when it is a name."""
        d = self._record.data
        if isinstance(data, str):
            if data != d["dataset"]:
                raise UsageError(f"this ticket was extracted on {d['dataset']!r}, not {data!r}")
            return None
        g = api_data.given(data, d["split_seed"])
        if g.pools is None:  # ready splits: taken as they are
            return api_data.splits_for(g, None, None, d["split_seed"])
        return api_data.splits_for(g, d["n_extract"], d["n_val"], d["split_seed"])


def _path(p: str | Path | None, what: str = "path") -> str | None:
    return None if p is None else _path_arg(p, what)


def _path_arg(p: object, what: str) -> str:
    """A path argument as a string; anything but a str or os.PathLike is one UsageError line, as in the CLI."""
    if not isinstance(p, (str, os.PathLike)):
        raise UsageError(f"{what} must be a path (str or pathlib.Path), got {type(p).__name__}")
    text = os.fspath(p)
    if not isinstance(text, str):
        raise UsageError(f"{what} must be a text path, got {type(text).__name__}")
    return text


def _module_arg(module: object) -> None:
    if module is not None and not isinstance(module, nn.Module):
        raise UsageError(f"module must be a torch.nn.Module, got {type(module).__name__}")


def _data_spec(data_dir: str | Path | None) -> DataSpec:
    """Where a ticket's registered dataset is found: data_dir, then $TICKET_DATA, the cache, system copies."""
    return DataSpec(**data_location(_path(data_dir, "data_dir"), False))


def load(path: str | Path) -> Ticket:
    """Read and validate a ticket file (anything wrong with it raises TicketFileError, one line)."""
    path = _path_arg(path, "path")
    return Ticket(ticket_io.load(path), Path(path))


def extract(
    model: str | nn.Module,
    data: api_data.Data = "digits",
    *,
    method: str | None = None,
    sparsity: float | None = None,
    epochs: int | None = None,
    seed: int | None = None,
    progress: bool | Progress = True,
    device: str = "auto",
    threads: int | None = None,
    config: str | Path | None = None,
    **options: Any,
) -> Ticket:
    """Extract a ticket, as `ticket extract` does, and return it unsaved (Ticket.save writes it).

    model: a spec string ("mlp:64-16-10", "resnet20", "pkg.module:factory") or your own nn.Module (its Linear
    and Conv2d weights and biases are masked; their values are redrawn from the seed, as for a factory). data:
    a dataset name ("digits", "fashion-mnist"), or your examples as (x, y) tensors, a Dataset or a DataLoader
    (a seeded 20% held out for testing, then n_val/n_extract drawn), {"train": ..., "test": ...}, or the three
    splits as {"extract": ..., "val": ..., "test": ...}. options: every other `ticket extract` option by its
    Python name (lr=, weight_decay=, aug_density=, layer_densities=[...], data_dir=, ...), checked as the CLI
    checks them (UsageError with the same message). progress: a bar on stderr, False, or a callable per epoch.
    threads: torch CPU threads for the run (None: the config file's, else torch's own), restored afterwards."""
    if not isinstance(model, (str, nn.Module)):
        raise UsageError(f"model must be a spec string or a torch.nn.Module, got {type(model).__name__}")
    config = _path(config, "config")
    check_keywords(RUN, options, "extract", reserved=NOT_OPTIONS)
    flags = dict(options, method=method, sparsity=sparsity, epochs=epochs, seed=seed, device=device, threads=threads)
    given = None
    if isinstance(data, str):
        flags["dataset"] = data
    if isinstance(model, str):
        flags["model"] = model
    settings = merge_settings(flags, config)
    if not isinstance(data, str):
        given = api_data.given(data, settings["seed"])
    spec = build_extract_spec(settings, None if given is None else given.info)
    if isinstance(model, nn.Module):
        spec = replace(spec, model=module_spec(model))
    splits = None
    if given is not None:
        splits = api_data.splits_for(given, settings["n_extract"], settings["n_val"], spec.data.split_seed)
    with (
        _progress(progress, spec.method.name, spec.method.epochs) as callback,
        using(check_threads(settings["threads"], "threads")),
    ):
        run = runs_extract.run_extraction(
            spec, progress=callback, splits=splits, module=model if isinstance(model, nn.Module) else None
        )
    return Ticket(run.ticket)


def module_spec(module: nn.Module) -> ModelSpec:
    """The model record of a caller's module: its class as a factory "pkg.module:Class" (which `ticket evaluate
    --trust-model-code` can rebuild when that class is importable and takes no arguments)."""
    if masked(module):
        raise UsageError("the module carries masks; remove_masks(module) first")
    cls = type(module)
    return parse_model(f"{cls.__module__}:{cls.__name__}")


@contextmanager
def _progress(progress: bool | Progress, label: str, epochs: int) -> Iterator[Progress | None]:
    if callable(progress):
        with nullcontext(progress) as given:
            yield given
        return
    quiet = not progress or not METHODS.get(label).uses_epochs
    with report.epoch_progress(epochs, quiet=quiet, label=label) as bar:
        yield bar


def _option_names() -> list[str]:
    return sorted(set(RUN.config_keys()) - NOT_OPTIONS)


def list_methods() -> list[str]:
    """The extraction methods, by name (what `method=` takes)."""
    return list(METHODS.names())


def list_models() -> list[str]:
    """The built-in model families, by name (the first part of a model spec string)."""
    return list(MODELS.names())


def list_datasets() -> list[str]:
    """The registered datasets, by name (what `data=` takes as a string)."""
    return list(DATASETS.names())


def extract_options() -> dict[str, Any]:
    """Every extract option by its Python name, with its default (None: decided by the dataset or method)."""
    defaults = RUN.defaults()
    return {k: defaults[k] for k in _option_names()}
