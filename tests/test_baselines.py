"""The pruning and sparse-training baselines: registry-wide properties, then one defining property per method."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import for_method, make_net, quick_method
from typer.testing import CliRunner

from ticketcli.cli.app import app
from ticketcli.data.datasets import load_splits
from ticketcli.methods import METHODS, movement, saliency, sparse
from ticketcli.methods.movement import cubic_density
from ticketcli.methods.registry import option, own_options
from ticketcli.methods.saliency import grasp_scores, hessian_vector_product, loss_gradient, snip_scores, synflow_scores
from ticketcli.methods.sparse import prune_and_regrow
from ticketcli.runs.build import build_net
from ticketcli.runs.extract import extract_ticket
from ticketcli.selection.exact import keep_count, topk_mask
from ticketcli.settings.readers import check_method_options, method_options
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.settings.setting import option_flag
from ticketcli.specs.run import DataSpec
from ticketcli.ticketfile import ticket as ticket_io
from ticketcli.train import WeightOptim, WeightTrainer, evaluate

BASELINES = [
    n
    for n in METHODS.names()
    if METHODS.get(n).load().__module__ in (saliency.__name__, sparse.__name__, movement.__name__)
]
TRAINS_WEIGHTS = [n for n in BASELINES if "weights" in METHODS.get(n).load().trains]


def run(name, data, net=None, seed=0, **kw):
    """Extract as `ticket extract` would: options checked first (specs.check_method_options), then the method."""
    method = METHODS.get(name).load()()
    spec = quick_method(name, **kw)
    check_method_options(spec)
    result = method.extract(
        net or make_net(),
        data,
        spec,
        device=torch.device("cpu"),
        generator=torch.Generator().manual_seed(seed),
        progress=None,
    )
    return result, result.masks


def test_every_family_is_registered():
    assert set(BASELINES) == {"snip", "grasp", "synflow", "imp", "set", "rigl", "movement"}


@pytest.mark.parametrize("name", BASELINES)
def test_layer_densities_threshold_each_layer_and_touch_nothing_else(name, digits):
    net = make_net()
    before = {n: w.clone() for n, w in net.weights.items()}
    _, masks = run(name, digits, net=net, layer_densities=(0.1, 0.5, 1.0))
    for (n, m), d in zip(masks.items(), (0.1, 0.5, 1.0)):
        assert int(m.sum()) == keep_count(d, m.numel()), n
    assert bool(masks["layers.2.weight"].all())  # density 1: nothing pruned there
    assert all(torch.equal(net.weights[n], before[n]) for n in net.names), "frozen weights must stay frozen"


@pytest.mark.parametrize("name", BASELINES)
def test_aug_density_is_refused(name, digits):
    from ticketcli.errors import UsageError

    with pytest.raises(UsageError, match="augmented"):
        run(name, digits, aug_density=0.5)


def quick_spec(name: str, **kw):
    small = {"epochs": 2, "batch_size": 128, "imp_rounds": 2, "synflow_rounds": 10, "regrow_every": 2}
    settings = {
        "method": name,
        "dataset": "digits",
        "model": "mlp:64-32-32-10",
        "n_extract": 500,
        "n_val": 200,
        "sparsity": 0.8,
        **for_method(name, small),
        **kw,
    }
    return build_extract_spec(merge_settings(settings, None))


@pytest.mark.parametrize("name", BASELINES)
def test_ticket_is_evaluated_on_the_rewound_init(name, tmp_path):
    spec = quick_spec(name)
    summary = extract_ticket(spec, out=tmp_path / "t.safetensors")
    tk = ticket_io.load(tmp_path / "t.safetensors")
    net, _ = build_net(spec.model, spec.init, None)  # a fresh network from the seed: the original init
    splits = load_splits(spec.data)
    assert evaluate(net, tk.masks, splits.x_test, splits.y_test) == summary["metrics"]["test"]
    recorded = tk.method.to_json()
    when_set = {o.name for o in own_options() if o.when_set}  # recorded only when given (Option.when_set)
    assert tk.method.name == name and set(recorded) >= method_options(name) - when_set  # hyper-parameters recorded
    assert ("weight_lr" in recorded) == ("weights" in METHODS.get(name).load().trains)  # only those that shaped it
    if name in TRAINS_WEIGHTS:  # the trained network is reported, and it is not the ticket
        trained = summary.metrics.trained
        assert trained is not None and trained.test.n == summary.metrics.test.n
        assert trained.test.loss != summary.metrics.test.loss
    else:
        assert summary.metrics.trained is None and "trained" not in summary


def two_layer_net():
    net = make_net("mlp:5-4-3", seed=3)
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(1))
    y = torch.arange(12) % 3
    return net, x, y


def test_snip_is_abs_gradient_times_weight_by_hand():
    net, x, y = two_layer_net()
    w1, w2 = net.weights["layers.0.weight"], net.weights["layers.1.weight"]
    batches = [(x[:7], y[:7]), (x[7:], y[7:])]
    g1, g2 = torch.zeros_like(w1), torch.zeros_like(w2)
    for xb, yb in batches:  # backprop written out: L = mean CE(W2 relu(W1 x))
        pre = xb @ w1.T
        h = pre.clamp(min=0)
        d2 = (torch.softmax(h @ w2.T, 1) - F.one_hot(yb, 3)) / len(yb)  # dL/dlogits
        g2 += d2.T @ h
        g1 += ((d2 @ w2) * (pre > 0)).T @ xb
    s = snip_scores(net, batches)
    torch.testing.assert_close(s["layers.0.weight"], (g1 * w1).abs(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(s["layers.1.weight"], (g2 * w2).abs(), rtol=1e-5, atol=1e-7)


def test_grasp_hessian_vector_product_matches_finite_differences():
    net, x, y = two_layer_net()
    params = {n: w.double().requires_grad_(True) for n, w in net.weights.items()}
    batches = [(x.double(), y)]
    v = {
        n: torch.randn(p.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
        for n, p in params.items()
    }
    hv = hessian_vector_product(net, params, batches, v, temperature=2.0)
    eps = 1e-6

    def grad_at(sign):
        shifted = {n: (p.detach() + sign * eps * v[n]).requires_grad_(True) for n, p in params.items()}
        return loss_gradient(net, shifted, batches, temperature=2.0)

    plus, minus = grad_at(1), grad_at(-1)
    for n in params:
        torch.testing.assert_close(hv[n], (plus[n] - minus[n]) / (2 * eps), rtol=1e-4, atol=1e-8)
    assert any(float(h.abs().max()) > 1e-3 for h in hv.values())  # a real, nonzero curvature


def test_grasp_keeps_the_largest_signed_scores(digits):
    net = make_net()
    _, masks = run("grasp", digits, net=net)
    # the same batches the method drew: two shuffles from the same seeded generator
    gen = torch.Generator().manual_seed(0)
    spec = quick_method("grasp")
    s = grasp_scores(
        net,
        saliency.minibatches(digits, spec, gen),
        saliency.minibatches(digits, spec, gen),
        option(spec, "grasp_temperature"),
    )
    flat = torch.cat([s[n].flatten() for n in net.names])
    expected = topk_mask(flat, keep_count(0.2, flat.numel()))
    assert torch.equal(torch.cat([masks[n].flatten() for n in net.names]), expected)
    assert flat[expected].min() >= flat[~expected].max()  # the top end of -θ⊙Hg, signs included


def test_grasp_original_reading_keeps_the_other_end_of_the_same_ranking(digits):
    """original ranks θ⊙Hg, the exact negation of the paper's -θ⊙Hg, on the same batches; its mask is the top-k
    of θ⊙Hg, and at density 0.2 the two readings' masks share no entry."""
    net = make_net()
    _, paper = run("grasp", digits, net=net)
    _, original = run("grasp", digits, net=net, grasp_direction="original")
    gen = torch.Generator().manual_seed(0)
    spec = quick_method("grasp")
    g, h = saliency.minibatches(digits, spec, gen), saliency.minibatches(digits, spec, gen)
    s_paper = grasp_scores(net, g, h, option(spec, "grasp_temperature"))
    s_orig = grasp_scores(net, g, h, option(spec, "grasp_temperature"), "original")
    assert all(torch.equal(s_orig[n], -s_paper[n]) for n in net.names)
    flat = torch.cat([s_orig[n].flatten() for n in net.names])
    kept = torch.cat([original[n].flatten() for n in net.names])
    assert torch.equal(kept, topk_mask(flat, keep_count(0.2, flat.numel())))
    assert flat[kept].min() >= flat[~kept].max()
    both = sum(int((paper[n] & original[n]).sum()) for n in net.names)
    assert both == 0 and int(kept.sum()) == keep_count(0.2, flat.numel())


