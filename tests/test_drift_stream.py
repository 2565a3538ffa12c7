"""drift's measurements in streaming: the probe in chunks gives the statistics of the whole probe (float tolerance)
on every model family without batch-statistic normalisation, with and without a ticket's masks; the whole-probe
statistics agree with a direct float64 computation from one traced pass (unfolded patches, explicit per-sample
products); no chunk's tensors outlive it; chunks are refused where examples interact (BatchNorm on batch
statistics, percentile centering before its first statistics); drift_one's series do not depend on the chunk."""

from __future__ import annotations

import gc
import math
import weakref
from contextlib import nullcontext
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from ticketcli.drift import run as drift
from ticketcli.drift.activations import ACTIVATIONS
from ticketcli.drift.control import ActivationControl
from ticketcli.drift.options import build_drift_spec
from ticketcli.drift.sites import drift_forward, measure_traced
from ticketcli.drift.spec import ControlSpec, DriftSpec
from ticketcli.models.build import build_model
from ticketcli.models.init import init_weights
from ticketcli.models.masked import MaskedNet
from ticketcli.models.registry import parse_model
from ticketcli.models.sites import Trace
from ticketcli.specs.run import DataSpec, InitSpec

GPT = "gpt-nano:l2-d16-h2-c8-v12"
GRAD_KEYS = ("grad_mean", "grad_outer", "grad_cov", "grad_pos_preact")


def net_of(text: str) -> MaskedNet:
    spec = parse_model(text)
    if spec.arch != "gpt-nano":
        spec = spec.with_data((1, 8, 8), 10)
    module = build_model(spec)
    net = MaskedNet(module, spec)
    net.load_weights(init_weights(module, InitSpec(seed=0)))
    return net


