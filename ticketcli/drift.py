"""Weight drift and activation sparsity (arXiv 2605.17659): train an MLP's weights from the seeded init
(densely, or only a ticket's surviving weights) and log per layer, every few steps, the weight mean, negative
pre-activation share, activation sparsity, gradient statistics and activation spikes. It measures; it asserts
nothing about the outcome.

Every statistic at step t is computed on one fixed probe batch with the weights after t optimiser steps, so the
series move only because the weights move.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ticketcli import batchnorm, runs
from ticketcli import drift_control as control_
from ticketcli import ticket as ticket_io
from ticketcli.data import DATASETS, load_splits
from ticketcli.errors import UsageError
from ticketcli.methods import Progress
from ticketcli.models import MLP, MaskedNet, mlp_forward, parse_model
from ticketcli.registry import Registry
from ticketcli.seeding import generator
from ticketcli.specs import PAPER_HIDDEN, DataSpec, InitSpec, ModelPolicy, ModelSpec, check_setting
from ticketcli.train import Loss, WeightOptim, WeightTrainer


@dataclass(frozen=True)
class Activation:
    fn: Callable[[torch.Tensor, float], torch.Tensor]  # (pre-activation h, clip c) -> activation a
    exact_zeros: bool  # True: sparsity counts a == 0; False (smooth): |a| < the zero threshold


ACTIVATIONS: Registry[Activation] = Registry("activation")
ACTIVATIONS.register("relu")(Activation(lambda h, c: torch.relu(h), True))
ACTIVATIONS.register("gelu")(Activation(lambda h, c: F.gelu(h), False))
ACTIVATIONS.register("silu")(Activation(lambda h, c: F.silu(h), False))
ACTIVATIONS.register("relu2")(Activation(lambda h, c: torch.relu(h).square(), True))
ACTIVATIONS.register("relu2-clip")(Activation(lambda h, c: torch.relu(h).square().clamp(max=c), True))  # min(relu², c)
ACTIVATIONS.register("gelu2")(Activation(lambda h, c: F.gelu(h).square(), False))


def _mse(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error against one-hot targets, averaged over examples and classes."""
    return F.mse_loss(logits, F.one_hot(y, logits.shape[1]).to(logits.dtype))


LOSSES: Registry[Loss] = Registry("loss")
LOSSES.register("cross-entropy")(F.cross_entropy)
LOSSES.register("mse")(_mse)

INPUTS = ("data", "gaussian", "uniform")  # the dataset's images, N(0, 1) or U[0, 1] features with random labels


@dataclass(frozen=True)
class DriftSpec:
    model: ModelSpec
    data: DataSpec  # the dataset: sizes the default model; the inputs when inputs == "data"
    inputs: str = "data"  # data | gaussian | uniform
    loss: str = "cross-entropy"  # LOSSES name
    activation: str = "relu"  # ACTIVATIONS name, between hidden layers
    clip: float = 50.0  # c of relu2-clip
    optim: WeightOptim = field(default_factory=WeightOptim)
    batch_size: int = 512
    steps: int = 500
    log_every: int = 10
    probe_size: int = 1024  # fixed batch the statistics are measured on
    zero_threshold: float = 1e-2  # smooth activations: |a| below this counts as zero
    seeds: tuple[int, ...] = (0,)
    init: InitSpec = field(default_factory=InitSpec)  # its seed is replaced by each of seeds
    device: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        exact = ACTIVATIONS.get(self.activation).exact_zeros
        return {
            "model": self.model.to_string(),
            "dataset": self.data.name,
            "inputs": self.inputs,
            "loss": self.loss,
            "activation": self.activation,
            "clip": self.clip,
            "optimizer": self.optim.to_dict(),
            "batch_size": self.batch_size,
            "steps": self.steps,
            "log_every": self.log_every,
            "probe_size": self.probe_size,
            "zero_rule": "a == 0" if exact else f"|a| < {self.zero_threshold:g}",
            "zero_threshold": 0.0 if exact else self.zero_threshold,
            "init": self.init.to_dict(),
        }


