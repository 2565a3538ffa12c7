"""ticket drift: every statistic against a hand computation on a tiny known network; relu2-clip against its
definition; ticket runs keep masked weights at zero and out of the statistics; series lengths; the CLI."""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import make_net
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.drift.activations import ACTIVATIONS, LOSSES
from ticketcli.drift.inputs import Inputs
from ticketcli.drift.run import drift_one, logged_steps, summarise
from ticketcli.drift.sites import measure_traced, mlp_sites
from ticketcli.drift.spec import DriftSpec
from ticketcli.models.mlp import mlp_forward
from ticketcli.specs.run import DataSpec, ModelSpec
from ticketcli.train import WeightOptim, WeightTrainer

# A 3-3-2 bias-free MLP. Inputs are non-negative, so hidden unit 2 (weights -1, -1, -1) is dead.
W0 = torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.5, -2.0], [-1.0, -1.0, -1.0]])
W1 = torch.tensor([[1.0, -2.0, 0.5], [-1.0, 0.5, 1.0]])
X = torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [2.0, 0.0, 0.0]])
Y = torch.tensor([0, 1, 1, 0])
# pre-activations h = X W0^T, by hand:     unit0  unit1  unit2
H = [
    [1.0, -1.5, -2.0],  # x = (1, 0, 1)
    [-2.0, -1.0, -3.0],  # x = (0, 2, 1)
    [0.0, 1.0, -2.0],  # x = (1, 1, 0): unit 0 sits exactly at 0
    [2.0, 1.0, -2.0],
]  # x = (2, 0, 0)
PARAMS = {"layers.0.weight": W0, "layers.1.weight": W1}


def stats(activation="relu", threshold=1e-2, loss="mse", masks=None, params=PARAMS):
    act = ACTIVATIONS.get(activation)
    return measure_traced(
        params,
        masks,
        X,
        Y,
        forward=mlp_sites(params, partial(act.fn, c=50.0)),
        exact_zeros=act.exact_zeros,
        zero_threshold=threshold,
        loss_fn=LOSSES.get(loss),
    )


def test_hand_computed_statistics_relu():
    s = stats()
    hid, out = s["layers"]["layers.0"], s["layers"]["layers.1"]
    assert hid["weight_mean"] == pytest.approx(-4 / 9)  # (1 - 1 + 0 + .5 + .5 - 2 - 3) / 9
    assert hid["neg_weight_share"] == pytest.approx(5 / 9)
    assert out["neg_weight_share"] == pytest.approx(2 / 6)
    assert hid["neg_preact_share"] == pytest.approx(7 / 12)  # the 0 at x = (1, 1, 0) is not negative...
    assert hid["sparsity"] == pytest.approx(8 / 12)  # ...but relu(0) = 0 is an exact zero
    assert hid["dead_units"] == 1
    # a = relu(H): non-zeros 1, 2 (unit 0) and 1, 1 (unit 1): max 2, RMS sqrt(7 / 12)
    assert hid["spike_ratio"] == pytest.approx(2 / math.sqrt(7 / 12))
    assert "neg_preact_share" not in out and "spike_ratio" not in out