def test_grasp_shared_data_takes_g_and_hg_from_one_collection(digits):
    net = make_net()
    _, shared = run("grasp", digits, net=net, grasp_data="shared")
    _, separate = run("grasp", digits, net=net)
    gen = torch.Generator().manual_seed(0)
    spec = quick_method("grasp")
    batches = saliency.minibatches(digits, spec, gen)  # the only draw: the first shuffle, as with separate data
    s = grasp_scores(net, batches, batches, option(spec, "grasp_temperature"))
    expected = select_global(s, net.names, 0.2)
    assert all(torch.equal(shared[n], expected[n]) for n in net.names)
    assert any(not torch.equal(shared[n], separate[n]) for n in net.names)  # the second collection matters


@pytest.mark.parametrize(
    "key, value", [("grasp_direction", "reverse"), ("grasp_direction", "Paper"), ("grasp_data", "both")]
)
def test_grasp_readings_outside_their_names_are_refused(key, value):
    from ticketcli.errors import UsageError

    with pytest.raises(UsageError, match=f"{option_flag(key)} must be one of"):
        build_extract_spec(merge_settings({"method": "grasp", "dataset": "digits", key: value}, None))


def select_global(scores, names, density):
    flat = torch.cat([scores[n].flatten() for n in names])
    kept = topk_mask(flat, keep_count(density, flat.numel())).split([scores[n].numel() for n in names])
    return {n: k.view_as(scores[n]) for n, k in zip(names, kept)}


