"""Building the network a run works on: a fresh one from specs (seeded init or a weights file), or a ticket's,
rebuilt and checked against what the ticket records, then opened with its masks and data splits on a device.

What a rebuilt network must match is checked in checks.py; the weights file, device and data in inputs.py."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from ticketcli.data.datasets import Splits, load_splits
from ticketcli.data.memory import IN_MEMORY
from ticketcli.data.registry import DATASETS
from ticketcli.errors import TicketFileError, UsageError
from ticketcli.models.budget import Budget, check_param_count
from ticketcli.models.build import build_model, frozen_copy, planned_shapes
from ticketcli.models.init import INIT_SCHEMES, init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.runs import checks as runs_checks
from ticketcli.runs.inputs import check_input_shape, load_checkpoint, resolve_device
from ticketcli.seeding import fingerprint
from ticketcli.specs.run import MODULE_INIT, DataSpec, InitSpec, ModelPolicy, ModelSpec, ReaderSpec, RunSpec
from ticketcli.ticketfile import ticket as ticket_io


def build_net(
    model: ModelSpec,
    init: InitSpec,
    weights_path: str | None,
    limits: Budget = Budget(),
    module: nn.Module | None = None,
) -> tuple[MaskedNet, dict[str, torch.Tensor]]:
    """The frozen network (on CPU) and its weights (drawn from init, or loaded from weights_path).

    A built-in model over the budget (its parameters and memory, worked out from the spec alone: budget.py) is
    refused before anything is built; a user's factory (run because the user named it) is counted once built.
    `module`: the caller's own nn.Module (the Python API) instead of the factory, used as a frozen copy (the
    caller's stays untouched)."""
    if model.arch != "user":
        planned_shapes(model, limits)
    module = build_model(model) if module is None else frozen_copy(module)
    if model.arch == "user":
        check_param_count(model, sum(p.numel() for p in module.parameters()), limits.max_params)
    weights = init_weights(module, init) if weights_path is None else load_checkpoint(weights_path, module)
    net = MaskedNet(module, model)
    net.load_weights(weights)
    return net, weights


def run_budget(spec: RunSpec) -> Budget:
    """What an extraction may cost: its limits at its training batch size."""
    return Budget(spec.max_params, spec.max_memory, train_batch=spec.method.batch_size)


def policy_budget(policy: ModelPolicy) -> Budget:
    """What rebuilding a ticket may cost: the policy's limits at the batch size of the command that rebuilds it."""
    return Budget(policy.max_params, policy.max_memory, train_batch=policy.train_batch)


def ticket_model(tk: ticket_io.Ticket, path: Path, policy: ModelPolicy) -> ModelSpec:
    """The ticket's model spec, parsed, once the policy allows building it: a factory the ticket names is never
    imported unless the user opted in (--trust-model-code, or --model naming that same factory)."""
    try:
        model = parse_model(tk.model.spec)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    if policy.model is not None:
        given = parse_model(policy.model)
        if model.arch != "user" or given.factory != model.factory:
            raise UsageError(
                f"--model {policy.model[:80]} is not this ticket's model ({model.to_string()[:80]})",
                hint="with a ticket, --model only confirms the model factory the ticket names",
            )
    elif model.arch == "user" and not policy.trust_model_code:
        module = str(model.factory).partition(":")[0]
        raise UsageError(
            f"{path} names the model factory {model.factory}: rebuilding it would import and run "
            f"module {module!r}, which a ticket alone never does",
            hint=f"if you trust this ticket, pass --trust-model-code or --model {model.factory}",
        )
    return model