def probe(model: str, n: int, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if model == GPT:
        return torch.randint(12, (n, 8), generator=g), torch.randint(12, (n * 8,), generator=g)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(10, (n,), generator=g)


def setting(model: str, act: str, masked: bool):
    net = net_of(model)
    fn = ACTIVATIONS.get(act)
    g = torch.Generator().manual_seed(5)
    masks = {n: (torch.rand(w.shape, generator=g) < 0.6).float() for n, w in net.weights.items()} if masked else None
    params = net.weights if masks is None else {n: w * masks[n] for n, w in net.weights.items()}
    kw = dict(
        forward=drift_forward(net, partial(fn.fn, c=50.0)),
        exact_zeros=fn.exact_zeros,
        zero_threshold=0.01,
        loss_fn=F.cross_entropy,
    )
    return net, params, masks, kw


def assert_same(a, b, path: str = "") -> None:
    """Equal up to float rounding: the gradient statistics come from float32 gradients summed in another order
    (rel 1e-4, or 1e-8 absolute for the means that are zero up to rounding); the rest is counted, or summed in
    float64 from float32 activations that a pass over fewer rows may round differently (rel 1e-6)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif a is None or isinstance(a, int) and not isinstance(a, bool) and isinstance(b, int):
        assert a == b, path
    else:
        key = path.rsplit(".", 1)[-1]
        rel, tol = (1e-4, 1e-8) if key in GRAD_KEYS else (1e-6, 1e-12)
        assert b == pytest.approx(a, rel=rel, abs=tol), path


MODELS = ["mlp:64-16-16-10", "mlp:64-16-16-10+res+norm=layer", "vit:p4-d16-l1-h2", GPT]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.slow
def test_chunks_give_the_whole_probes_statistics(model, masked):
    _, params, masks, kw = setting(model, "gelu" if masked else "relu", masked)
    x, y = probe(model, 11)
    whole = measure_traced(params, masks, x, y, **kw)
    for chunk in (1, 4) if model.startswith("mlp") else (4,):  # 4 leaves a last chunk of 3
        assert_same(whole, measure_traced(params, masks, x, y, chunk=chunk, **kw))
    assert measure_traced(params, masks, x, y, chunk=11, **kw) == whole  # one chunk is the whole probe


def test_dead_units_need_every_chunk():
    """A unit alive for the last example only is alive over the probe, whichever chunk that example is in."""
    _, params, _, kw = setting("mlp:64-16-16-10", "relu", False)
    x, y = probe("mlp:64-16-16-10", 12)
    x[:, 0, 0, 0] = -1.0
    x[-1, 0, 0, 0] = 1.0
    w = params["layers.0.weight"].clone()
    w[3] = 0.0  # dead: its pre-activation is 0 for every example
    w[5] = 0.0
    w[5, 0] = 1.0  # its pre-activation is x[:, 0]: positive for the last example only
    params = {**params, "layers.0.weight": w}
    dead = int((torch.relu(x.flatten(1) @ w.T) == 0).all(0).sum())
    assert 1 <= dead < 16
    for chunk in (None, 1, 4, 5):
        assert measure_traced(params, None, x, y, chunk=chunk, **kw)["layers"]["layers.0"]["dead_units"] == dead


def reference(params, masks, x, y, *, forward, exact_zeros, zero_threshold, loss_fn) -> dict:
    """Drift's statistics straight from their definitions, from one traced pass over the whole probe: per-sample
    gradients g = B dL/dz, inputs a as samples (unfolded patches for a convolution), the split of the mean weight
    gradient into P (E[g] E[a]ᵀ) and P Cov(g, a) as explicit (out, in) matrices in float64."""
    eff = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    trace = Trace()
    logits = forward(x, eff, trace=trace)
    loss = loss_fn(logits, y)
    names = trace.measured()
    grads = torch.autograd.grad(loss, [eff[f"{n}.weight"] for n in names] + [trace.layers[n].z for n in names])
    b, out = x.shape[0], {}
    for i, name in enumerate(names):
        rec = trace.layers[name]
        keep = None if masks is None else masks[f"{name}.weight"].bool()
        w = eff[f"{name}.weight"].detach()
        g = grads[len(names) + i].double() * b
        if rec.conv is not None:
            m = rec.conv
            a = F.unfold(rec.a.detach().double(), m.kernel_size, padding=m.padding, stride=m.stride)  # (B, in, P)
            p = a.shape[2]
            a, g = a.transpose(1, 2).flatten(0, 1), g.flatten(2).transpose(1, 2).flatten(0, 1)  # samples
        else:
            a = rec.a.detach().double()
            p = a.shape[1] if a.dim() == 3 else 1
            a, g = a.flatten(0, -2), g.flatten(0, -2)
        outer = p * torch.outer(g.mean(0), a.mean(0))
        cov = p * (g - g.mean(0)).T @ (a - a.mean(0)) / a.shape[0]

        def kept(t: torch.Tensor, w: torch.Tensor = w, keep: torch.Tensor | None = keep) -> torch.Tensor:
            t = t.reshape(w.shape)
            return t.flatten() if keep is None else t[keep]

        s = {
            "weight_mean": float(kept(w).mean()),
            "weight_std": float(kept(w).std()),
            "neg_weight_share": float((kept(w) < 0).double().mean()),
            "grad_mean": float(kept(grads[i].double()).mean()),
            "grad_outer": float(kept(outer).mean()),
            "grad_cov": float(kept(cov).mean()),
        }
        if rec.h is not None and rec.out is not None:
            h, act = rec.h.detach(), rec.out.detach()
            zero = act == 0 if exact_zeros else act.abs() < zero_threshold
            units = zero.transpose(0, 1).flatten(1) if zero.dim() == 4 else zero.flatten(0, -2).T
            gz = grads[len(names) + i].double() * b
            s.update(
                neg_preact_share=float((h < 0).double().mean()),
                sparsity=float(zero.double().mean()),
                dead_units=int(units.all(1).sum()),
                grad_pos_preact=float(gz[h > 0].mean()),
                spike_ratio=float(act.abs().max()) / math.sqrt(float(act.double().square().mean())),
            )
        out[name] = s
    return {"loss": float(loss.detach()), "accuracy": float((logits.argmax(1) == y).double().mean()), "layers": out}


@pytest.mark.parametrize("model", ["resnet20", "vit:p4-d16-l1-h2", "mlp:64-16-16-10+norm=batch", GPT])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.slow
def test_statistics_match_their_definitions(model, masked):
    """The streamed sums (row sums, box sums of a convolution's input, centred co-moments) against the explicit
    float64 products: the split's terms to float64 rounding, everything else exactly up to rounding."""
    net, params, masks, kw = setting(model, "relu", masked)
    x, y = probe(model, 6)
    net.module.train()  # BatchNorm on the batch's statistics, as drift runs it
    got = measure_traced(params, masks, x, y, **kw)
    want = reference(params, masks, x, y, **kw)
    for name, s in want["layers"].items():
        for key in ("grad_outer", "grad_cov"):  # float64 throughout: far tighter than the float32 gradient
            assert got["layers"][name][key] == pytest.approx(s[key], rel=1e-9, abs=1e-15), (name, key)
    assert_same(want, got)


@pytest.mark.slow
def test_no_chunk_outlives_its_pass():
    """Whatever a chunk's pass made (its logits, the inputs and masks its gradient hooks held) is gone before the
    next chunk's pass starts, and nothing is left pending at the end."""
    net, params, _, kw = setting("vit:p4-d16-l1-h2", "relu", False)
    x, y = probe("vit:p4-d16-l1-h2", 12)
    inner, refs, sizes, traces = kw["forward"], [], [], []

    def forward(xc, p, trace=None):
        gc.collect()
        assert all(r() is None for r in refs), "a tensor of the previous chunk is still alive"
        sizes.append(xc.shape[0])
        logits = inner(xc, p, trace=trace)
        refs.append(weakref.ref(logits))
        for job in trace.pending.values():
            refs.extend(weakref.ref(t) for t in job.values() if isinstance(t, torch.Tensor))
        traces.append(trace)
        return logits

    measure_traced(params, None, x, y, **{**kw, "forward": forward}, chunk=5)
    gc.collect()
    assert sizes == [5, 5, 2] and len(refs) > 10 and all(r() is None for r in refs)
    assert traces[-1].pending == {}


def test_examples_that_interact_are_measured_together():
    relu = net_of("mlp:64-16-16-10")
    assert drift.probe_chunk(relu, None, 512) == drift.CHUNK and drift.probe_chunk(relu, None, 64) == 64
    assert drift.probe_chunk(net_of("resnet20"), None, 512) is None  # batch statistics couple the probe
    assert drift.probe_chunk(net_of("mlp:64-16-16-10+norm=batch"), None, 512) is None
    assert drift.probe_chunk(net_of("mlp:64-16-16-10+norm=layer"), None, 512) == drift.CHUNK
    control = ActivationControl(ControlSpec(mode="percentile", target=0.7))
    assert drift.probe_chunk(relu, control, 512) is None  # before the first training step: its own quantile
    control.quantiles["layers.0"] = torch.zeros(16)
    assert drift.probe_chunk(relu, control, 512) == drift.CHUNK
    assert drift.probe_chunk(relu, ActivationControl(ControlSpec(mode="topk", target=0.7)), 512) == drift.CHUNK


class _Inputs:
    """Seeded random training batches and a fixed probe (drift_inputs.Inputs without a dataset)."""

    text = False

    def __init__(self, n: int = 40):
        self.g = torch.Generator().manual_seed(3)
        self.probe = probe("mlp:64-16-16-10", n, seed=4)

    def next(self):
        return torch.randn(16, 1, 8, 8, generator=self.g), torch.randint(10, (16,), generator=self.g)


@pytest.mark.parametrize("control", [None, "topk", "percentile"])
@pytest.mark.slow
def test_drift_series_do_not_depend_on_the_chunk(monkeypatch, control):
    model = parse_model("mlp:64-16-16-10+res").with_data((1, 8, 8), 10)
    spec = DriftSpec(model=model, data=DataSpec(name="digits"), steps=6, log_every=2, batch_size=64, probe_size=40)

    def run(chunk: int) -> dict:
        monkeypatch.setattr(drift, "CHUNK", chunk)
        ctl = None if control is None else ActivationControl(ControlSpec(mode=control, target=0.6))
        return drift.drift_one(net_of("mlp:64-16-16-10+res"), None, spec, _Inputs(), control=ctl)

    whole, chunked = run(10**6), run(7)
    assert whole["steps"] == [0, 2, 4, 6]
    assert_same(whole, chunked)


# ---------------------------------------------------------------- progress between logged steps


@pytest.mark.slow
def test_progress_is_told_every_step_and_measurements_at_logged_ones():
    from ticketcli.settings.resolve import data_location

    settings = {"dataset": "digits", "model": "mlp:64-16-10", "steps": 5, "log_every": 2, "batch_size": 32}
    spec = build_drift_spec({**settings, "probe_size": 40, "seeds": "0,1"}, data_location(None, False))
    seen: list[dict] = []
    drift.run_drift(spec, progress=seen.append)
    assert [s["epoch"] for s in seen] == list(range(0, 6)) + list(range(5, 11))  # the second seed goes on from 5
    assert [s["epoch"] for s in seen if "loss" in s] == [0, 2, 4, 5, 5, 7, 9, 10]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_every_logged_step_and_every_ten_seconds_between_with_an_eta(monkeypatch, capsys):
    from ticketcli.report import plain as report_plain
    from ticketcli.report import progress as report_progress

    monkeypatch.setattr(report_progress, "plain_progress", lambda: True)
    monkeypatch.setattr(report_plain.PlainProgress, "beating", lambda self: nullcontext(self))  # no heartbeat thread
    clock = FakeClock()
    measured = {"loss": 0.5, "accuracy": 0.25, "sparsity": 0.9, "unit": "step"}
    with report_progress.display(60, quiet=False, label="drift", unit="step", rated=True, clock=clock) as progress:
        assert progress is not None
        progress({**measured, "epoch": 0})
        for step in range(1, 61):  # 3 s a step, a measurement every 30 steps
            clock.now += 3.0
            progress({**measured, "epoch": step} if step % 30 == 0 else {"epoch": step, "unit": "step"})
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "drift step 0/60 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 0s"
    assert err[1] == "drift step 4/60, elapsed 12s, 0.33 steps/s, ETA 2m48s"  # the first 10 s past the last line
    assert "drift step 30/60 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 1m30s, 0.33 steps/s, ETA 1m30s" in err
    assert err[-1] == "drift step 60/60 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 3m00s, 0.33 steps/s"
    steps = [int(line.split()[2].split("/")[0]) for line in err]
    assert len(err) == len(set(steps)) and steps == sorted(steps)
    gaps = {b: 3.0 * (b - a) for a, b in zip(steps, steps[1:])}  # seconds since the previous line
    between = [s for s in gaps if s % 30]
    assert len(between) > 5 and all(gaps[s] >= 10.0 for s in between)  # at most one line per 10 s between...
    assert max(gaps.values()) <= 12.0  # ...and a log never silent for longer than a step past 10 s


def test_the_rate_averages_the_measurements_in_and_a_restored_position_does_not_inflate_it(monkeypatch, capsys):
    """Steps of 1 s with a measurement of 10 s every tenth: 2 s a step on average, so 0.50 steps/s and an ETA
    from that, not from the quick steps between; a resume restored at step 50 counts those steps as done (the
    ETA is for the 50 left) but not in the rate, which counts the steps this process ran."""
    from ticketcli.report import plain as report_plain
    from ticketcli.report import progress as report_progress

    monkeypatch.setattr(report_progress, "plain_progress", lambda: True)
    monkeypatch.setattr(report_plain.PlainProgress, "beating", lambda self: nullcontext(self))
    monkeypatch.setattr(report_plain, "PLAIN_EVERY_S", 0.0)  # a line at every report
    measured = {"loss": 0.5, "accuracy": 0.25, "sparsity": 0.9, "unit": "step"}

    def run(first: dict, steps: range) -> list[str]:
        clock = FakeClock()
        with report_progress.display(100, quiet=False, label="drift", unit="step", rated=True, clock=clock) as progress:
            assert progress is not None
            progress(first)
            for step in steps:
                clock.now += 1.0 + (10.0 if step % 10 == 0 else 0.0)
                progress({**measured, "epoch": step} if step % 10 == 0 else {"epoch": step, "unit": "step"})
        return capsys.readouterr().err.splitlines()

    fresh = run({**measured, "epoch": 0}, range(1, 51))
    last = "drift step 50/100 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 1m40s, 0.50 steps/s, ETA 1m40s"
    assert fresh[-1] == last
    resumed = run({"epoch": 50, "unit": "step", "restored": True}, range(51, 101))
    assert resumed[0] == "drift step 50/100 restored, elapsed 0s"  # neither a rate nor an ETA from no timed step
    assert resumed[5] == "drift step 55/100, elapsed 5s, 1.00 steps/s, ETA 45s"  # 5 steps in 5 s, not 55 in 5 s
    assert resumed[-1] == "drift step 100/100 loss 0.5000 acc 25.00% sparsity 90.00%, elapsed 1m40s, 0.50 steps/s"


def test_the_terminal_bar_shows_the_rate_and_the_eta_of_the_steps_run(monkeypatch):
    import io

    from rich.console import Console

    from ticketcli.report import progress as report_progress

    out = io.StringIO()
    monkeypatch.setattr(report_progress, "plain_progress", lambda: False)
    monkeypatch.setattr(report_progress, "stderr", lambda: Console(file=out, force_terminal=True, width=200))
    clock = FakeClock()
    with report_progress.display(100, quiet=False, label="drift", unit="step", rated=True, clock=clock) as progress:
        assert progress is not None
        progress({"epoch": 40, "unit": "step", "restored": True})  # a resume: 40 steps done, none timed
        for step in range(41, 61):
            clock.now += 0.5
            progress({"epoch": step, "unit": "step"})
    row = [line for line in out.getvalue().splitlines() if "60/100" in line][-1]
    assert "2.00 steps/s ETA 0:00:20" in row, row  # 20 steps in 10 s; 40 left


def test_quiet_drift_progress_says_nothing():
    from ticketcli.report import progress as report_progress

    with report_progress.display(10, quiet=True, label="drift", unit="step", rated=True) as progress:
        assert progress is None
