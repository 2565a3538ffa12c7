"""The checks a loaded ticket goes through against the network rebuilt for it: its planned size, names, shapes,
BatchNorm convention and recorded checkpoint. Each refusal is one line."""

from __future__ import annotations

import math
from pathlib import Path

from ticketcli.errors import TicketFileError, UsageError
from ticketcli.files.checkpoint import recorded_locations
from ticketcli.models import batchnorm, registry
from ticketcli.models.budget import Budget, check_param_count
from ticketcli.models.build import planned_shapes
from ticketcli.models.masked import MaskedNet
from ticketcli.seeding import file_sha256
from ticketcli.specs.run import ModelSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.ticketfile.record import ModelRecord


def batchnorm_convention(record: ModelRecord, net: MaskedNet, path: Path) -> None:
    """Set up net's BatchNorm as the ticket was evaluated: recalibrated as recorded, or, for tickets written
    before the record existed, the module's own statistics ("frozen")."""
    stored = record.batchnorm
    if stored is None:
        if net.batchnorms:
            net.bn_statistics = "frozen"
        return
    if not net.batchnorms:
        raise TicketFileError(
            f"{path}: the ticket records BatchNorm statistics but model {record.spec} has no BatchNorm layer"
        )
    try:
        net.calibration_batch = batchnorm.read_record(stored)
    except ValueError as e:
        raise TicketFileError(f"{path}: {e}") from None


def check_user_model(model: ModelSpec, record: ModelRecord, net: MaskedNet, path: Path) -> None:
    """Refuse a factory whose parameter names or shapes differ from those the ticket recorded."""
    if model.arch != "user":
        return
    stored = record.parameters
    if stored is None:
        raise TicketFileError(f"{path}: model {model.to_string()} lacks its recorded 'parameters'")
    now = net.param_shapes()
    missing, extra = sorted(set(stored) - set(now)), sorted(set(now) - set(stored))
    wrong = [f"{n} {list(stored[n])} -> {now[n]}" for n in stored if n in now and list(stored[n]) != now[n]]
    masked = net.names if record.masked is None else list(record.masked)
    if missing or extra or wrong or masked != net.names:
        detail = "; ".join(
            f"{k}: {', '.join(v)}"
            for k, v in (("missing", missing), ("unexpected", extra), ("shape changed", wrong))
            if v
        )
        raise TicketFileError(
            f"{path}: model {model.to_string()} no longer matches the ticket ({detail or 'masked parameters differ'})"
        )


def check_planned(tk: ticket_io.Ticket, model: ModelSpec, path: Path, limits: Budget) -> None:
    """Before anything real is built: the model's size against the budget and its masked parameters' names and
    shapes against the ticket's (a built-in model from its spec, then on the meta device; a factory by what the
    ticket recorded). A built-in model's masks hold exactly its parameters: a count that differs is refused as
    different shapes before the budget is weighed."""
    if model.arch == "user":
        recorded = tk.model.parameters or tk.shapes
        check_param_count(model, sum(math.prod(s) for s in recorded.values()), limits.max_params)
        return
    try:
        est = registry.estimate(model)
        assert est is not None  # a built-in model
        check_param_count(model, est.params, limits.max_params)
        bits = sum(math.prod(s) for s in tk.shapes.values())
        if bits != est.params:
            raise TicketFileError(
                f"{path}: mask shapes do not match model {model.to_string()[:80]} (the masks hold {bits:,} "
                f"weights, the model has {est.params:,} parameters)"
            )
        planned = planned_shapes(model, limits)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}", hint=e.hint) from None
    if planned != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} ({shape_difference(tk.shapes, planned)})"
        )


