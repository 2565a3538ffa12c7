"""Structured masks (--structure N:M, --block RxC): the selection against oracles (N:M: the N largest of each run of M,
ties to the lowest index; blocks: exactly k whole blocks by their mean), every mask of every score method's ticket
in the pattern, the options' refusals in one line, and the ticket that records the pattern and shows it in
evaluate, inspect and inspect --command."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import make_net, method_extract, quick_method
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import ticketcli as tc
from ticketcli.cli.app import app
from ticketcli.errors import UsageError
from ticketcli.methods import METHODS
from ticketcli.methods.score_training import ScoreTrainer, seeded_scores
from ticketcli.methods.scores import EdgePopup
from ticketcli.selection.shaped import block_scores, nm_mask, patterned_masks
from ticketcli.selection.structure import (
    Blocks,
    Structure,
    check_fits,
    is_blocks,
    is_n_m,
    parse_block,
    parse_structure,
    pattern_of,
)
from ticketcli.settings.resolve import build_extract_spec, merge_settings
from ticketcli.ticketfile import ticket as ticket_io

SHAPED = [m for m in METHODS.names() if "structure" in {o.name for o in METHODS.get(m).options}]
runner = CliRunner()


def test_the_score_methods_take_the_options_and_the_others_do_not():
    assert set(SHAPED) == {"edge-popup", "augmented", "iterated", "random", "snip", "grasp", "synflow"}
    for m in METHODS.names():
        assert ("block" in {o.name for o in METHODS.get(m).options}) == (m in SHAPED)


# ---- the selection, against oracles ----


def nm_oracle(values: torch.Tensor, n: int, m: int) -> torch.Tensor:
    """By definition: in each run of m of each row, the n largest, equal values in index order."""
    rows = values.reshape(values.shape[0], -1)
    keep = torch.zeros(rows.shape, dtype=torch.bool)
    for r in range(rows.shape[0]):
        for start in range(0, rows.shape[1], m):
            run = rows[r, start : start + m].tolist()
            for i in sorted(range(m), key=lambda i: (-run[i], i))[:n]:
                keep[r, start + i] = True
    return keep.view(values.shape)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.integers(1, 6), st.integers(2, 8), st.data(), st.integers(0, 2**31 - 1), st.booleans())
def test_n_m_keeps_the_n_largest_of_every_run_of_m_ties_to_the_lowest_index(rows, runs, m, data, seed, ties):
    n = data.draw(st.integers(1, m - 1))
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, runs * m, generator=g)
    if ties:
        values = values.round()
    mask = nm_mask(values, Structure(n, m))
    assert torch.equal(mask, nm_oracle(values, n, m))
    assert is_n_m(mask, n, m) and is_n_m(mask.numpy(), n, m)
    conv = values.reshape(rows, 1, runs, m)  # a convolution's weight: (out, in, kh, kw), read as (out, in*kh*kw)
    assert torch.equal(nm_mask(conv, Structure(n, m)).reshape(rows, -1), mask)


def block_oracle(parts: list[torch.Tensor], k: int, r: int, c: int) -> list[torch.Tensor]:
    """By definition: every block's mean (edge blocks over their own entries), the k largest over all parts' blocks
    in order (row-major within a part), ties to the lowest index; a kept block keeps all its entries."""
    blocks = []
    for p, t in enumerate(parts):
        for i in range(0, t.shape[0], r):
            for j in range(0, t.shape[1], c):
                blocks.append((float(t[i : i + r, j : j + c].double().mean()), len(blocks), p, i, j))
    kept = sorted(blocks, key=lambda b: (-b[0], b[1]))[:k]
    out = [torch.zeros(t.shape, dtype=torch.bool) for t in parts]
    for _, _, p, i, j in kept:
        out[p][i : i + r, j : j + c] = True
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(1, 9)), min_size=1, max_size=3),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 2),
    st.floats(0, 1),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_blocks_keep_exactly_k_whole_blocks_by_their_mean(shapes, r, c, n_parts, f, seed, ties):
    if r == c == 1:
        c = 2
    g = torch.Generator().manual_seed(seed)
    names = [f"p{i}" for i in range(len(shapes))]
    parts = {n: [torch.randn(s, generator=g) for _ in range(n_parts)] for n, s in zip(names, shapes)}
    if ties:
        parts = {n: [t.round() for t in p] for n, p in parts.items()}
    total = n_parts * sum(block_scores(parts[n][0], Blocks(r, c)).numel() for n in names)
    k = round(f * total)
    got = patterned_masks(parts, names, k, Blocks(r, c))
    order = [parts[n][0] for n in names] + [a for n in names for a in parts[n][1:]]  # joint_masks' order
    expected = block_oracle(order, k, r, c)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert all(is_blocks(m, r, c) for m in got)


def test_the_pattern_checks_say_no_to_masks_outside_the_pattern():
    nm = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0]], dtype=torch.bool)
    assert is_n_m(nm, 2, 4) and not is_n_m(nm, 1, 4) and not is_n_m(nm, 2, 3)
    assert not is_n_m(torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0]]), 2, 4)
    blocks = np.zeros((5, 6), dtype=bool)
    blocks[4:, 4:] = True  # a whole edge block of 1x2
    assert is_blocks(blocks, 4, 4) and is_blocks(blocks, 1, 2) and not is_blocks(blocks, 1, 3)
    blocks[0, 0] = True
    assert not is_blocks(blocks, 4, 4) and is_blocks(blocks, 1, 1)


@pytest.mark.parametrize(
    "text, error",
    [("2-4", "must be N:M"), ("4:4", "0 < N < M"), ("0:4", "0 < N < M"), ("3:2", "0 < N < M"), ("2:2000", "<= 1024")],
)
def test_a_bad_structure_is_one_usage_error(text, error):
    with pytest.raises(UsageError, match=error):
        parse_structure(text)


@pytest.mark.parametrize("text, error", [("4", "must be RxC"), ("1x1", "leave --block out"), ("0x4", "sides in")])
def test_a_bad_block_is_one_usage_error(text, error):
    with pytest.raises(UsageError, match=error):
        parse_block(text)


def test_check_fits_refuses_a_width_no_multiple_of_m_and_a_bias_in_one_line():
    check_fits(Structure(2, 4), {"w": (8, 12), "c": (4, 2, 2, 2)})
    check_fits(Blocks(4, 4), {"w": (10, 7)})  # edge blocks
    with pytest.raises(UsageError, match=r"c has an input width of 9 \(shape 4x1x3x3 read as 4x9\)"):
        check_fits(Structure(2, 4), {"c": (4, 1, 3, 3)})
    with pytest.raises(UsageError, match="is a vector"):
        check_fits(Blocks(2, 2), {"b": (8,)})
    assert pattern_of({"structure": None, "block": None}) is None
    assert pattern_of({"structure": "2:4"}) == Structure(2, 4) and pattern_of({"block": "2x8"}) == Blocks(2, 8)


# ---- every mask of every score method, at every step ----


@pytest.mark.parametrize("pattern", [{"structure": "2:4"}, {"structure": "1:4"}, {"block": "4x4"}])
@pytest.mark.parametrize("method", SHAPED)
def test_every_mask_of_every_score_method_has_the_pattern(digits, method, pattern):
    sparsity = 0.5 if pattern.get("structure") == "2:4" else 0.75
    masks = method_extract(method, digits, sparsity=sparsity, **pattern).masks
    structure = pattern_of(pattern)
    for name, m in masks.items():
        if isinstance(structure, Structure):
            assert is_n_m(m, structure.n, structure.m), name
        else:
            assert is_blocks(m, 4, 4), name
            assert not is_blocks(m, 8, 8) or not m.any() or m.all(), name  # blocks of 4, not coarser by chance
    kept = sum(int(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())
    if isinstance(structure, Structure):
        assert kept == structure.n / structure.m


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(st.sampled_from(SHAPED), st.sampled_from(["2:4", "1:4", "3:8", "2x8", "4x4", "3x5"]), st.integers(0, 99))
def test_the_pattern_holds_for_any_method_pattern_and_seed(method, text, seed):
    digits = _digits()
    key = "structure" if ":" in text else "block"
    masks = method_extract(method, digits, seed=seed, net=make_net(seed=seed), **{key: text}).masks
    pattern = pattern_of({key: text})
    assert all(
        is_n_m(m, pattern.n, pattern.m) if isinstance(pattern, Structure) else is_blocks(m, pattern.rows, pattern.cols)
        for m in masks.values()
    )


_cache: dict[str, object] = {}


def _digits():
    if "d" not in _cache:
        from ticketcli.data.datasets import load_splits
        from ticketcli.specs.run import DataSpec

        _cache["d"] = load_splits(DataSpec(name="digits", n_extract=300, n_val=100, split_seed=0))
    return _cache["d"]


@pytest.mark.parametrize("pattern", [Structure(2, 4), Blocks(4, 4)])
def test_the_straight_through_forward_trains_with_the_structured_mask(digits, pattern):
    net = make_net()
    key = {"structure": "2:4"} if isinstance(pattern, Structure) else {"block": "4x4"}
    spec = quick_method("edge-popup", sparsity=0.5, **key)
    selection = EdgePopup().selection(net, spec)
    trainer = ScoreTrainer(net, selection, spec, *seeded_scores(net, 1, torch.Generator().manual_seed(0)))
    for step in range(3):
        _, _, hard = trainer.step(digits.x_extract[:64], digits.y_extract[:64])
        for name, m in hard.items():
            ok = is_n_m(m, 2, 4) if isinstance(pattern, Structure) else is_blocks(m, 4, 4)
            assert ok, (step, name)


# ---- the options on the command line and in the API ----


def spec_of(**settings):
    base = {"dataset": "digits", "model": "mlp:64-32-10", "method": "edge-popup"}
    return build_extract_spec(merge_settings({**base, **settings}, None))


def test_n_m_implies_the_sparsity_and_refuses_another():
    assert spec_of(structure="2:4").method.sparsity == 0.5
    assert spec_of(structure=" 1:4 ").method.options["structure"] == "1:4"
    assert spec_of(structure="1:4", sparsity=0.75).method.sparsity == 0.75
    with pytest.raises(UsageError, match=r"--structure 2:4 keeps 2 of every 4 weights, the sparsity 0.5; --spars"):
        spec_of(structure="2:4", sparsity=0.9)
    assert spec_of(block="4x4", sparsity=0.6).method.sparsity == 0.6  # the fraction of blocks dropped
    with pytest.raises(UsageError, match="exclude each other"):
        spec_of(structure="2:4", block="4x4")
    with pytest.raises(UsageError, match="drop --layer-densities"):
        spec_of(structure="2:4", layer_densities="0.5,0.5")
    with pytest.raises(UsageError, match="drop --aug-density"):
        spec_of(method="augmented", structure="2:4", aug_density=0.3)
    with pytest.raises(UsageError, match="applies to augmented, edge-popup, grasp, iterated, random, snip, synflow"):
        spec_of(method="imp", structure="2:4")
    with pytest.raises(UsageError, match="applies to augmented, edge-popup, grasp, iterated, random, snip, synflow"):
        spec_of(method="rigl", block="4x4")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "conv4", "--structure", "2:4"], "features.0.weight has an input width of 9"),
        (["--model", "mlp:64-32-10+bias", "--block", "4x4"], "layers.0.bias is a vector"),
        (["--method", "movement", "--block", "4x4"], "--block applies to"),
        (["--structure", "two:four"], "--structure must be N:M"),
    ],
)
def test_the_command_line_refuses_in_one_line(tmp_path, args, needle):
    out = tmp_path / "t.safetensors"
    r = runner.invoke(app, ["extract", "--dataset", "digits", "--epochs", "1", "--out", str(out), *args])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("error: ") and needle in err and len(err.splitlines()) == 1, err
    assert not out.exists()


@pytest.fixture(scope="module")
def structured_ticket(tmp_path_factory):
    out = tmp_path_factory.mktemp("st") / "s.safetensors"
    r = runner.invoke(
        app,
        ["extract", "--dataset", "digits", "--model", "mlp:64-32-10", "--method", "edge-popup", "--epochs", "1"]
        + ["--structure", "2:4", "--quiet", "--out", str(out)],
    )
    assert r.exit_code == 0, r.output
    return out


def test_the_ticket_records_the_structure_and_a_plain_one_does_not(structured_ticket, tmp_path):
    tk = ticket_io.load(structured_ticket)
    assert tk.method.to_json()["structure"] == "2:4" and "block" not in tk.method.to_json()
    assert tk.sparsity.requested == 0.5
    assert all(is_n_m(m, 2, 4) for m in tk.masks.values())
    plain = tc.extract("mlp:64-32-10", "digits", method="edge-popup", epochs=1, progress=False)
    assert "structure" not in plain.record.method.to_json()


def test_evaluate_and_inspect_show_the_structure(structured_ticket):
    r = runner.invoke(app, ["inspect", str(structured_ticket)])
    assert r.exit_code == 0 and "structure=2:4" in r.output.replace("\n", "").replace("│", "").replace(" ", "")
    r = runner.invoke(app, ["evaluate", str(structured_ticket)])
    assert r.exit_code == 0 and "(2:4)" in r.output, r.output
    r = runner.invoke(app, ["evaluate", str(structured_ticket), "--json"])
    assert json.loads(r.stdout)["method"]["structure"] == "2:4"
    r = runner.invoke(app, ["inspect", str(structured_ticket), "--command"])
    assert r.exit_code == 0 and "--structure 2:4" in r.stdout and "--sparsity" in r.stdout, r.output


def test_the_python_api_takes_the_options_by_keyword():
    t = tc.extract("mlp:64-32-10", "digits", method="random", block="4x4", sparsity=0.75, progress=False)
    assert t.record.method.to_json()["block"] == "4x4"
    assert all(is_blocks(m, 4, 4) for m in t.masks.values())
    with pytest.raises(UsageError, match="structure="):
        tc.extract("mlp:64-32-10", "digits", method="random", structure="2:4", sparsity=0.9, progress=False)