def test_synflow_scores_by_hand_and_data_free(digits):
    net = make_net("mlp:5-4-3", seed=3)
    ones = {n: torch.ones_like(w, dtype=torch.float64) for n, w in net.weights.items()}
    s = synflow_scores(net, ones, torch.zeros(1, 5))
    a1, a2 = net.weights["layers.0.weight"].double().abs(), net.weights["layers.1.weight"].double().abs()
    # R = 1ᵀ |W2| |W1| 1, so |W1|_ij dR/d|W1|_ij = |W1|_ij Σ_k |W2|_ki and |W2|_ki dR/d|W2|_ki = |W2|_ki Σ_j |W1|_ij
    torch.testing.assert_close(s["layers.0.weight"], a1 * a2.sum(0)[:, None])
    torch.testing.assert_close(s["layers.1.weight"], a2 * a1.sum(1)[None, :])

    other = load_splits(DataSpec(name="digits", n_extract=300, n_val=100, split_seed=5))
    shuffled = type(digits)(**{**vars(digits), "x_extract": torch.rand_like(digits.x_extract)})
    _, a = run("synflow", digits)
    for data in (other, shuffled):
        _, b = run("synflow", data, seed=9)
        assert all(torch.equal(a[n], b[n]) for n in a)


def test_imp_follows_the_geometric_schedule_and_never_revives(digits):
    result, masks = run("imp", digits, epochs=4, imp_rounds=4, sparsity=0.9)
    total = sum(m.numel() for m in masks.values())
    round_masks = result.trace["round_masks"]
    assert len(round_masks) == 4
    previous = None
    for r, rm in enumerate(round_masks, start=1):
        assert sum(int(m.sum()) for m in rm.values()) == keep_count(0.1 ** (r / 4), total)
        if previous is not None:
            assert all(not bool((rm[n] & ~previous[n]).any()) for n in rm), "a pruned weight came back"
        previous = rm
    assert all(torch.equal(masks[n], round_masks[-1][n]) for n in masks)