def shape_difference(ticket: dict[str, list[int]], model: dict[str, list[int]]) -> str:
    """The first difference between a ticket's shapes and a model's, for a one-line error."""
    missing, extra = [n for n in model if n not in ticket], [n for n in ticket if n not in model]
    if missing or extra:
        return (
            f"the model has {len(model)} masked parameters, the ticket {len(ticket)}; first missing: "
            f"{(missing or ['-'])[0][:80]}, first unexpected: {(extra or ['-'])[0][:80]}"
        )
    name = next(n for n in model if model[n] != ticket[n])
    return f"{name[:80]}: ticket {ticket[name]}, model {model[name]}"


CHECKPOINT_BYTES_PER_PARAM = 16  # float64 values and the container's overhead: a bigger file is no checkpoint here
CHECKPOINT_SLACK = 1 << 20  # headers, names and a user model's buffers (norm statistics) beside the parameters


def checkpoint_bound(tk: ticket_io.Ticket, max_params: int) -> int:
    """The largest file that can hold the weights of the model the ticket describes (its recorded parameters, or
    its masks' shapes, which check_planned matched to the model), never more than max_params allow."""
    n = sum(math.prod(s) for s in (tk.model.parameters or tk.shapes).values())
    return CHECKPOINT_BYTES_PER_PARAM * min(n, max_params) + CHECKPOINT_SLACK


def recorded_checkpoint(tk: ticket_io.Ticket, path: Path, max_params: int) -> str:
    """The checkpoint the ticket recorded, looked for next to the ticket first, then where the path points from
    here (checkpoint.recorded_locations). It is followed only to a plain file of a checkpoint's size: a ticket
    must not make a reader hash /proc/self/pagemap (size 0, endless) or any file of hundreds of GB."""
    stored = tk.checkpoint.path if tk.checkpoint else None  # a string when present (ticketfile/meta.py checks it)
    if not stored:
        raise UsageError(f"{path} was extracted from checkpoint weights; pass them with --weights FILE")
    places = recorded_locations(stored, path)
    found, size = None, None
    for place in places:
        try:
            if place.is_file():
                found, size = place, place.stat().st_size
                break
        except OSError:  # a name too long, a loop of links: not there
            continue
    if found is None or size is None:
        shown = [str(p)[:120] for p in places]
        where = f"not at {shown[0]}" if len(shown) == 1 else f"neither next to it ({shown[0]}) nor at {shown[1]}"
        raise UsageError(
            f"{path} was extracted from the checkpoint {stored[:120]}, which is {where}",
            hint="keep the checkpoint where the ticket records it, or pass it with --weights FILE",
        )
    if not 0 < size <= checkpoint_bound(tk, max_params):
        raise UsageError(
            f"{path} records the checkpoint {stored[:80]}, a file of {size} bytes, which cannot be it",
            hint="pass the checkpoint with --weights FILE",
        )
    return str(found)


def checkpoint_file(tk: ticket_io.Ticket, path: Path, given: str | None, max_params: int) -> str:
    """The weights file of a checkpoint ticket: --weights when given, else the one the ticket recorded; either
    way its sha256 (streamed in 1 MiB chunks) must be the recorded one."""
    assert tk.checkpoint is not None
    weights = given or recorded_checkpoint(tk, path, max_params)
    if not Path(weights).is_file():
        raise UsageError(f"--weights {weights[:120]}: no such file", hint="pass the ticket's checkpoint")
    size, bound = Path(weights).stat().st_size, checkpoint_bound(tk, max_params)
    if size > bound:  # hashing it would read all of it: far more than this model's weights can take
        raise UsageError(
            f"--weights {weights[:120]} is a file of {size} bytes, more than the {bound} bytes the weights of "
            f"{tk.model.spec[:80]} can take",
            hint="pass the ticket's checkpoint",
        )
    recorded = tk.checkpoint.sha256  # absent only in hand-made tickets: the weights fingerprint still checks
    digest = None if recorded is None else file_sha256(weights)
    if digest != recorded:
        raise TicketFileError(
            f"{weights[:120]} is not the checkpoint this ticket was extracted from (sha256 differs: file "
            f"{str(digest)[:12]}..., ticket {str(recorded)[:12]}...)"
        )
    return weights