# drift's numeric settings and their defaults; their ranges are specs.RANGES's
DRIFT_DEFAULTS = {
    "lr": 1e-3,
    "momentum": 0.0,
    "clip": 50.0,
    "batch_size": 512,
    "steps": 500,
    "log_every": 10,
    "probe_size": 1024,
    "zero_threshold": 1e-2,
}


def build_drift_spec(s: dict[str, Any], location: dict[str, Any]) -> DriftSpec:
    """Validate the command's settings (None = default) and freeze them; location is data_location()'s dict."""
    info = DATASETS.get(s.get("dataset") or "fashion-mnist")
    if s.get("model") is None:
        model = ModelSpec(widths=(info.in_features, *PAPER_HIDDEN, info.classes))
    else:
        model = parse_model(str(s["model"]))
    _require_mlp(model.arch)
    inputs = s.get("inputs") or "data"
    if inputs not in INPUTS:
        raise UsageError(f"unknown --inputs {inputs!r}; choose one of: {', '.join(INPUTS)}")
    loss, act = s.get("loss") or "cross-entropy", s.get("activation") or "relu"
    LOSSES.get(loss)
    ACTIVATIONS.get(act)
    optimizer = s.get("optimizer") or "adam"
    if optimizer not in ("adam", "sgd"):
        raise UsageError(f"unknown --optimizer {optimizer!r}; choose adam or sgd")
    num = {k: check_setting(k, _default(s, k, v)) for k, v in DRIFT_DEFAULTS.items()}
    optim = WeightOptim(name=optimizer, lr=num["lr"], momentum=num["momentum"])
    seeds = parse_seeds(_default(s, "seeds", "0"))
    return DriftSpec(
        model=model,
        data=DataSpec(name=info.name, **location),
        inputs=inputs,
        loss=loss,
        activation=act,
        clip=num["clip"],
        optim=optim,
        batch_size=num["batch_size"],
        steps=num["steps"],
        log_every=min(num["log_every"], num["steps"]),
        probe_size=num["probe_size"],
        zero_threshold=num["zero_threshold"],
        seeds=seeds,
        device=str(s.get("device") or "auto"),
    )


def _default(s: dict, key: str, value: Any) -> Any:
    return value if s.get(key) is None else s[key]


def parse_seeds(text: str) -> tuple[int, ...]:
    """'0,1,2' -> (0, 1, 2): distinct non-negative integers."""
    try:
        seeds = tuple(check_setting("seeds", int(t), "--seeds entries") for t in str(text).split(",") if t.strip())
    except ValueError:
        raise UsageError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds must be distinct comma-separated integers, got {text!r}")
    return seeds


def _require_mlp(arch: str) -> None:
    if arch != "mlp":
        raise UsageError(
            f"drift measures Linear-layer MLPs only, not {arch!r} models", hint="use --model mlp:784-256-256-256-10"
        )


def _masked_mean(t: torch.Tensor, keep: torch.Tensor | None) -> float:
    return float(t.mean() if keep is None else t[keep].mean())