def hand_case():
    """Active at 0-3 with |w| 0.1, 0.5, 0.3, 0.9; dense gradient largest at 5 and 7 among the rest."""
    masks = {"w": torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)}
    weights = {"w": torch.tensor([[0.1, -0.5, 0.3, 0.9, 0.0, 0.0, 0.0, 0.0]])}
    grads = {"w": torch.tensor([[0.01, 0.02, -0.03, 0.0, 0.2, -0.8, 0.05, 0.6]])}
    return masks, weights, grads, [(["w"], 0.5)]


def test_rigl_regrows_the_top_gradient_inactive_connections_by_hand():
    masks, weights, grads, groups = hand_case()
    new, grown = prune_and_regrow(masks, weights, {"w": grads["w"].abs()}, groups, fraction=0.5)
    # drop the 2 smallest |w| (entries 0 and 2), grow the 2 largest |g| among entries 0, 2, 4-7: 5 and 7
    assert new["w"].tolist() == [[False, True, False, True, False, True, False, True]]
    assert grown["w"].tolist() == [[False, False, False, False, False, True, False, True]]


def test_rigl_grows_by_the_dense_gradient_on_the_minibatch(digits):
    net = make_net()
    masks = {n: torch.rand(w.shape, generator=torch.Generator().manual_seed(2)) < 0.3 for n, w in net.weights.items()}
    trainer = WeightTrainer(net, masks, WeightOptim())
    x, y = digits.x_extract[:64], digits.y_extract[:64]
    scores = METHODS.get("rigl").load()().grow_scores(trainer, x, y, torch.Generator())
    eff = {n: (net.weights[n] * masks[n]).requires_grad_(True) for n in net.names}
    F.cross_entropy(net.forward_with(x, eff), y).backward()
    for n in net.names:
        torch.testing.assert_close(scores[n], eff[n].grad.abs())
        assert bool((scores[n][~masks[n]] > 0).any())  # masked entries have a gradient too


@pytest.mark.parametrize("name", ["set", "rigl"])
def test_dynamic_sparse_updates_keep_the_count_and_grow_only_inactive(name, digits):
    result, masks = run(name, digits, epochs=3, regrow_every=4)
    updates = result.trace["updates"]
    assert len(updates) == 3  # steps 4, 8, 12 of 15 (no update after the last step)
    for u in updates:
        before, after, grown = u["before"], u["after"], u["grown"]
        survivors = {n: after[n] & ~grown[n] for n in after}
        assert sum(int(m.sum()) for m in after.values()) == sum(int(m.sum()) for m in before.values())
        dropped = sum(int((before[n] & ~survivors[n]).sum()) for n in before)
        active = sum(int(m.sum()) for m in before.values())
        assert dropped == sum(int(g.sum()) for g in grown.values()) == int(0.3 * active)
        assert all(not bool((survivors[n] & ~before[n]).any()) for n in after), "only active entries survive"
    assert all(torch.equal(masks[n], updates[-1]["after"][n]) for n in masks)


def test_set_regrows_only_inactive_entries_and_drops_the_smallest():
    masks, weights, _, groups = hand_case()
    for seed in range(5):
        scores = {"w": torch.rand(1, 8, generator=torch.Generator().manual_seed(seed))}
        new, grown = prune_and_regrow(masks, weights, scores, groups, fraction=0.5)
        assert new["w"][0, 1] and new["w"][0, 3]  # the two largest |w| survive
        assert int(grown["w"].sum()) == 2 and not bool(
            (grown["w"] & torch.tensor([[0, 1, 0, 1, 0, 0, 0, 0]], dtype=torch.bool)).any()
        )
        assert int(new["w"].sum()) == 4


