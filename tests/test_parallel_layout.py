"""uccl.parallel's pure-Python parts: the rank generator and groups for many (t, p, d) and both
layouts, partition validation, and the self-adapting (Holmes-style) layer split."""
import itertools

import pytest

from uccl.parallel import Layout, PartitionError, check_partition, self_adapting, uniform
from uccl.parallel.partition import stage_times


def divisors(n):
    return [k for k in range(1, n + 1) if n % k == 0]


@pytest.mark.parametrize("world", [1, 2, 4, 6, 8, 12, 16, 24, 64])
@pytest.mark.parametrize("layout", ["holmes", "naive"])
def test_groups_partition_the_world(world, layout):
    for tp, pp in itertools.product(divisors(world), divisors(world)):
        if world % (tp * pp):
            continue
        lay = Layout(world, tp, pp, layout=layout)
        for kind, size in (("tp", tp), ("dp", lay.dp), ("pp", pp)):
            groups = getattr(lay, kind + "_groups")()
            assert all(len(g) == size for g in groups), (kind, groups)
            assert sorted(r for g in groups for r in g) == list(range(world)), (kind, groups)
        for r in range(world):
            c = lay.coord(r)
            assert lay.rank(c) == r
            mine = lay.groups_of(r)
            for kind in ("tp", "dp", "pp"):
                assert r in mine[kind] and mine[kind] in getattr(lay, kind + "_groups")()
            # A TP group and a DP group share exactly one rank; so do DP and PP, TP and PP.
            assert set(mine["tp"]) & set(mine["dp"]) == {r} == set(mine["dp"]) & set(mine["pp"])


def test_megatron_numbering_and_naive_layout():
    # 2 clusters x 2 hosts x 2 ranks, ranks placed host by host.
    cluster = lambda r: r // 4  # noqa: E731
    h = Layout(8, 1, 2)  # tp fastest, then dp, then pp
    assert h.tp_groups() == [[r] for r in range(8)]
    assert h.dp_groups() == [[0, 1, 2, 3], [4, 5, 6, 7]]   # DP inside a cluster
    assert h.pp_groups() == [[0, 4], [1, 5], [2, 6], [3, 7]]  # PP across
    n = Layout(8, 1, 2, layout="naive")
    assert all(len({cluster(r) for r in g}) == 2 for g in n.dp_groups())  # DP spans clusters
    assert all(len({cluster(r) for r in g}) == 1 for g in n.pp_groups())
    t = Layout(8, 2, 2)
    assert t.tp_groups()[0] == [0, 1] and t.dp_groups()[0] == [0, 2] and t.pp_groups()[0] == [0, 4]


@pytest.mark.parametrize("args,match", [
    ((8, 3, 1), "!= world size"), ((8, 0, 2), "positive"), ((8, 2, 2, 0, "ring"), "layout"),
])
def test_bad_sizes_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        Layout(*args)


def test_check_partition():
    assert check_partition([3, 1], 4, 2) == [3, 1]
    for bad, match in (([2, 2, 0], "3 stage sizes"), ([4, 0], "at least one"), ([2, 3], "sum to 5")):
        with pytest.raises(ValueError, match=match):
            check_partition(bad, 4, 2)


def test_uniform_and_self_adapting():
    assert uniform(10, 4) == [3, 3, 2, 2]
    assert self_adapting(12, [1, 1, 1]) == [4, 4, 4]
    assert self_adapting(12, [2, 1]) == [8, 4]           # layers in proportion to speed
    assert self_adapting(12, [1, 2]) == [4, 8]
    assert self_adapting(9, [2, 1]) == [6, 3]
    # The head costs the last stage 3 layers' worth: it gets fewer layers.
    assert self_adapting(12, [1, 1], alpha_last=3) == [8, 4] or self_adapting(12, [1, 1], alpha_last=3) == [7, 5]
    # Memory cap: the fast stage holds at most 6 layers; the rest goes to the slow one.
    assert self_adapting(12, [3, 1], mem_caps=[6, 12]) == [6, 6]
    # Never worse than uniform on the bottleneck, for many speed ratios.
    for a, b, c in itertools.product([1, 2, 3, 5], repeat=3):
        sp = [a, b, c]
        for L in (3, 7, 16, 31):
            ad, un = self_adapting(L, sp), uniform(L, 3)
            assert sum(ad) == L and min(ad) >= 1
            assert max(stage_times(ad, sp)) <= max(stage_times(un, sp)) + 1e-12, (L, sp, ad, un)


def test_self_adapting_errors():
    with pytest.raises(PartitionError, match="cannot split"):
        self_adapting(2, [1, 1, 1])
    with pytest.raises(PartitionError, match="positive"):
        self_adapting(4, [1, 0])
    with pytest.raises(PartitionError, match="memory holds"):
        self_adapting(10, [1, 1], mem_caps=[4, 5])