def measure(
    params: dict[str, torch.Tensor],
    masks: dict[str, torch.Tensor] | None,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    act: Callable[[torch.Tensor], torch.Tensor],
    exact_zeros: bool,
    zero_threshold: float,
    loss_fn: Loss,
    forward: Callable | None = None,
) -> dict:
    """All statistics of the effective weights `params` (W * M) on the probe batch (x, y).

    `forward(x, params, act=, trace=)` is the MLP's pass (default: mlp_forward without norms or skips).
    Gradients are per-example: g = dℓ_i/dz_i = B · dL/dz for the batch-mean loss L and the linear output z (the
    pre-activation; with +norm the activation sees norm(z), and the pre-activation statistics use that). The mean
    weight gradient over kept entries splits exactly into mean(outer(E[g], E[a])) + mean(Cov(g, a)) (population
    covariance over the batch), computed separately in float64 from g and the layer input a."""
    n_layers = sum(1 for n in params if n.endswith(".weight"))
    forward = forward or partial(mlp_forward, n_layers=n_layers)
    eff = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    trace: list = []
    logits = forward(x, eff, act=act, trace=trace)
    loss = loss_fn(logits, y)
    weights = [eff[f"layers.{i}.weight"] for i in range(n_layers)]
    grads = torch.autograd.grad(loss, weights + [z for _, z, _, _ in trace])
    b = x.shape[0]
    layers = {}
    for i in range(n_layers):
        name = f"layers.{i}.weight"
        keep = None if masks is None else masks[name].bool()
        w = weights[i].detach()
        kept = w.flatten() if keep is None else w[keep]
        a_in = trace[i][0].detach().double()  # (B, in)
        g = grads[n_layers + i].double() * b  # (B, out): per-example dℓ/dh
        g_mean, a_mean = g.mean(0), a_in.mean(0)
        outer = torch.outer(g_mean, a_mean)  # (out, in)
        cov = (g - g_mean).T @ (a_in - a_mean) / b  # (out, in)
        s = {
            "weight_mean": float(kept.mean()),
            "weight_std": float(kept.std()) if kept.numel() > 1 else 0.0,
            "neg_weight_share": float((kept < 0).double().mean()),
            "grad_mean": _masked_mean(grads[i].double(), keep),
            "grad_outer": _masked_mean(outer, keep),
            "grad_cov": _masked_mean(cov, keep),
        }
        if i < n_layers - 1:
            h = trace[i][2].detach()  # (B, out) pre-activation: what the activation sees
            a = trace[i][3].detach()  # (B, out) activation (before any skip connection adds the layer's input)
            zero = a == 0 if exact_zeros else a.abs() < zero_threshold
            pos = h > 0
            rms = float(a.double().square().mean().sqrt())
            s.update(
                neg_preact_share=float((h < 0).double().mean()),
                sparsity=float(zero.double().mean()),
                dead_units=int(zero.all(0).sum()),
                grad_pos_preact=float(g[pos].mean()) if bool(pos.any()) else None,
                spike_ratio=float(a.abs().max()) / rms if rms > 0 else None,
            )
        layers[f"layers.{i}"] = s
    acc = float((logits.argmax(1) == y).double().mean())
    return {"loss": float(loss.detach()), "accuracy": acc, "layers": layers}