def rebuild(
    tk: ticket_io.Ticket,
    path: Path,
    weights_path: str | None,
    policy: ModelPolicy = ModelPolicy(),
    module: nn.Module | None = None,
) -> tuple[MaskedNet, dict[str, torch.Tensor]]:
    """The ticket's network from its spec and seed (or checkpoint), checked against shapes and fingerprint.

    Refused before anything runs or is allocated: masks that no longer match their recorded digest, a factory
    the policy does not allow importing, a model over policy.max_params or whose shapes differ from the ticket's.
    `module`: the caller's own nn.Module for a factory's ticket (nothing is imported), weights drawn as for it."""
    ticket_io.require_intact(tk, path)
    model = ticket_model(tk, path, policy if module is None else replace(policy, trust_model_code=True))
    if module is not None and model.arch != "user":
        raise UsageError(f"{path} is a ticket of the built-in model {model.to_string()[:80]}; it takes no module")
    try:
        INIT_SCHEMES.get(tk.init.scheme)
    except UsageError as e:
        raise TicketFileError(f"{path}: {e}") from None
    runs_checks.check_planned(tk, model, path, policy_budget(policy))
    init = tk.init.spec()
    if tk.checkpoint is not None:
        weights_path = runs_checks.checkpoint_file(tk, path, weights_path, policy.max_params)
    elif weights_path is not None:
        raise UsageError(f"{path} was built from seed {init.seed}; it takes no --weights")
    try:
        net, weights = build_net(model, init, weights_path, policy_budget(policy), module)
    except UsageError as e:  # the factory's import among them: its hint says where the module must be
        raise TicketFileError(f"{path}: {e}", hint=e.hint) from None
    runs_checks.check_user_model(model, tk.model, net, path)
    runs_checks.batchnorm_convention(tk.model, net, path)
    if net.shapes() != tk.shapes:
        raise TicketFileError(
            f"{path}: mask shapes do not match model {model.to_string()[:80]} "
            f"({runs_checks.shape_difference(tk.shapes, net.shapes())})"
        )
    fp = fingerprint(weights)
    if fp != tk.weights_sha256 and module is not None and init.scheme == MODULE_INIT:
        raise UsageError(
            f"{path} keeps the weights of the module it was extracted from (init {MODULE_INIT}), and this module "
            f"holds others (fingerprint {fp[:12]}, ticket {tk.weights_sha256[:12]})",
            hint="pass the module the ticket was extracted from, or one holding the same weights",
        )
    if fp != tk.weights_sha256:
        raise TicketFileError(
            f"{path}: weights fingerprint mismatch (rebuilt {fp[:12]}, ticket {tk.weights_sha256[:12]}); "
            f"the network cannot be reproduced here (ticket made with torch {tk.created_by.torch}, "
            f"this is torch {torch.__version__})"
        )
    return net, weights


@dataclass
class OpenTicket:
    """A loaded ticket with its rebuilt network (initial weights), masks and data splits, all on `device`."""

    ticket: ticket_io.Ticket
    net: MaskedNet
    weights: dict[str, torch.Tensor]  # the initial weights (CPU), fingerprint-checked
    masks: dict[str, torch.Tensor]  # param -> bool mask on device
    splits: Splits
    device: torch.device


def open_ticket(path: str | Path, reader: ReaderSpec = ReaderSpec()) -> OpenTicket:
    """Load and validate a ticket, rebuild its network and its own data splits (evaluate, train-weak), as `reader`
    says: where the data is, the device, the checkpoint, the model policy."""
    path = Path(path)
    tk = ticket_io.load(path, max_params=reader.policy.max_params)
    return open_loaded(tk, path, reader)


def open_loaded(
    tk: ticket_io.Ticket,
    path: Path,
    reader: ReaderSpec = ReaderSpec(),
    *,
    splits: Splits | None = None,
    module: nn.Module | None = None,
) -> OpenTicket:
    """open_ticket for a ticket already read (`path` names it in messages); splits: the caller's data instead of
    the ticket's own dataset, module: the caller's nn.Module for a factory's ticket (rebuild)."""
    if splits is None:  # before anything is built
        check_own_dataset(tk, path)
    dev = resolve_device(reader.device)
    net, init_weights_ = rebuild(tk, path, reader.weights, reader.policy, module)
    if splits is None:
        splits = ticket_splits(tk, path, reader.data)
    check_input_shape(parse_model(tk.model.spec), splits, net)
    net.to(dev)
    masks = {n: m.to(dev) for n, m in tk.masks.items()}
    splits = splits.to(dev)
    net.calibration = splits.x_extract  # as at extraction: BatchNorm statistics recomputed from this split
    return OpenTicket(tk, net, init_weights_, masks, splits, dev)


def check_own_dataset(tk: ticket_io.Ticket, path: Path) -> None:
    """Refuse, before anything is built, a ticket whose data cannot be found from the ticket alone: the caller's
    in-memory examples (a ticket holds only their split sizes and seed; the examples must be passed again from
    Python) or a dataset this version does not know."""
    name = tk.data.dataset
    if name == IN_MEMORY:
        raise UsageError(
            f"{path} was extracted from in-memory data, which a ticket does not hold: evaluate it from Python with "
            f"tc.load(path).evaluate(data=...), passing the same examples"
        )
    if name not in DATASETS:
        raise TicketFileError(f"{path}: unknown dataset {name[:80]!r}")


def ticket_splits(tk: ticket_io.Ticket, path: Path, data: DataSpec) -> Splits:
    """The ticket's own extraction, validation and test splits, as its extraction drew them: its registered
    dataset (found through `data`'s search path) at the recorded sizes and split seed, normalised as the dataset
    is (data.py)."""
    check_own_dataset(tk, path)
    d = tk.data
    data = replace(data, name=d.dataset, n_extract=d.n_extract, n_val=d.n_val, split_seed=d.split_seed)
    if DATASETS.get(d.dataset).text:
        from ticketcli.runs.text import same_text, text_location

        data = text_location(tk, path, data)
        splits = load_splits(data)
        same_text(tk, path, splits, data)
        return splits
    return load_splits(data)
