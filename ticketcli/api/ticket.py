"""A ticket in the Python API: `Ticket` (masks, provenance, metadata; save, build as a plain nn.Module, apply to a
module of the caller's, data splits, evaluate, export, inspect, bench) and `load`, which reads and validates a ticket
file: the command line's own workflows, with its errors raised instead of turned into exit codes."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from ticketcli.api import bench as api_bench
from ticketcli.api import data as api_data
from ticketcli.api.args import check_module_arg, parameter_difference, path_arg, reader_spec
from ticketcli.api.keywords import speaks_keywords
from ticketcli.api.masks import TicketMasks, apply_masks, check_module, masked
from ticketcli.api.saved import saved_path
from ticketcli.contract.schema import JsonObject
from ticketcli.data.datasets import Splits
from ticketcli.data.memory import IN_MEMORY
from ticketcli.errors import UsageError
from ticketcli.export import run as export
from ticketcli.export.run import ExportResult
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.runs import build as runs_build
from ticketcli.runs import evaluate as runs_evaluate
from ticketcli.runs import inputs as runs_inputs
from ticketcli.runs.inspect import InspectResult, inspect_ticket
from ticketcli.runtime.threads import using
from ticketcli.specs.run import ReaderSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import MetricsRecord

UNSAVED = Path("<unsaved ticket>")  # how messages name a ticket that extract() returned and nobody saved yet
EXPORT_FLAGS = {"force": "overwrite", "format": "fmt", "out": "path"}  # `ticket export`'s flags, Ticket.export's words


class Ticket:
    """A strong lottery ticket: bool masks over frozen weights that its seed regenerates, and its provenance."""

    def __init__(self, record: ticket_io.Ticket, path: Path | None = None):
        self._record = record
        self._path = path

    def __repr__(self) -> str:
        where = "unsaved" if self._path is None else str(self._path)
        return f"Ticket({self.method}, {self.model}, seed {self.seed}, sparsity {self.sparsity:.4f}, {where})"

    @property
    def masks(self) -> TicketMasks:
        """Parameter name -> bool mask of its shape (True = kept), in the model's named_parameters() order (copies:
        changing them does not change the ticket). A dict that also carries the ticket's weights fingerprint, which
        apply_masks checks a module's weights against."""
        r = self._record
        recorded = r.model.parameters  # a factory's every parameter; a built-in model's are all masked
        names = tuple(recorded) if recorded is not None else tuple(r.shapes)
        return TicketMasks({n: m.clone() for n, m in r.masks.items()}, r.weights_sha256, names)

    @property
    def metadata(self) -> JsonObject:
        """Everything the file records beside the masks (model, init, method, data, sparsity, metrics, ...)."""
        r = self._record
        keys = ("model", "init", "weights_sha256", "method", "data", "sparsity", "metrics", "created_by", "checkpoint")
        meta = {k: v if isinstance(v, str) else v.to_json() for k in keys if (v := getattr(r, k)) is not None}
        return {**meta, "shapes": r.shapes, "masks_sha256": r.masks_sha256, "integrity": r.integrity}

    @property
    def sparsity(self) -> float:
        """The achieved sparsity (fraction of masked-out weights over all masked parameters)."""
        achieved = self._record.sparsity.achieved
        if achieved is None:  # a hand-made ticket that records none: counted from the masks
            masks = self._record.masks.values()
            return 1.0 - sum(int(m.sum()) for m in masks) / max(1, sum(m.numel() for m in masks))
        return float(achieved)

    @property
    def method(self) -> str:
        """The extraction method's name (its hyper-parameters: `record.method.option(name)`, or metadata["method"])."""
        return self._record.method.name

    @property
    def model(self) -> str:
        """The model spec string ("mlp:64-16-10", "resnet20@3x32x32-10", "pkg.module:factory")."""
        return self._record.model.spec

    @property
    def seed(self) -> int:
        """The seed of the weights (and of the data split, score init and batch order at extraction)."""
        return self._record.init.seed

    @property
    def dataset(self) -> str:
        """The dataset the ticket was extracted on ("in-memory" for the caller's own tensors)."""
        return self._record.data.dataset

    @property
    def metrics(self) -> MetricsRecord:
        """Test and validation accuracy and loss measured at extraction (`t.metrics.test.accuracy`, `.loss`,
        `.correct`, `.n`; `.device`, ...); as the file stores it: metadata["metrics"]."""
        return self._record.metrics

    @property
    def record(self) -> ticket_io.Ticket:
        """The ticket's typed records as read (model, init, method, data, sparsity, metrics, created_by,
        checkpoint); the masks are `masks`."""
        return replace(self._record, masks={})

    @property
    def path(self) -> Path | None:
        """The file the ticket was loaded from or last saved to; None until it is saved."""
        return self._path

    @speaks_keywords("Ticket.save", aliases={"force": "overwrite"})
    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Write the ticket file (format v1, atomically), which `ticket evaluate/inspect/export` read."""
        return self._write(path_arg(path, "path"), overwrite)

    def _write(self, path: str, overwrite: bool, checked_at_start: bool = False) -> Path:
        """save(); checked_at_start: extract(out=) checked `path` before its work (files.atomic.write_owned)."""
        cp = self._record.checkpoint  # stored relative to the ticket: shared as a folder, the two find each other
        record = replace(self._record, checkpoint=None if cp is None else cp.saved_at(path))
        ticket_io.save(record, path, overwrite=overwrite, checked_at_start=checked_at_start)
        self._path = Path(path)
        return self._path

    @speaks_keywords("Ticket.build")
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
        check_module_arg(module)
        reader = self._reader(device, weights, trust_model_code, data_dir, threads)
        net, masks = self._network(module, data, reader)
        net.to(runs_inputs.resolve_device(reader.device))
        return apply_masks(net.module, masks, check_weights=False)  # rebuild checked the fingerprint

    @speaks_keywords("Ticket.apply")
    def apply(
        self,
        module: nn.Module,
        *,
        data: api_data.Data | None = None,
        weights: str | Path | None = None,
        trust_model_code: bool = False,
        data_dir: str | Path | None = None,
        threads: int | None = None,
    ) -> nn.Module:
        """Make `module` (your instance of the ticket's architecture: the same parameter names and shapes, and
        buffers) the ticket's network: the ticket's weights, rebuilt and fingerprint-checked as build() rebuilds
        them (BatchNorm statistics recomputed for the masks), are copied into it, its masks applied with
        apply_masks, and it is put in eval mode; returns `module`. Its forward pass then gives the logits of
        build(). Its parameters keep their device, dtype and requires_grad. A module whose parameters differ from
        the ticket's network is refused (UsageError naming them) and left unchanged.

        data, weights, trust_model_code, data_dir, threads: as for build(). For a ticket of your own architecture
        (a factory or a module), `module` also serves as that architecture (a copy is built; no code is imported)."""
        check_module(module)
        if masked(module):
            raise UsageError("the module already carries masks; remove_masks(module) first")
        reader = self._reader("auto", weights, trust_model_code, data_dir, threads)
        net, masks = self._network(module if self._of_factory() else None, data, reader)
        theirs = {n: list(p.shape) for n, p in module.named_parameters()}
        ours = {n: list(p.shape) for n, p in net.module.named_parameters()}
        if theirs != ours:
            raise UsageError(
                f"the module is not the ticket's architecture {self.model[:80]}: {parameter_difference(ours, theirs)}"
            )
        try:
            module.load_state_dict(net.module.state_dict())
        except RuntimeError as e:  # buffers (BatchNorm statistics) missing, unexpected or misshapen
            raise UsageError(
                f"the module does not hold the ticket's network: {' '.join(str(e).split())[:300]}"
            ) from None
        return apply_masks(module, masks, check_weights=False).eval()  # the weights were just copied in

    @speaks_keywords("Ticket.splits")
    def splits(self, data: api_data.Data | None = None, *, data_dir: str | Path | None = None) -> Splits:
        """The ticket's extraction, validation and test splits exactly as its evaluation uses them (the same
        dataset normalisation, sizes and split seed), on the CPU: `x, y = t.splits().test`, or the attributes
        x_extract, y_extract, x_val, y_val, x_test, y_test, and `info` (dataset, sizes, split seed).

        data: None for the ticket's own dataset (found through data_dir, $TICKET_DATA, the cache, system copies);
        for a ticket of in-memory data, the same examples it was extracted from (split again as extract split
        them)."""
        splits = self._splits(self._data_for(data, "splits"))
        if splits is None:
            reader = self._reader("auto", None, False, data_dir, None)
            return runs_build.ticket_splits(self._record, self._label, reader.data)
        return splits

    def _network(
        self,
        module: nn.Module | None,
        data: api_data.Data | None,
        reader: ReaderSpec,
    ) -> tuple[MaskedNet, dict[str, torch.Tensor]]:
        """The ticket's network rebuilt on the CPU (weights fingerprint-checked, BatchNorm statistics recomputed for
        the masks), and its masks; no mask applied yet."""
        with using(reader.threads):
            net, _ = runs_build.rebuild(self._record, self._label, reader.weights, reader.policy, module)
            masks = {n: self._record.masks[n] for n in net.names}
            if net.batchnorms and net.bn_statistics == "recalibrate":
                splits = self._splits(self._data_for(data, "build"))
                if splits is None:  # the ticket's own dataset
                    export.recalibrate(net, masks, self._record, self._label, reader.data)
                else:
                    net.calibration = splits.x_extract
                    net.calibrate(masks)
        return net, masks

    @speaks_keywords("Ticket.evaluate")
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
        check_module_arg(module)
        given = self._data_for(data, "evaluate")
        reader = self._reader(device, weights, trust_model_code, data_dir, threads)
        with using(reader.threads) as used, api_data.labels_within_outputs():
            opened = runs_build.open_loaded(
                self._record,
                self._label,
                reader,
                splits=None if given is None else self._splits(given),
                module=module,
            )
            result = runs_evaluate.evaluate_loaded(opened, self._label)
        return replace(result, threads=used)

    @speaks_keywords("Ticket.export", aliases=EXPORT_FLAGS, valued=("fmt", "path"))
    def export(
        self,
        fmt: str,
        path: str | Path,
        *,
        overwrite: bool = False,
        with_preprocessing: bool = False,
        weights: str | Path | None = None,
        trust_model_code: bool = False,
        data_dir: str | Path | None = None,
        threads: int | None = None,
        layout: str = "auto",
    ) -> ExportResult:
        """Write the ticket's network (loaded or saved) as `ticket export` does; returns what its --json prints (an
        ExportResult: the file's size beside the dense checkpoint, kept/total, for ONNX the graph's check). fmt:
        "masked" (W ⊙ M), "prune", "csr", "masks", "sparse" (read by tc.load_sparse; layout: as --layout) or "onnx" (a
        .onnx path). overwrite: replace an existing file (checked first). with_preprocessing: ONNX only, the
        normalisation in the graph, which then takes raw values in [0, 1]. The rest: as for build()."""
        source, out = saved_path(self, "this ticket", "export"), path_arg(path, "path")
        reader = self._reader("cpu", weights, trust_model_code, data_dir, threads)
        write = functools.partial(export.export_ticket, with_preprocessing=with_preprocessing, layout=layout)
        with using(reader.threads) as used:
            result = write(source, fmt=fmt, out=out, reader=reader, overwrite=overwrite)
        return replace(result, threads=used)

    def inspect(self) -> InspectResult:
        """What `ticket inspect --json` prints of the ticket's file (loaded or saved), without data or weights:
        metadata, per-layer density, file size, integrity; as `tc.inspect(t.path)`."""
        return inspect_ticket(saved_path(self, "this ticket", "inspect"))

    bench = api_bench.bench  # what `ticket bench` reports (api/bench.py)

    @property
    def _label(self) -> Path:
        return UNSAVED if self._path is None else self._path

    def _reader(
        self,
        device: str,
        weights: str | Path | None,
        trust_model_code: bool,
        data_dir: str | Path | None,
        threads: int | None,
    ) -> ReaderSpec:
        """The keywords of build, apply, splits and evaluate as one ReaderSpec (args.reader_spec)."""
        return reader_spec(device, weights, trust_model_code, data_dir, threads)

    def _of_factory(self) -> bool:
        """Whether the ticket's model is the caller's own architecture (a factory or a module), not a built-in."""
        try:
            return parse_model(self.model).arch == "user"
        except UsageError:
            return False  # a spec that does not parse: rebuild refuses it, naming the ticket

    def _data_for(self, data: api_data.Data | None, call: str) -> api_data.Data | None:
        """`data` as given; for a ticket of in-memory data, which the ticket does not hold, refused when missing."""
        if data is None and self._record.data.dataset == IN_MEMORY:
            raise UsageError(
                f"this ticket was extracted from in-memory data, which a ticket does not hold: pass the same "
                f"examples as {call}(data=...), e.g. t.{call}(data=(x, y))"
            )
        return data

    def _splits(self, data: api_data.Data | None) -> Splits | None:
        """The caller's data split as it was at extraction (same sizes and seed), or checked against the ticket's
        dataset when it is a name (None: the ticket's own dataset)."""
        if data is None:
            return None
        d = self._record.data
        if isinstance(data, str):
            if data != d.dataset:
                raise UsageError(f"this ticket was extracted on {d.dataset!r}, not {data!r}")
            return None
        g = api_data.given(data, d.split_seed)
        if g.pools is None:  # ready splits: taken as they are
            splits = api_data.splits_for(g, None, None, d.split_seed)
        else:
            splits = api_data.splits_for(g, d.n_extract, d.n_val, d.split_seed)
        if self._of_factory() or parse_model(self.model).arch != "user":  # a spec that parses
            api_data.check_fits(parse_model(self.model), splits.x_extract, g.info.classes)
        return splits


@speaks_keywords("load")
def load(path: str | Path) -> Ticket:
    """Read and validate a ticket file (anything wrong with it raises TicketFileError, one line)."""
    path = path_arg(path, "path")
    return Ticket(ticket_io.load(path), Path(path))