def test_movement_schedule_reaches_the_target_and_final_mask_is_signed_topk(digits):
    assert cubic_density(0, 100, 0.1, 0.1, 0.1) == 1.0
    assert cubic_density(10, 100, 0.1, 0.1, 0.1) == 1.0  # the first step after warm-up
    assert cubic_density(50, 100, 0.1, 0.1, 0.1) == pytest.approx(0.1 + 0.9 * (1 - 40 / 80) ** 3)
    assert cubic_density(90, 100, 0.1, 0.1, 0.1) == 0.1
    result, masks = run("movement", digits, epochs=4, sparsity=0.9)
    d = result.trace["densities"]
    assert len(d) == 20 and d[0] == 1.0 and d[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(d, d[1:])), "the density only decreases"
    flat = torch.cat([s.flatten() for s in result.trace["final_scores"].values()])
    expected = topk_mask(flat, keep_count(0.1, flat.numel()))  # signed: no absolute value
    assert torch.equal(torch.cat([m.flatten() for m in masks.values()]), expected)
    assert not torch.equal(expected, topk_mask(flat.abs(), keep_count(0.1, flat.numel())))  # signs matter here


runner = CliRunner()
QUICK = [
    "--dataset",
    "digits",
    "--model",
    "mlp:64-32-32-10",
    "--n-extract",
    "500",
    "--n-val",
    "200",
    "--quiet",
    "--json",
]


def quick(args) -> list[str]:
    """QUICK, plus --epochs 2 and --batch-size 128 where the method named in `args` reads them."""
    small = for_method(args[args.index("--method") + 1], {"epochs": "2", "batch_size": "128"})
    return [*QUICK, *(f for k, v in small.items() for f in (option_flag(k), v))]


def extract_json(tmp_path, name, *extra):
    r = runner.invoke(app, ["extract", *quick(extra), "--out", str(tmp_path / name), *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_match_sparsity_global_and_per_layer(tmp_path):
    ref = extract_json(tmp_path, "aug.safetensors", "--method", "augmented", "--aug-density", "0.5")
    kept = {la["name"]: la["kept"] for la in ref["layers"]}
    g = extract_json(
        tmp_path, "g.safetensors", "--method", "snip", "--match-sparsity", str(tmp_path / "aug.safetensors")
    )
    assert g["sparsity"]["kept"] == ref["sparsity"]["kept"]
    assert g["sparsity"]["achieved"] == pytest.approx(ref["sparsity"]["achieved"])
    p = extract_json(
        tmp_path,
        "p.safetensors",
        "--method",
        "rigl",
        "--regrow-every",
        "2",
        "--match-sparsity",
        str(tmp_path / "aug.safetensors"),
        "--match-sparsity-per-layer",
    )
    assert {la["name"]: la["kept"] for la in p["layers"]} == kept
    assert p["trained"]["metrics"]["test"]["n"] == p["metrics"]["test"]["n"]
    meta = ticket_io.load(tmp_path / "p.safetensors").method.to_json()
    assert meta["matched_to"] == str(tmp_path / "aug.safetensors") and len(meta["layer_densities"]) == 3


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--method", "snip", "--match-sparsity-per-layer"], "needs --match-sparsity"),
        (["--method", "snip", "--match-sparsity", "missing.safetensors"], "no such file"),
        (["--method", "movement", "--aug-density", "0.5"], "--aug-density applies to augmented only, not movement"),
        (["--method", "snip", "--regrow-every", "5"], "applies to rigl, set only, not snip"),
        (["--method", "edge-popup", "--weight-lr", "0.01"], "applies to imp, movement, rigl, set only"),
        (
            ["--method", "snip", "--layer-densities", "0.1,0.1,0.1", "--match-sparsity", "x.safetensors"],
            "drop --layer-densities",
        ),
        (["--method", "imp", "--imp-rounds", "3"], "multiple of --imp-rounds"),
        (["--method", "set", "--regrow-fraction", "1.5"], "--regrow-fraction"),
        (["--method", "movement", "--movement-warmup", "0.6", "--movement-cooldown", "0.5"], "must be < 1"),
    ],
)
def test_bad_baseline_options_are_one_line_errors(tmp_path, args, needle):
    r = runner.invoke(app, ["extract", *quick(args), "--out", str(tmp_path / "t.safetensors"), *args])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1