def test_hand_computed_gradient_statistics():
    # chain rule by hand in numpy: MSE over (B, K) -> per-example g_z = 2 (z - t) / K; g_h = (g_z W1) relu'(h)
    h, w1 = np.array(H), W1.numpy().astype(np.float64)
    a = np.maximum(h, 0.0)
    z = a @ w1.T
    t = np.eye(2)[Y.numpy()]
    g_z = 2 * (z - t) / 2
    g_h = (g_z @ w1) * (h > 0)
    s = stats()
    hid, out = s["layers"]["layers.0"], s["layers"]["layers.1"]
    assert s["loss"] == pytest.approx(float(((z - t) ** 2).mean()))
    assert hid["grad_pos_preact"] == pytest.approx(g_h[h > 0].mean())
    x = X.numpy().astype(np.float64)
    for layer, g, inp in ((hid, g_h, x), (out, g_z, a)):
        grad = g.T @ inp / len(x)  # dL/dW for the batch-mean loss
        outer = np.outer(g.mean(0), inp.mean(0))
        assert layer["grad_mean"] == pytest.approx(grad.mean())
        assert layer["grad_outer"] == pytest.approx(outer.mean())
        assert layer["grad_cov"] == pytest.approx((grad - outer).mean())
        # the split is exact: the two parts, computed separately, add up to autograd's mean gradient
        assert layer["grad_outer"] + layer["grad_cov"] == pytest.approx(layer["grad_mean"], rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("name", ACTIVATIONS.names())
@pytest.mark.parametrize("loss", LOSSES.names())
def test_split_sums_to_mean_gradient_for_every_activation_and_loss(name, loss):
    torch.manual_seed(0)
    params = {
        "layers.0.weight": torch.randn(5, 3),
        "layers.1.weight": torch.randn(4, 5),
        "layers.2.weight": torch.randn(2, 4),
    }
    for s in stats(name, loss=loss, params=params)["layers"].values():
        # float32 gradients of size ~0.1 round at ~1e-8; cross-entropy's last-layer mean gradient cancels to ~0
        # (it sums to zero over the classes), so the absolute tolerance is float32's, not 1e-9 (a wrong split is
        # off by ~1e-2)
        assert s["grad_outer"] + s["grad_cov"] == pytest.approx(s["grad_mean"], rel=1e-5, abs=1e-8)


def test_smooth_activation_counts_below_threshold_as_zero():
    # |gelu(h)| < 0.05 holds for h in {0, -2, -3} (gelu(-2) = -0.0455), not for -1.5 or -1 (-0.100, -0.159)
    s = stats("gelu", threshold=0.05)["layers"]["layers.0"]
    assert s["sparsity"] == pytest.approx(6 / 12)  # unit 0: -2 and 0; unit 1: none; unit 2: all four
    assert s["dead_units"] == 1
    assert s["neg_preact_share"] == pytest.approx(7 / 12)
    a = F.gelu(torch.tensor(H, dtype=torch.float64))
    assert s["spike_ratio"] == pytest.approx(float(a.abs().max() / a.square().mean().sqrt()), rel=1e-6)


@pytest.mark.parametrize("c", [50.0, 10.0])
def test_relu2_clip_forward_and_gradient_match_the_definition(c):
    h = torch.tensor([-3.0, -0.5, 0.5, 3.0, 7.0, 8.0], requires_grad=True)
    a = ACTIVATIONS.get("relu2-clip").fn(h, c)
    expected = [min(max(v, 0.0) ** 2, c) for v in h.tolist()]
    assert a.tolist() == pytest.approx(expected)
    a.sum().backward()
    # d/dh min(relu(h)^2, c) = 2 relu(h) below the clip, 0 above it (no test point sits on the kink)
    assert h.grad.tolist() == pytest.approx([2 * max(v, 0.0) if max(v, 0.0) ** 2 < c else 0.0 for v in h.tolist()])


def test_masked_weights_stay_zero_and_are_excluded(digits):
    net = make_net("mlp:64-16-16-10")
    g = torch.Generator().manual_seed(4321)
    masks = {n: torch.rand(w.shape, generator=g) < 0.3 for n, w in net.weights.items()}
    spec = DriftSpec(
        model=net.spec,
        data=DataSpec(name="digits", n_extract=300, n_val=100),
        steps=6,
        log_every=2,
        batch_size=64,
        probe_size=100,
    )
    seen = []

    def check(step, m, eff):
        for n, w in eff.items():
            keep = masks[n]
            assert torch.all(w[~keep] == 0)
            s = m["layers"][n.rpartition(".")[0]]
            assert s["weight_mean"] == pytest.approx(float(w[keep].mean()), rel=1e-5)
            assert s["weight_mean"] != pytest.approx(float(w.mean()), rel=1e-3)  # zeros would dilute it
            assert s["neg_weight_share"] == pytest.approx(float((w[keep] < 0).double().mean()))
        seen.append(step)

    series = drift_one(net, masks, spec, Inputs(spec, net.spec, spec.data, 0, torch.device("cpu")), on_log=check)
    assert seen == series["steps"] == [0, 2, 4, 6]
    assert series["layers"]["layers.0"]["weight_mean"][0] != series["layers"]["layers.0"]["weight_mean"][-1]


def test_random_inputs_are_seeded_and_in_range():
    spec = DriftSpec(
        model=ModelSpec(widths=(5, 4, 3)), data=DataSpec(name="digits"), inputs="uniform", batch_size=64, probe_size=32
    )
    first = Inputs(spec, spec.model, spec.data, 7, torch.device("cpu"))
    x, y = first.next()
    assert x.shape == (64, 5) and bool((x >= 0).all() and (x <= 1).all()) and set(y.tolist()) <= {0, 1, 2}
    again = Inputs(spec, spec.model, spec.data, 7, torch.device("cpu"))
    assert torch.equal(again.next()[0], x) and torch.equal(again.probe[0], first.probe[0])
    assert not torch.equal(first.next()[0], x)  # fresh inputs every step


def test_summary_is_mean_and_std_across_seeds():
    def run(means):
        return {
            "steps": [0, 5],
            "loss": [1.0, 0.5],
            "accuracy": [0.1, 0.2],
            "layers": {"layers.0": {"weight_mean": means, "initial_std": 1.0}},
        }

    sm = summarise([run([0.0, -1.0]), run([0.0, -3.0]), run([0.0, 1.0])])
    wm = sm["layers"]["layers.0"]["weight_mean"]
    assert wm["mean"] == pytest.approx([0.0, -1.0]) and wm["std"] == pytest.approx([0.0, 2.0])  # sample std
    assert sm["layers"]["layers.0"]["negative_drift_share"] == pytest.approx(2 / 3)


def test_logged_steps():
    assert logged_steps(6, 3) == [0, 3, 6]
    assert logged_steps(7, 3) == [0, 3, 6, 7]


# --- command line ---------------------------------------------------------------------------------------------

runner = CliRunner()
TINY = [
    "drift",
    "--dataset",
    "digits",
    "--model",
    "mlp:64-16-16-10",
    "--batch-size",
    "64",
    "--probe-size",
    "100",
    "--quiet",
]


def invoke(*args):
    return runner.invoke(app, [*TINY, *args])


@pytest.mark.parametrize("steps,every", [(6, 3), (7, 3)])
@pytest.mark.slow
def test_json_series_lengths(steps, every):
    r = invoke("--steps", str(steps), "--log-every", str(every), "--seeds", "0,1", "--inputs", "gaussian", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    n = steps // every + 1 + (steps % every != 0)
    assert doc["seeds"] == [0, 1] and len(doc["runs"]) == 2
    for series in [*doc["runs"], doc["summary"]]:
        assert len(series["steps"]) == n
        for metrics in series["layers"]:  # a list of per-layer objects (the --json contract's layers[])
            assert all(len(v) == n for k, v in metrics.items() if isinstance(v, list))
            assert all(len(v["mean"]) == n for v in metrics.values() if isinstance(v, dict))


@pytest.mark.slow
def test_table_and_plot(tmp_path):
    png = tmp_path / "d.png"
    r = invoke("--steps", "4", "--log-every", "2", "--activation", "gelu", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "weight drift from step 0" in r.stdout and "|a| < 0.01" in r.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(str(png)).shape[2] in (3, 4)


@pytest.mark.slow
def test_ticket_run(tmp_path):
    t = tmp_path / "t.safetensors"
    r = runner.invoke(
        app,
        [
            "extract",
            "--dataset",
            "digits",
            "--model",
            "mlp:64-16-16-10",
            "--method",
            "random",
            "--seed",
            "3",
            "--quiet",
            "--out",
            str(t),
        ],
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        ["drift", "--ticket", str(t), "--steps", "2", "--log-every", "1", "--batch-size", "64", "--quiet", "--json"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["masked"] is True and doc["seeds"] == [3] and doc["model"] == "mlp:64-16-16-10"
    clash = runner.invoke(app, ["drift", "--ticket", str(t), "--seeds", "1"])
    assert clash.exit_code == 2 and "cannot be combined with --ticket" in clash.stderr


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--seeds", "0,x"], 2, "--seeds"),
        (["--seeds", "1,1"], 2, "distinct"),
        (["--model", "conv6"], 2, "drift measures models with activation sites"),
        (["--steps", "0"], 2, "--steps"),
        (["--weights", "w.pt"], 2, "--weights only goes with --ticket"),
        (["--plot", "/nonexistent-dir/x.png"], 2, "does not exist"),
        (["--optimizer", "sgd", "--lr", "1e30", "--steps", "3"], 1, "non-finite"),
    ],
)
def test_exit_codes(args, code, needle):
    r = invoke(*args)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output and needle in r.stderr
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_unknown_activation_is_usage_error():
    r = invoke("--activation", "tanh")
    assert r.exit_code == 2


def test_sgd_step_moves_weight_mean_by_minus_lr_times_mean_gradient(digits):
    # ties the logged gradient to the logged weights: plain SGD on the probe batch itself gives
    # mean(W') - mean(W) = -lr * mean(dL/dW), so a positive mean gradient is a downward drift
    net = make_net("mlp:64-16-16-10")
    x, y = digits.x_val[:200], digits.y_val[:200]
    act = partial(ACTIVATIONS.get("relu").fn, c=50.0)
    trainer = WeightTrainer(net, None, WeightOptim(name="sgd", lr=0.05))

    def probe():
        params = trainer.effective()
        forward = mlp_sites(params, act)
        return measure_traced(
            params, None, x, y, forward=forward, exact_zeros=True, zero_threshold=0.01, loss_fn=F.cross_entropy
        )["layers"]

    before = probe()
    trainer.step(x, y, F.cross_entropy, forward=partial(mlp_forward, n_layers=3, act=act))
    after = probe()
    for layer, s in before.items():
        assert after[layer]["weight_mean"] - s["weight_mean"] == pytest.approx(
            -0.05 * s["grad_mean"], rel=1e-3, abs=1e-8
        )
