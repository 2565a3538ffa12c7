"""drift's control features: top-k and percentile centering reach their target, the accumulation stop freezes the
statistics, ReLUfication swaps every activation and keeps the weights, the trade-off's cliff and its independence
of the worker count, and the command line's validation."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import make_net
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.drift.control import ActivationControl, keep_count, topk_keep
from ticketcli.drift.inputs import Inputs
from ticketcli.drift.relufy import relufy_one
from ticketcli.drift.run import drift_one, run_drift
from ticketcli.drift.spec import ControlSpec, DriftSpec, RelufySpec
from ticketcli.drift.tradeoff import find_cliff, plan, run_tradeoff
from ticketcli.models.registry import parse_model
from ticketcli.specs.run import DataSpec

DIGITS = DataSpec(name="digits", n_extract=600, n_val=300)


def small_spec(model: str = "mlp:64-32-32-10", **kw) -> DriftSpec:
    base = dict(steps=60, log_every=30, batch_size=64, probe_size=300)
    return DriftSpec(model=parse_model(model), data=DIGITS, **{**base, **kw})


def test_topk_keep_keeps_exactly_the_k_largest_per_row():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(7, 13, generator=g)  # distinct values: no ties
    for k in (0, 1, 5, 13):
        out = topk_keep(a, k)
        assert ((out != 0).sum(1) == k).all()
        kth = a.sort(1, descending=True).values[:, k - 1 : k] if k else None
        if kth is not None:
            assert torch.equal(out != 0, a >= kth)  # the survivors are the k largest, unchanged
            assert torch.equal(out[out != 0], a[out != 0])
    assert keep_count(32, 0.8) == 6 and keep_count(10, 0.7) == 3


@pytest.mark.parametrize("mode", ["topk", "percentile"])
@pytest.mark.slow
def test_control_reaches_its_target(mode):
    r = run_drift(small_spec(), control=ControlSpec(mode, 0.8))
    c = r.act_control
    assert c is not None and r["schema"] == "ticket.drift-control/2"
    assert set(c["sites"]) == {"layers.0", "layers.1"}
    for s in [*c["sites"].values(), c["overall"]]:
        assert s["sparsity"] == pytest.approx(0.8, abs=0.05)  # measured on the probe batch, not a training batch
    # the series' own sparsity (drift's measurement) is the controlled one too
    assert r.summary.layers["layers.0"].series["sparsity"].mean[-1] == pytest.approx(c["sites"]["layers.0"]["sparsity"])
    if mode == "percentile":  # what the activation sees is centred: its negative share is the sparsity (ReLU)
        assert c["overall"]["neg_act_input_share"] == pytest.approx(c["overall"]["sparsity"])
        assert c["sites"]["layers.0"]["centering_mean"] is not None


@pytest.mark.slow
def test_uncontrolled_run_is_far_from_the_target():
    # the test above can fail: without control the same run sits far from 80% sparsity
    r = run_drift(small_spec())
    assert r.act_control is None and "act_control" not in r and r["schema"] == "ticket.drift/1"
    sparsity = r.summary.layers["layers.0"].series["sparsity"].mean[-1]
    assert sparsity is not None and sparsity < 0.7


@pytest.mark.slow
def test_accumulation_stop_freezes_the_statistics():
    net = make_net("mlp:64-32-32-10")
    spec = small_spec(steps=8, log_every=1)
    control = ActivationControl(ControlSpec("percentile", 0.7, freeze_after=3))
    snapshots = {}

    def snap(step, m, eff):
        snapshots[step] = {k: v.clone() for k, v in control.quantiles.items()}

    drift_one(net, None, spec, Inputs(spec, net.spec, DIGITS, 0, torch.device("cpu")), on_log=snap, control=control)
    assert control.updates == 3 and control.frozen()
    assert set(snapshots[3]) == {"layers.0", "layers.1"}
    for step in range(4, 9):  # frozen: bit-identical after step 3 although the weights keep moving
        for site, q in snapshots[3].items():
            assert torch.equal(snapshots[step][site], q)
    for site in snapshots[3]:  # ...and they did move while they were updated
        assert not torch.equal(snapshots[1][site], snapshots[2][site])
        assert not torch.equal(snapshots[2][site], snapshots[3][site])


@pytest.mark.parametrize("target", ["relu", "relu2"])
@pytest.mark.slow
def test_relufication_swaps_every_activation_and_keeps_the_weights(target):
    net = make_net("mlp:64-24-24-24-10")
    spec = small_spec("mlp:64-24-24-24-10", steps=6, log_every=3, activation="gelu")
    seen: dict[int, list] = {}
    r = relufy_one(
        net,
        None,
        spec,
        Inputs(spec, net.spec, DIGITS, 0, torch.device("cpu")),
        relu=RelufySpec("gelu", target, 1),
        on_log=lambda step, m, eff: seen.setdefault(step, []).append({n: w.clone() for n, w in eff.items()}),
    )
    before, after_swap = seen[6]  # the swap step is logged twice: the smooth net's last, the swapped net's first
    assert before.keys() == after_swap.keys() and all(torch.equal(before[n], after_swap[n]) for n in before)
    u = r["relufy"]
    assert u["weights_kept"] and u["fine_tune_steps"] == 10  # ceil(600 / 64) steps per epoch
    assert r["steps"] == [0, 3, 6, 6, 9, 12, 15, 16]
    i = r["steps"].index(6) + 1  # the swapped network's first measurement
    for layer in ("layers.0", "layers.1", "layers.2"):
        s = r["layers"][layer]
        # a ReLU variant is zero exactly where h <= 0 (h == 0 has probability 0): true at every site after the swap
        assert s["sparsity"][i] == s["neg_preact_share"][i]
        assert s["sparsity"][i - 1] < s["neg_preact_share"][i - 1]  # GELU before: far fewer |a| < 0.01
        assert s["weight_mean"][i] == s["weight_mean"][i - 1]
    assert u["swapped"]["sparsity"] > u["before"]["sparsity"]


def test_cliff_on_a_synthetic_curve():
    def curve(accs):
        return [{"target": t, "accuracy": a, "achieved_sparsity": t} for t, a in accs]

    c = find_cliff(curve([(0.9, 0.12), (0.5, 0.90), (0.7, 0.85), (0.6, 0.88), (0.8, 0.30)]))  # any order
    assert (c["from_target"], c["to_target"]) == (0.7, 0.8) and c["drop"] == pytest.approx(0.55)
    assert find_cliff(curve([(0.5, 0.1), (0.6, 0.2)])) is None  # accuracy never drops


@pytest.mark.slow
def test_tradeoff_results_do_not_depend_on_workers():
    specs = [small_spec(steps=8, log_every=8), small_spec("mlp:64-32-32-32-10+res", steps=8, log_every=8)]
    tasks = plan(specs, (0.5, 0.9), "percentile", 4)
    one, two = run_tradeoff(tasks, workers=1), run_tradeoff(tasks, workers=2)
    assert one.models == two.models
    assert list(one.models) == ["mlp:64-32-32-10", "mlp:64-32-32-32-10+res"]
    assert [p["target"] for p in one.models["mlp:64-32-32-10"].curve] == [0.5, 0.9]


# --- command line ---------------------------------------------------------------------------------------------

runner = CliRunner()
TINY = ["drift", "--dataset", "digits", "--model", "mlp:64-16-16-10", "--batch-size", "64", "--probe-size", "100"]
TINY += ["--steps", "4", "--log-every", "2", "--quiet"]


def invoke(*args):
    return runner.invoke(app, [*TINY, *args])


@pytest.mark.slow
def test_cli_control_relufy_and_tradeoff_json(tmp_path):
    r = invoke("--act-sparsity", "percentile", "--act-target", "0.6", "--freeze-stats-after", "2", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "ticket.drift-control/2" and doc["act_control"]["freeze_after"] == 2
    assert doc["act_control"]["runs"][0]["statistics_updates"] == 2
    assert [s["name"] for s in doc["act_control"]["sites"]] == ["layers.0", "layers.1"]

    r = invoke("--relufy", "--from", "silu", "--to", "relu2-clip", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "ticket.drift-relufy/2" and doc["activation"] == "silu"
    assert doc["relufy"]["weights_kept"] is True and doc["relufy"]["target"] == "relu2-clip"

    png = tmp_path / "t.png"
    r = invoke("--tradeoff", "0.5,0.9", "--model", "mlp:64-16-16-10,mlp:64-16-16-16-10+res", "--plot", str(png))
    assert r.exit_code == 0, r.output
    assert "trade-off mlp:64-16-16-16-10+res" in r.stdout and "chance accuracy" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_tables():
    r = invoke("--act-sparsity", "topk")
    assert r.exit_code == 0, r.output
    assert "activation-sparsity control: top-k" in r.stdout and "weight drift from step 0" in r.stdout
    r = invoke("--relufy", "--from", "gelu", "--to", "relu")
    assert r.exit_code == 0, r.output
    assert "ReLUfication gelu -> relu" in r.stdout and "fine-tuned" in r.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--act-sparsity", "topk", "--act-target", "1.5"], "--act-target"),
        (["--act-sparsity", "topk", "--act-target", "0"], "--act-target"),
        (["--act-target", "0.5"], "only goes with --act-sparsity"),
        (["--act-sparsity", "topk", "--freeze-stats-after", "5"], "top-k"),
        (["--act-sparsity", "percentile", "--freeze-stats-after", "0"], "--freeze-stats-after"),
        (["--act-sparsity", "median"], "median"),
        (["--relufy"], "--from"),
        (["--relufy", "--from", "gelu"], "--to"),
        (["--from", "gelu"], "only goes with --relufy"),
        (["--relufy", "--from", "gelu", "--to", "relu", "--act-sparsity", "topk"], "does not go with"),
        (["--relufy", "--from", "gelu", "--to", "relu", "--inputs", "gaussian"], "--inputs"),
        (["--relufy", "--from", "relu", "--to", "relu"], "both relu"),
        (["--relufy", "--from", "gelu", "--to", "relu", "--relufy-epochs", "0"], "--relufy-epochs"),
        (["--relufy", "--from", "gelu", "--to", "relu", "--activation", "silu"], "--activation"),
        (["--relufy", "--from", "gelu", "--to", "gelu2"], "gelu2"),
        (["--tradeoff", "0.5,x"], "--tradeoff"),
        (["--tradeoff", "0.5"], "2 to"),
        (["--tradeoff", "0.5,0.5"], "distinct"),
        (["--tradeoff", "0.5,1.2"], "must lie in (0, 1)"),
        (["--tradeoff", "0.5,0.6", "--act-target", "0.7"], "--act-target"),
        (["--tradeoff", "0.5,0.6", "--workers", "0"], "--workers"),
        (["--tradeoff", "0.5,0.6", "--relufy", "--from", "gelu", "--to", "relu"], "--tradeoff"),
        (["--tradeoff", "0.5,0.6", "--ticket", "missing.safetensors"], "--ticket"),
        (["--tradeoff", "0.5,0.6", "--model", "mlp:64-16-10,mlp:64-16-10"], "distinct"),
        (["--workers", "2"], "only goes with --tradeoff"),
        (["--model", "mlp:64-16-10,mlp:64-32-10"], "comma list"),
    ],
)
def test_bad_options_are_one_line_exit_2(args, needle):
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error:") and len(err.splitlines()) == 1 and "Traceback" not in r.output
    assert needle in err
