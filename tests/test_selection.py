"""The selection front end (selection/groups.py): which parameters compete together (scope_groups, the one place
where per layer or global is decided) and which entries a group keeps (select_group) against an oracle."""

from __future__ import annotations

import pytest
import torch
from helpers import make_net
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketcli.errors import UsageError
from ticketcli.selection.exact import keep_count
from ticketcli.selection.groups import Group, scope_groups, select, select_group
from ticketcli.selection.warm import TopKSelector
from ticketcli.specs.run import MethodSpec

NET = "mlp:64-32-32-10"  # three layers, one masked parameter each


def per_param(net, densities: list[float]) -> list[Group]:
    return [Group((n,), d) for n, d in zip(net.names, densities)]


def test_scope_groups_decides_per_layer_or_global_from_scope_flag_and_layer_densities():
    net = make_net(NET)
    names = tuple(net.names)
    d = MethodSpec(sparsity=0.9).density  # 1 - 0.9
    everyone = [Group(names, d)]
    each = per_param(net, [d] * len(names))
    assert scope_groups(net, MethodSpec(sparsity=0.9), "global") == everyone
    assert scope_groups(net, MethodSpec(sparsity=0.9), "layer") == each
    assert scope_groups(net, MethodSpec(sparsity=0.9, global_topk=True), "layer") == everyone
    # --layer-densities: one group per parameter at its layer's density, whatever the default scope
    spec = MethodSpec(sparsity=0.9, layer_densities=(0.5, 0.25, 1.0))
    by_layer = per_param(net, [0.5, 0.25, 1.0])
    assert scope_groups(net, spec, "global") == scope_groups(net, spec, "layer") == by_layer
    # a method's own density replaces 1 - sparsity and --layer-densities (which such a method does not read)
    assert scope_groups(net, spec, "layer", 0.3) == per_param(net, [0.3] * len(names))
    assert scope_groups(net, MethodSpec(global_topk=True), "layer", 0.3) == [Group(names, 0.3)]


def test_scope_groups_refuses_global_with_layer_densities_and_a_wrong_count():
    net = make_net(NET)
    with pytest.raises(UsageError, match="--global-topk and --layer-densities exclude each other"):
        scope_groups(net, MethodSpec(global_topk=True, layer_densities=(0.5, 0.5, 0.5)), "layer")
    with pytest.raises(UsageError, match="3 layers"):
        scope_groups(net, MethodSpec(layer_densities=(0.5, 0.5)), "global")


def oracle(parts: dict[str, list[torch.Tensor]], names: tuple[str, ...], k: int) -> dict[str, torch.Tensor]:
    """By definition: a stable descending sort of every first part (in `names` order), then every parameter's
    further parts, keeps the first k; equal values stay in index order (ties to the lowest concatenated index)."""
    order = [parts[n][0] for n in names] + [a for n in names for a in parts[n][1:]]
    flat = torch.cat([t.reshape(-1) for t in order])
    keep = torch.zeros(flat.numel(), dtype=torch.bool)
    keep[torch.sort(flat, descending=True, stable=True).indices[:k]] = True
    firsts = keep[: sum(parts[n][0].numel() for n in names)].split([parts[n][0].numel() for n in names])
    return {n: m.view(parts[n][0].shape) for n, m in zip(names, firsts)}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
    st.integers(1, 3),
    st.integers(0, 2**31 - 1),
    st.booleans(),
    st.floats(0.0, 1.0),
)
def test_select_group_keeps_exactly_k_of_all_parts_ties_to_the_lowest_concatenated_index(sizes, n_parts, seed, ties, f):
    g = torch.Generator().manual_seed(seed)
    names = tuple(f"p{i}" for i in range(len(sizes)))
    parts = {n: [torch.randn(2, s, generator=g) for _ in range(n_parts)] for n, s in zip(names, sizes)}
    if ties:  # few distinct values: many ties at the threshold, across parameters and parts
        parts = {n: [t.round() for t in p] for n, p in parts.items()}
    k = round(f * n_parts * 2 * sum(sizes))
    expected = oracle(parts, names, k)
    got = select_group(parts, names, k)
    assert all(torch.equal(got[n], expected[n]) for n in names)
    # each parameter alone, through the warm search (cold, then warm on the same values): the same bits
    warm = TopKSelector()
    for n in names:
        k1 = round(f * n_parts * parts[n][0].numel())
        for _ in range(2):
            m = select_group(parts, (n,), k1, warm=warm, dtype=torch.float32)[n]
            assert torch.equal(m, oracle(parts, (n,), k1)[n].float())


def test_select_follows_the_groups_and_the_density_schedule():
    net = make_net(NET)
    g = torch.Generator().manual_seed(0)
    scores = {n: torch.randn(net.weights[n].shape, generator=g) for n in net.names}
    total = sum(s.numel() for s in scores.values())
    spec = MethodSpec(sparsity=0.75)
    together = select(scores, scope_groups(net, spec, "global"))
    assert sum(int(m.sum()) for m in together.values()) == keep_count(0.25, total)
    apart = select(scores, scope_groups(net, spec, "layer"))
    assert all(int(apart[n].sum()) == keep_count(0.25, s.numel()) for n, s in scores.items())
    assert not all(torch.equal(together[n], apart[n]) for n in net.names)  # one threshold for all moves entries
    scheduled = select(scores, scope_groups(net, spec, "global"), lambda d: d**0.5)
    assert sum(int(m.sum()) for m in scheduled.values()) == keep_count(0.25**0.5, total)