class Inputs:
    """Training batches and the fixed probe batch for one seed (data: the extraction split in seeded epochs, the
    probe from the validation split; gaussian/uniform: fresh random inputs and labels every step)."""

    def __init__(self, spec: DriftSpec, model: ModelSpec, data: DataSpec, seed: int, device: torch.device):
        self.spec, self.model, self.device = spec, model, device
        self.features, self.classes = model.widths[0], model.widths[-1]
        if spec.inputs == "data":
            splits = load_splits(data)
            runs.check_input_shape(model, splits)
            info = DATASETS.get(data.name)
            if self.classes < info.classes:
                raise UsageError(
                    f"model {model.to_string()} has {self.classes} outputs but {data.name} has {info.classes} classes"
                )
            self.x, self.y = splits.x_extract.to(device), splits.y_extract.to(device)
            self.probe = (splits.x_val[: spec.probe_size].to(device), splits.y_val[: spec.probe_size].to(device))
            self.g = generator(seed, "drift-batches")
            self.order, self.pos = torch.empty(0, dtype=torch.long), 0
        else:
            self.g = generator(seed, "drift-inputs")
            self.probe = self._random(spec.probe_size, generator(seed, "drift-inputs/probe"))

    def _random(self, n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.empty(n, self.features)
        x = x.normal_(generator=g) if self.spec.inputs == "gaussian" else x.uniform_(0.0, 1.0, generator=g)
        y = torch.randint(self.classes, (n,), generator=g)
        return x.to(self.device), y.to(self.device)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spec.inputs != "data":
            return self._random(self.spec.batch_size, self.g)
        if self.pos >= len(self.order):  # a new epoch in seeded order (the last partial batch included)
            self.order, self.pos = torch.randperm(self.y.numel(), generator=self.g).to(self.device), 0
        idx = self.order[self.pos : self.pos + self.spec.batch_size]
        self.pos += self.spec.batch_size
        return self.x[idx], self.y[idx]


def logged_steps(steps: int, log_every: int) -> list[int]:
    """0, log_every, 2·log_every, ... and always the last step."""
    out = list(range(0, steps + 1, log_every))
    return out if out[-1] == steps else out + [steps]


def drift_one(
    net: MaskedNet,
    masks: dict[str, torch.Tensor] | None,
    spec: DriftSpec,
    inputs: Inputs,
    *,
    on_log: Callable[[int, dict, dict[str, torch.Tensor]], None] | None = None,
    control: control_.ActivationControl | None = None,
) -> dict:
    """Train net's weights (only the kept ones with masks) for spec.steps and return the logged series;
    on_log(step, statistics, effective weights) runs at every logged step. control: activation-sparsity control at
    every activation site, in training and in the measurements (its summary lands in series["act_control"])."""
    if not isinstance(net.module, MLP):
        _require_mlp(net.spec.arch if net.spec is not None else type(net.module).__name__)
    activation = ACTIVATIONS.get(spec.activation)
    act = partial(activation.fn, c=spec.clip)
    mlp = net.module
    pass_ = partial(mlp_forward, n_layers=len(mlp.layers), norms=mlp.norms, skips=mlp.skips)  # +norm, +res
    train_pass: Callable[..., torch.Tensor] = pass_
    measure_pass: Callable[..., torch.Tensor] = pass_
    if control is not None:
        train_pass, measure_pass = control.pass_with(pass_, train=True), control.pass_with(pass_, train=False)
    forward = partial(train_pass, act=act)
    loss_fn = LOSSES.get(spec.loss)
    trainer = WeightTrainer(net, masks, spec.optim)
    keep = None if trainer.masks is None else {n: m.bool() for n, m in trainer.masks.items()}
    series: dict[str, Any] = {"steps": [], "loss": [], "accuracy": [], "layers": {}}
    todo = set(logged_steps(spec.steps, spec.log_every))

    def log(step: int) -> None:
        eff = trainer.effective()
        m = measure(
            eff,
            keep,
            *inputs.probe,
            act=act,
            exact_zeros=activation.exact_zeros,
            zero_threshold=spec.zero_threshold,
            loss_fn=loss_fn,
            forward=measure_pass,
        )
        series["steps"].append(step)
        series["loss"].append(m["loss"])
        series["accuracy"].append(m["accuracy"])
        for layer, s in m["layers"].items():
            out = series["layers"].setdefault(layer, {})
            if step == 0:
                out["initial_std"] = s["weight_std"]
            s["weight_drift"] = s["weight_mean"] - out["weight_mean"][0] if out.get("weight_mean") else 0.0
            s["weight_drift_std"] = s["weight_drift"] / out["initial_std"] if out["initial_std"] > 0 else None
            for k, v in s.items():
                out.setdefault(k, []).append(v)
        if on_log is not None:
            on_log(step, m, {n: w.detach() for n, w in eff.items()})

    # +norm=batch: training steps and probe measurements alike normalise with their own batch's statistics
    hint = "choose a --batch-size and --probe-size of 2 or more (and, with --inputs data, no final batch of 1)"
    check = partial(batchnorm.check_batch, hint=hint) if net.batchnorms else (lambda n: None)
    check(inputs.probe[1].numel())
    with batchnorm.statistics(net.batchnorms, net.bn_statistics, "batch"):
        log(0)
        for step in range(1, spec.steps + 1):
            xb, yb = inputs.next()
            check(xb.shape[0])
            trainer.step(xb, yb, loss_fn, forward=forward)
            if step in todo:
                log(step)
        if control is not None:
            zero = (lambda a: a == 0) if activation.exact_zeros else (lambda a: a.abs() < spec.zero_threshold)
            series["act_control"] = control.summary(pass_, trainer.effective(), inputs.probe[0], act, zero)
    return series


def _mean_std(values: list) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    if not v:
        return None, None
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return mean, std


def summarise(runs_: list[dict]) -> dict:
    """Mean and (sample) std across seeds of every series, step by step, and per layer the share of seeds whose
    weight mean ended below where it started."""

    def across(get: Callable[[dict], list]) -> dict:
        cols = list(zip(*(get(r) for r in runs_)))
        pairs = [_mean_std(list(c)) for c in cols]
        return {"mean": [p[0] for p in pairs], "std": [p[1] for p in pairs]}

    first = runs_[0]
    layers = {}
    for layer, metrics in first["layers"].items():
        layers[layer] = {
            k: across(lambda r, k=k, layer=layer: r["layers"][layer][k])
            for k, v in metrics.items()
            if isinstance(v, list)
        }
        layers[layer]["negative_drift_share"] = sum(
            r["layers"][layer]["weight_mean"][-1] < r["layers"][layer]["weight_mean"][0] for r in runs_
        ) / len(runs_)
    return {
        "steps": first["steps"],
        "loss": across(lambda r: r["loss"]),
        "accuracy": across(lambda r: r["accuracy"]),
        "layers": layers,
    }


def run_drift(
    spec: DriftSpec,
    *,
    ticket: str | Path | None = None,
    weights: str | None = None,
    progress: Progress | None = None,
    policy: ModelPolicy = ModelPolicy(),
    control: control_.ControlSpec | None = None,
    run_one: Callable[..., dict] | None = None,
) -> dict:
    """Run spec for every seed (or once on a ticket's rebuilt network, training only its kept weights).

    policy: whether a ticket's factory may be imported (drift takes MLPs only, so it never is) and the size limit.
    control: activation-sparsity control (a fresh one per run). run_one: drift_one's stand-in (relufy.relufy_one)."""
    device = runs.resolve_device(spec.device)
    jobs = []  # (seed, net, masks, model, data)
    integrity = None
    if ticket is not None:
        path = Path(ticket)
        tk = ticket_io.load(path)
        ticket_io.require_intact(tk, path)
        model = runs.ticket_model(tk, path, policy)  # refuses an untrusted factory before anything else
        _require_mlp(model.arch)
        net, _ = runs.rebuild(tk, path, weights, policy)
        integrity = tk.integrity
        data = replace(
            spec.data,
            name=tk.data["dataset"],
            n_extract=tk.data["n_extract"],
            n_val=tk.data["n_val"],
            split_seed=tk.data["split_seed"],
        )
        jobs.append((tk.init["seed"], net, tk.masks, model, data))
        spec = replace(
            spec,
            model=model,
            data=data,
            seeds=(tk.init["seed"],),
            init=InitSpec(scheme=tk.init["scheme"], k=float(tk.init["k"]), seed=tk.init["seed"]),
        )
    else:
        for seed in spec.seeds:
            net, _, _ = runs.build_net(spec.model, replace(spec.init, seed=seed), None, policy.max_params)
            jobs.append((seed, net, None, spec.model, replace(spec.data, split_seed=seed)))

    t0, done, results = time.perf_counter(), 0, []
    for seed, net, masks, model, data in jobs:
        inputs = Inputs(spec, model, data, seed, device)
        net.to(device)
        masks = None if masks is None else {n: m.to(device) for n, m in masks.items()}

        def on_log(step: int, m: dict, _w: dict, base: int = done) -> None:
            if progress is not None:
                hidden = [s["sparsity"] for s in m["layers"].values() if "sparsity" in s]
                progress(
                    {
                        "epoch": base + step,
                        "unit": "step",
                        "loss": m["loss"],
                        "accuracy": m["accuracy"],
                        "sparsity": sum(hidden) / len(hidden) if hidden else 0.0,
                    }
                )

        ctl = None if control is None else control_.ActivationControl(control, control_.hidden_sites(net.module))
        series = (run_one or drift_one)(net, masks, spec, inputs, on_log=on_log, control=ctl)
        results.append({"seed": seed, "probe_n": int(inputs.probe[1].numel()), **series})
        done += series["steps"][-1]
    return {
        **spec.to_dict(),
        "seeds": [r["seed"] for r in results],
        "probe_n": results[0]["probe_n"],
        "ticket": None if ticket is None else str(ticket),
        "masked": ticket is not None,
        "device": str(device),
        "wall_time_s": time.perf_counter() - t0,
        "runs": results,
        "summary": summarise(results),
        "integrity": integrity,
        **(
            {} if control is None else {"act_control": control_.aggregate(control, [r["act_control"] for r in results])}
        ),
    }
