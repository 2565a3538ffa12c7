"""Double-scoring variants: iterated, auxiliary width, frozen auxiliary, signed scores, projected-final,
global top-k, and the auxiliary-share report."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import make_net, method_extract, method_masks, quick_method

from ticketcli.errors import UsageError
from ticketcli.masking import masked_weight
from ticketcli.methods import METHODS
from ticketcli.methods.score_training import ScoreTrainer, init_scores
from ticketcli.methods.scores import Augmented, EdgePopup
from ticketcli.selection.exact import joint_topk_masks, keep_count
from ticketcli.settings.readers import check_method_options


def kept(masks) -> int:
    return sum(int(m.sum()) for m in masks.values())


def total(masks) -> int:
    return sum(m.numel() for m in masks.values())


# ---- iterated ----


@pytest.mark.parametrize("sparsity,tol,max_rounds", [(0.9, 0.02, 8), (0.95, 0.005, 3), (0.6, 0.02, 8)])
def test_iterated_rounds_nest_and_the_stopping_rule_holds(digits, sparsity, tol, max_rounds):
    result = method_extract("iterated", digits, sparsity=sparsity, iter_tolerance=tol, max_rounds=max_rounds)
    masks, rounds, history = result.masks, result.details["rounds"], result.trace["round_masks"]
    assert len(rounds) == len(history) <= max_rounds
    prev, prev_density = None, 1.0
    for r, (info, cum) in enumerate(zip(rounds, history), 1):
        assert info["round"] == r
        # per-round augmented density: target / current keep density, capped at 1/2
        assert info["aug_density"] == pytest.approx(min((1 - sparsity) / prev_density, 0.5))
        if prev is not None:
            for n in cum:
                assert not (cum[n] & ~prev[n]).any(), f"round {r} revived pruned entries of {n}"
        assert info["achieved_sparsity"] == 1 - kept(cum) / total(cum)
        last = r == len(rounds)
        close = abs(info["achieved_sparsity"] - sparsity) <= tol
        stalled = info["achieved_sparsity"] <= 1 - prev_density
        assert last == (close or stalled or r == max_rounds), f"round {r}: stopping rule violated"
        prev, prev_density = cum, kept(cum) / total(cum)
    assert all(torch.equal(masks[n], history[-1][n]) for n in masks)


@pytest.mark.slow
def test_iterated_first_round_is_augmented_at_the_capped_density(digits):
    """Round 1 starts dense, so it is exactly `augmented` at aug density min(target, 1/2) with the same seed."""
    first = method_extract("iterated", digits, sparsity=0.9, max_rounds=1).trace["round_masks"][0]
    a = method_masks("augmented", digits, aug_density=0.1)
    assert all(torch.equal(first[n], a[n]) for n in a)


@pytest.mark.slow
def test_iterated_progress_reports_rounds(digits):
    seen = []
    method_masks("iterated", digits, progress=seen.append, epochs=2, sparsity=0.9, max_rounds=2)
    assert [(s["round"], s["epoch"]) for s in seen][:2] == [(1, 1), (1, 2)]
    assert {s["round"] for s in seen} <= {1, 2}


# ---- auxiliary width ----


@pytest.mark.parametrize("m", [1, 2, 4])
def test_aux_width_gives_score_tensors_of_the_right_shape_and_kept_count(digits, m):
    net = make_net()
    spec = quick_method("augmented", aux_width=m, sparsity=0.9)
    sel = Augmented().selection(net, spec)
    scores = init_scores(net, sel.parts, torch.Generator().manual_seed(0))
    for n, parts in scores.items():
        # S_hat = (S, T_1..T_m): rows x (n + m n) entries
        assert len(parts) == 1 + m and all(p.shape == net.weights[n].shape for p in parts)
    result = method_extract("augmented", digits, aux_width=m, sparsity=0.9)
    masks = result.masks
    for n, a in result.details["aux"].items():
        k = keep_count(0.1, (1 + m) * net.weights[n].numel())
        assert a["aug_kept"] == k  # exactly floor(d * (1 + m) n) kept in the augmented space
        assert a["aug_kept"] - a["aux_kept"] == int(masks[n].sum())
    assert result.details["score_params"] == {"trainable": 1, "total": 1 + m}


def test_wider_aux_reservoir_on_frozen_scores_keeps_fewer_originals():
    """With S = T_i in distribution and nothing trained, the share of kept entries on S is about 1 / (1 + m)."""
    net = make_net("mlp:64-256-10")
    shares = []
    for m in (1, 4):
        spec = quick_method("augmented", aux_width=m, sparsity=0.9)
        sel = Augmented().selection(net, spec)
        scores = init_scores(net, sel.parts, torch.Generator().manual_seed(1))
        rep = sel.aux_report(scores)
        shares.append(
            sum(a["aug_kept"] - a["aux_kept"] for a in rep.values()) / sum(a["aug_kept"] for a in rep.values())
        )
    assert shares[0] == pytest.approx(1 / 2, abs=0.05) and shares[1] == pytest.approx(1 / 5, abs=0.05)


# ---- frozen auxiliary ----


def test_frozen_aux_is_bit_identical_after_training_even_with_weight_decay(digits):
    net = make_net()
    for frozen in (True, False):
        spec = quick_method("augmented", frozen_aux=frozen, weight_decay=0.1)
        scores = init_scores(net, 2, torch.Generator().manual_seed(0))
        trainer = ScoreTrainer(net, Augmented().selection(net, spec), spec, scores)
        for i in range(4):
            trainer.step(digits.x_extract[i * 64 : (i + 1) * 64], digits.y_extract[i * 64 : (i + 1) * 64])
        same = all(torch.equal(trainer.scores[n][1], scores[n][1]) for n in scores)
        assert same == frozen  # weight decay is the only thing that moves T, and --frozen-aux stops it
        assert all(not torch.equal(trainer.scores[n][0].detach(), scores[n][0]) for n in scores)


# ---- signed scores ----


def test_signed_ranking_differs_from_absolute_ranking_on_a_hand_built_case():
    net = make_net("mlp:4-1")
    s = torch.tensor([[-5.0, 1.0, 2.0, -0.1]])
    for signed, expect in ((False, [True, False, True, False]), (True, [False, True, True, False])):
        spec = quick_method("edge-popup", sparsity=0.5, signed_scores=signed)
        masks = EdgePopup().selection(net, spec).select({"layers.0.weight": [s]})
        assert masks["layers.0.weight"].flatten().tolist() == expect


def test_signed_straight_through_gradient_has_no_sign_factor():
    s = torch.tensor([-2.0, 3.0, -1.0], requires_grad=True)
    w = torch.tensor([0.5, -1.5, 2.0])
    h = torch.tensor([1.0, 0.0, 1.0])
    up = torch.tensor([1.0, 2.0, 3.0])
    (masked_weight(s, w, h, signed=True) * up).sum().backward()
    assert torch.equal(s.grad, up * w)
    s.grad = None
    (masked_weight(s, w, h) * up).sum().backward()
    assert torch.equal(s.grad, up * w * s.sign())


@pytest.mark.parametrize("name", ["edge-popup", "augmented"])
def test_signed_scores_change_the_extracted_mask(digits, name):
    a = method_masks(name, digits, sparsity=0.8)
    b = method_masks(name, digits, sparsity=0.8, signed_scores=True)
    assert any(not torch.equal(a[n], b[n]) for n in a)


# ---- projected final ----


@pytest.mark.parametrize("global_topk", [False, True])
def test_project_final_hits_the_exact_requested_sparsity(digits, global_topk):
    masks = method_masks("augmented", digits, sparsity=0.9, project_final=True, global_topk=global_topk)
    if global_topk:
        assert kept(masks) == keep_count(0.1, total(masks))
    else:
        assert all(int(m.sum()) == keep_count(0.1, m.numel()) for m in masks.values())
    free = method_masks("augmented", digits, sparsity=0.9, global_topk=global_topk)
    assert kept(free) != kept(masks)  # without projection the induced sparsity differs


# ---- global top-k ----


@pytest.mark.parametrize("name", ["edge-popup", "augmented"])
def test_global_topk_keeps_exactly_the_requested_count_across_layers(name, digits):
    net = make_net()
    spec = quick_method(name, sparsity=0.7, global_topk=True)
    method = METHODS.get(name).load()()
    sel = method.selection(net, spec)
    scores = init_scores(net, sel.parts, torch.Generator().manual_seed(5))
    masks = sel.select(scores)
    flat = [p[0].abs() for p in scores.values()] + [a.abs() for p in scores.values() for a in p[1:]]
    oracle = joint_topk_masks(flat, keep_count(0.3, sum(t.numel() for t in flat)))
    assert all(torch.equal(masks[n], oracle[i]) for i, n in enumerate(scores))
    if name == "edge-popup":
        assert kept(masks) == keep_count(0.3, total(masks))
        densities = {round(int(m.sum()) / m.numel(), 3) for m in masks.values()}
        assert len(densities) > 1  # layers get different densities: one budget, not one per layer
    rep = sel.aux_report(scores)
    assert sum(a["aug_kept"] for a in rep.values()) == keep_count(0.3, sum(t.numel() for t in flat))
    trained = method_masks(name, digits, global_topk=True, sparsity=0.7)
    if name == "edge-popup":
        assert kept(trained) == keep_count(0.3, total(trained))


def test_global_aux_report_attributes_wide_aux_to_its_layer():
    net = make_net("mlp:8-4-2")
    spec = quick_method("augmented", sparsity=0.5, global_topk=True, aux_width=2)
    sel = Augmented().selection(net, spec)
    big, small = torch.full((4, 8), 10.0), torch.full((2, 4), 0.0)
    scores = {
        "layers.0.weight": [torch.zeros(4, 8), big, big.clone()],  # only layer 0's aux can win
        "layers.1.weight": [torch.ones(2, 4), small, small.clone()],
    }
    rep = sel.aux_report(scores)
    k = keep_count(0.5, 3 * 40)  # 60 of 120: 64 aux entries of layer 0 compete at the top
    assert rep["layers.0.weight"] == {"aug_kept": k, "aux_kept": k}
    assert rep["layers.1.weight"] == {"aug_kept": 0, "aux_kept": 0}


# ---- options are refused where they do not apply ----


@pytest.mark.parametrize(
    "name,option",
    [
        ("edge-popup", {"aux_width": 2}),
        ("edge-popup", {"frozen_aux": True}),
        ("random", {"signed_scores": True}),
        ("random", {"global_topk": True}),
        ("edge-popup", {"project_final": True}),
        ("iterated", {"aug_density": 0.5}),
        ("augmented", {"max_rounds": 3}),
        ("iterated", {"project_final": True}),
        ("augmented", {"layer_densities": (0.1, 0.2, 0.3)}),
    ],
)
def test_inapplicable_options_are_refused(name, option):
    with pytest.raises(UsageError, match="applies to .* only, not"):
        check_method_options(quick_method(name, **option))


def test_global_and_layer_densities_exclude_each_other(digits):
    with pytest.raises(UsageError, match="exclude"):
        method_masks("edge-popup", digits, global_topk=True, layer_densities=(0.1, 0.2, 0.3))


# ---- through the command line ----


@pytest.mark.slow
def test_cli_records_variants_and_reports_aux_share(tmp_path, isolated_env):
    from typer.testing import CliRunner

    from ticketcli.cli.app import app
    from ticketcli.ticketfile import ticket as ticket_io

    out = tmp_path / "t.safetensors"
    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            "augmented",
            "--dataset",
            "digits",
            "--epochs",
            "2",
            "--aux-width",
            "2",
            "--frozen-aux",
            "--signed-scores",
            "--global-topk",
            "--out",
            str(out),
            "--json",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    per = summary["layers"]
    assert all(0 <= v["aux_share"] <= 1 for v in per) and 0 <= summary["sparsity"]["aux_share"] <= 1
    tk = ticket_io.load(out)
    assert (
        tk.method.option("aux_width"),
        tk.method.option("frozen_aux"),
        tk.method.option("signed_scores"),
        tk.method.option("global_topk"),
    ) == (
        2,
        True,
        True,
        True,
    )
    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            "iterated",
            "--dataset",
            "digits",
            "--epochs",
            "1",
            "--max-rounds",
            "2",
            "--out",
            str(tmp_path / "i.safetensors"),
            "--json",
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    rounds = json.loads(r.stdout)["sparsity"]["rounds"]
    assert 1 <= len(rounds) <= 2
    r = CliRunner().invoke(
        app,
        [
            "extract",
            "--method",
            "edge-popup",
            "--dataset",
            "digits",
            "--aux-width",
            "2",
            "--out",
            str(tmp_path / "e.safetensors"),
        ],
    )
    assert r.exit_code == 2 and "--aux-width applies to augmented, iterated only, not edge-popup" in r.output
