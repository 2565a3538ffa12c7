"""Weight drift and activation sparsity (arXiv 2605.17659): train a model's weights from the seeded init (densely, or
only a ticket's surviving weights) with a chosen activation at every activation site (an MLP's hidden layers, a
ResNet's ReLUs, the MLP blocks of a ViT or GPT-nano; drift/sites.py) and log per layer, every few steps, the weight
mean, negative pre-activation share, activation sparsity, gradient statistics and activation spikes. It measures; it
asserts nothing about the outcome.

Every statistic at step t is computed on one fixed probe batch with the weights after t optimiser steps, so the
series move only because the weights move.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from ticketcli.contract.schema import JsonObject
from ticketcli.data.text import Corpus, block_count, load_corpus
from ticketcli.drift import control as control_
from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.drift.inputs import Inputs, TextInputs
from ticketcli.drift.keep import Live, RunKeeper, add_measurement
from ticketcli.drift.result import DriftControlResult, DriftResult, DriftSummary
from ticketcli.drift.sites import PerSite, drift_forward, measure_traced
from ticketcli.drift.spec import ControlSpec, DriftSpec, require_drift_model
from ticketcli.methods.base import Progress
from ticketcli.models import batchnorm
from ticketcli.models.gpt import gpt_numbers, perplexity, with_vocab
from ticketcli.models.masked import MaskedNet
from ticketcli.runs import build as runs_build
from ticketcli.runs import inputs as runs_inputs
from ticketcli.specs.run import DataSpec, ModelPolicy, ModelSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import WeightTrainer

CHUNK = 512  # examples per forward and backward pass of a measurement at most (drift's default batch size)


def logged_steps(steps: int, log_every: int) -> list[int]:
    """0, log_every, 2·log_every, ... and always the last step."""
    out = list(range(0, steps + 1, log_every))
    return out if out[-1] == steps else out + [steps]


def probe_chunk(net: MaskedNet, control: control_.ActivationControl | None, batch_size: int) -> int | None:
    """Examples per chunk of a measurement on the probe: CHUNK or the training batch size, whichever is smaller (a
    measurement then needs no more memory than a training step), or the whole probe (None) when its examples
    interact, so that chunks would change the numbers: BatchNorm normalising with the batch's statistics, and
    percentile centering before its first statistics (a pass then centres on its own batch's quantile)."""
    if net.batchnorms or (control is not None and control.spec.mode == "percentile" and not control.quantiles):
        return None
    return min(CHUNK, batch_size)


def drift_one(
    net: MaskedNet,
    masks: dict[str, torch.Tensor] | None,
    spec: DriftSpec,
    inputs: Inputs | TextInputs,
    *,
    on_log: Callable[[int, JsonObject, dict[str, torch.Tensor]], None] | None = None,
    per_site: PerSite | None = None,
    control: control_.ActivationControl | None = None,
    on_step: Callable[[int], None] | None = None,
    keeper: RunKeeper | None = None,
    seed: int = 0,
    on_restore: Callable[[int], None] | None = None,
) -> JsonObject:
    """Train net's weights (only the kept ones with masks) for spec.steps and return the logged series;
    on_log(step, statistics, effective weights) runs at every logged step, on_step(step) after every other step.
    control: activation-sparsity control at every activation site (in place of per_site), in training and in the
    measurements; its summary lands in series["act_control"]. keeper: the run dir (drift/keep.py) that records each
    measurement of `seed` and the state, and on a resume puts back what it holds before the loop goes on;
    on_restore(step) then says which step the seed goes on after (the progress counts those steps as done, not as
    timed)."""
    activation = ACTIVATIONS.get(spec.activation)
    site_fn = per_site if control is None else control.per_site
    forward = drift_forward(net, lambda h: activation.fn(h, spec.clip), site_fn)
    loss_fn = LOSSES.get(spec.loss)
    trainer = WeightTrainer(net, masks, spec.optim)
    keep = None if trainer.masks is None else {n: m.bool() for n, m in trainer.masks.items()}
    series: JsonObject = {"steps": [], "loss": [], "accuracy": [], "layers": {}}
    todo = set(logged_steps(spec.steps, spec.log_every))

    def log(step: int) -> None:
        eff = trainer.effective()
        m = measure_traced(
            eff,
            keep,
            *inputs.probe,
            forward=forward,
            exact_zeros=activation.exact_zeros,
            zero_threshold=spec.zero_threshold,
            loss_fn=loss_fn,
            chunk=probe_chunk(net, control, spec.batch_size),
        )
        if inputs.text:
            m["perplexity"] = perplexity(m["loss"])
        for layer, s in m["layers"].items():
            out = series["layers"].get(layer, {})
            s["weight_drift"] = s["weight_mean"] - out["weight_mean"][0] if out.get("weight_mean") else 0.0
            initial = s["weight_std"] if step == 0 else out["initial_std"]
            s["weight_drift_std"] = s["weight_drift"] / initial if initial > 0 else None
        add_measurement(series, step, m, inputs.text)
        if keeper is not None:
            keeper.record(seed, step, m, inputs.text)
        if on_log is not None:
            on_log(step, m, {n: w.detach() for n, w in eff.items()})

    # +norm=batch: training steps and probe measurements alike normalise with their own batch's statistics
    hint = "choose a --batch-size and --probe-size of 2 or more (and, with --inputs data, no final batch of 1)"
    check: Callable[[int], None] = partial(batchnorm.check_batch, hint=hint) if net.batchnorms else (lambda n: None)
    check(inputs.probe[1].numel())
    with batchnorm.statistics(net.batchnorms, net.bn_statistics, "batch"):
        live = Live(net, trainer, inputs, control, forward)
        resumed = None if keeper is None else keeper.begin(seed, live, series)
        if resumed is None:
            log(0)
        elif on_restore is not None:
            on_restore(resumed[0])
        if resumed is not None and resumed[0] == spec.steps:  # a seed the run dir holds whole: series, summary
            if control is not None:
                series["act_control"] = resumed[1]
            return series
        for step in range(1 if resumed is None else resumed[0] + 1, spec.steps + 1):
            xb, yb = inputs.next()
            check(xb.shape[0])
            with nullcontext() if control is None else control.training_step():
                trainer.step(xb, yb, loss_fn, forward=forward)
            if step in todo:
                log(step)
            elif on_step is not None:
                on_step(step)
            if keeper is not None:
                keeper.after_step(step)
        if control is not None:
            zero = (lambda a: a == 0) if activation.exact_zeros else (lambda a: a.abs() < spec.zero_threshold)
            series["act_control"] = control.summary(forward, trainer.effective(), inputs.probe[0], zero)
        if keeper is not None:
            keeper.finish(series.get("act_control"))
    return series


def _mean_std(values: list[Any]) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    if not v:
        return None, None
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return mean, std


def summarise(runs_: list[JsonObject]) -> JsonObject:
    """Mean and (sample) std across seeds of every series, step by step, and per layer the share of seeds whose
    weight mean ended below where it started."""

    def across(series: list[list[Any]]) -> JsonObject:
        pairs = [_mean_std(list(c)) for c in zip(*series)]
        return {"mean": [p[0] for p in pairs], "std": [p[1] for p in pairs]}

    first = runs_[0]
    layers = {}
    for layer, metrics in first["layers"].items():
        layers[layer] = {
            k: across([r["layers"][layer][k] for r in runs_]) for k, v in metrics.items() if isinstance(v, list)
        }
        layers[layer]["negative_drift_share"] = sum(
            r["layers"][layer]["weight_mean"][-1] < r["layers"][layer]["weight_mean"][0] for r in runs_
        ) / len(runs_)
    out = {
        "steps": first["steps"],
        "loss": across([r["loss"] for r in runs_]),
        "accuracy": across([r["accuracy"] for r in runs_]),
        "layers": layers,
    }
    if "perplexity" in first:
        out["perplexity"] = across([r["perplexity"] for r in runs_])
    return out


def _inputs(
    spec: DriftSpec, corpus: Corpus | None, model: ModelSpec, data: DataSpec, seed: int, device: torch.device
) -> Inputs | TextInputs:
    if corpus is None:
        return Inputs(spec, model, data, seed, device)
    return TextInputs(spec, corpus, gpt_numbers(model)["c"], seed, device)


def _corpus_record(corpus: Corpus, inputs: Inputs | TextInputs) -> JsonObject:
    """The text a character-level run trained on (the last seed's split sizes: every seed's are the same)."""
    blocks = {"train_blocks": inputs.n_train, "val_blocks": inputs.n_val} if isinstance(inputs, TextInputs) else {}
    return {"sources": list(corpus.sources), "characters": corpus.ids.numel(), "vocab": len(corpus.vocab), **blocks}


@dataclass(frozen=True)
class Job:
    """One seed's training: its network (a ticket's rebuilt one, or built from the seed), the ticket's masks (None:
    dense), and the model and data it trains on."""

    seed: int
    net: MaskedNet
    masks: dict[str, torch.Tensor] | None
    model: ModelSpec
    data: DataSpec


@dataclass(frozen=True)
class Told:
    """A seed's progress reports, its steps counted after the `base` steps of the seeds before it."""

    progress: Progress | None
    base: int

    def log(self, step: int, m: JsonObject, _weights: dict[str, torch.Tensor]) -> None:
        """A logged step: the probe's loss and accuracy, and the mean sparsity of the hidden sites."""
        if self.progress is not None:
            hidden = [s["sparsity"] for s in m["layers"].values() if "sparsity" in s]
            sparsity = sum(hidden) / len(hidden) if hidden else 0.0
            stats = {"loss": m["loss"], "accuracy": m["accuracy"], "sparsity": sparsity}
            self.progress({"epoch": self.base + step, "unit": "step", **stats})

    def step(self, step: int) -> None:
        if self.progress is not None:  # a step between logged ones: the bar moves, the plain lines show the ETA
            self.progress({"epoch": self.base + step, "unit": "step"})

    def restore(self, step: int) -> None:
        if self.progress is not None:  # steps the run dir held: done, but not run by this process
            self.progress({"epoch": self.base + step, "unit": "step", "restored": True})


def run_drift(
    spec: DriftSpec,
    *,
    ticket: str | Path | None = None,
    weights: str | None = None,
    progress: Progress | None = None,
    policy: ModelPolicy = ModelPolicy(),
    control: ControlSpec | None = None,
    run_one: Callable[..., JsonObject] | None = None,
    keeper: RunKeeper | None = None,
) -> DriftResult:
    """Run spec for every seed (or once on a ticket's rebuilt network, training only its kept weights); a
    DriftControlResult under `control`.

    policy: whether a ticket's factory may be imported (drift takes built-in models only, so it never is) and the
    size limit. control: activation-sparsity control (a fresh one per run). run_one: drift_one's stand-in
    (relufy.relufy_one). keeper: the --run-dir's (drift/keep.py), which keeps every seed in turn."""
    device = runs_inputs.resolve_device(spec.device)
    policy = replace(policy, train_batch=spec.batch_size)  # what the budget weighs (budget.py)
    jobs: list[Job] = []
    integrity, corpus = None, None
    if ticket is not None:
        path = Path(ticket)
        tk = ticket_io.load(path, max_params=policy.max_params)
        ticket_io.require_intact(tk, path)
        model = runs_build.ticket_model(tk, path, policy)  # refuses an untrusted factory before anything else
        require_drift_model(model.arch)
        net, _ = runs_build.rebuild(tk, path, weights, policy)
        integrity = tk.integrity
        d = tk.data
        data = replace(spec.data, name=d.dataset, n_extract=d.n_extract, n_val=d.n_val, split_seed=d.split_seed)
        jobs.append(Job(tk.init.seed, net, tk.masks, model, data))
        spec = replace(spec, model=model, data=data, seeds=(tk.init.seed,), init=tk.init.spec())
    else:
        corpus = None if spec.text is None else load_corpus(spec.text)
        if corpus is not None:  # the text's character set sizes the model; a too short text is refused first
            block_count(corpus, gpt_numbers(spec.model)["c"])
            spec = replace(spec, model=with_vocab(spec.model, len(corpus.vocab)))
        for seed in spec.seeds:
            net, _ = runs_build.build_net(
                spec.model, replace(spec.init, seed=seed), None, runs_build.policy_budget(policy)
            )
            jobs.append(Job(seed, net, None, spec.model, replace(spec.data, split_seed=seed)))

    t0, done, results = time.perf_counter(), 0, []
    for job in jobs:
        inputs = _inputs(spec, corpus, job.model, job.data, job.seed, device)
        job.net.to(device)
        masks = None if job.masks is None else {n: m.to(device) for n, m in job.masks.items()}
        told = Told(progress, done)
        ctl = None if control is None else control_.ActivationControl(control)
        kept: dict[str, Any] = (
            {} if keeper is None else {"keeper": keeper, "seed": job.seed, "on_restore": told.restore}
        )
        run = run_one or drift_one
        series = run(job.net, masks, spec, inputs, on_log=told.log, control=ctl, on_step=told.step, **kept)
        results.append({"seed": job.seed, "probe_n": int(inputs.probe[1].numel()), **series})
        done += series["steps"][-1]
    kind = DriftResult if control is None else DriftControlResult
    return kind(
        spec=spec,
        seeds=tuple(r["seed"] for r in results),
        probe_n=results[0]["probe_n"],
        ticket=None if ticket is None else str(ticket),
        device=str(device),
        wall_time_s=time.perf_counter() - t0,
        runs=tuple(results),
        summary=DriftSummary.of(summarise(results)),
        integrity=integrity,
        corpus=None if corpus is None else _corpus_record(corpus, inputs),
        act_control=None if control is None else control_.aggregate(control, [r["act_control"] for r in results]),
    )
