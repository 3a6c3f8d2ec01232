"""The planner's own logic with an injected communication cost (no uccl.cost needed):
enumeration under the constraints, the 1F1B model with unequal stages, memory limits, the
depth-first search's pruning (same best plan as the exhaustive search), and the choices it
should make on a two-cluster machine with a slow link between the clusters."""
import itertools

import pytest

from uccl.planner.estimate import Comm, Strategy, estimate
from uccl.planner.search import search
from uccl.planner.spec import Cluster, DeviceKind, ModelSpec, PlanInputError, cluster_from_dict, model_from_dict

GIB = 1 << 30


def two_clusters(speeds=(1e9, 1e9), per_host=2, hosts=2, mem_gib=8):
    placement, dev = [], []
    for c, sp in enumerate(speeds):
        kind = DeviceKind(f"k{c}", sp, mem_gib * GIB)
        for h in range(hosts):
            placement += [f"c{c}h{h}"] * per_host
            dev += [kind] * per_host
    return Cluster({"clusters": []}, placement, dev, {h: per_host for h in set(placement)})


def link_comm(cluster, host_bw=1e10, intra_bw=1e9, inter_bw=1e7, lat=1e-5):
    """A ring's bytes over the slowest link its members span."""
    cl = {i: h.split("h")[0] for i, h in enumerate(cluster.placement)}

    def bw(ranks):
        if len({cl[r] for r in ranks}) > 1:
            return inter_bw
        return intra_bw if len({cluster.placement[r] for r in ranks}) > 1 else host_bw

    def coll(c, n, ranks):
        k = len(ranks)
        factor = {"all_reduce": 2 * (k - 1) / k}.get(c, (k - 1) / k)
        return lat * k + factor * n / bw(ranks)

    return Comm(coll, lambda s, d, n: lat + n / bw([s, d]),
                lambda r: "across clusters" if len({cl[x] for x in r}) > 1 else "inside a cluster")


def free_comm():
    return Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0)


MODEL = ModelSpec(layers=8, hidden=64, heads=4, seq=32, vocab=256, global_batch=16)


def test_1f1b_unequal_stages_without_communication():
    cl = two_clusters(speeds=(2e9, 1e9))
    st = Strategy(tp=1, pp=2, dp=4, micro_batch=1, n_micro=4, layout="holmes", parts=[5, 3], order=[0, 1])
    e = estimate(MODEL, cl, free_comm(), st)
    w = MODEL.layer_flops(1)
    c0, c1 = 5 * w / 2e9, (3 * w + MODEL.head_flops(1)) / 1e9
    assert e.stage_s == pytest.approx([c0, c1])
    # The pipeline drains at stage 0 last: sum of the slots plus (m - 1) bottleneck slots.
    assert e.time_s == pytest.approx(c0 + c1 + 3 * max(c0, c1))
    # Swapping the stage order puts the 3 layers on the fast devices: a different bottleneck.
    e2 = estimate(MODEL, cl, free_comm(), Strategy(1, 2, 4, 1, 4, "holmes", [5, 3], [1, 0]))
    assert e2.stage_s == pytest.approx([5 * w / 1e9, (3 * w + MODEL.head_flops(1)) / 2e9])


def test_dp_time_counts_after_the_stage_drains():
    cl = two_clusters()
    comm = Comm(lambda c, n, r: 1.0 if c in ("reduce_scatter", "all_gather") else 0.0, lambda s, d, n: 0.0)
    st = Strategy(1, 2, 4, 1, 4, "holmes", [4, 4], [0, 1])
    e0 = estimate(MODEL, cl, free_comm(), st)
    e = estimate(MODEL, cl, comm, st)
    # Stage 0 finishes last; its RS + AG (2 s) are exposed in full, stage 1's partly hidden.
    assert e.time_s == pytest.approx(e0.time_s + 2.0)
    assert e.breakdown["dp"] == pytest.approx(2.0)


def test_enumeration_respects_constraints():
    cl = two_clusters(per_host=4)
    plans, stats = search(MODEL, cl, link_comm(cl), top=1000, prune=False)
    assert plans and stats.evaluated >= len(plans)
    seen = set()
    for e, s in plans:
        assert s.tp * s.pp * s.dp == cl.world
        assert 4 % s.tp == 0 and MODEL.heads % s.tp == 0 and MODEL.seq % s.tp == 0  # TP inside a host
        assert s.pp <= MODEL.layers and sum(s.parts) == MODEL.layers and min(s.parts) >= 1
        assert MODEL.global_batch == s.dp * s.micro_batch * s.n_micro
        assert sorted(s.order) == list(range(s.pp))
        assert s.key() not in seen
        seen.add(s.key())
    assert {s.tp for _, s in plans} == {1, 2, 4}
    assert {s.layout for _, s in plans} == {"holmes", "naive"}


def test_memory_limit_excludes_plans():
    big = ModelSpec(layers=8, hidden=1024, heads=8, seq=256, vocab=1000, global_batch=16)
    cl = two_clusters(mem_gib=0.2)
    plans, stats = search(big, cl, link_comm(cl), top=1000, prune=False)
    assert stats.infeasible > 0
    assert all(e.memory_bytes <= 0.2 * GIB for e, _ in plans)
    assert all(s.pp > 1 or s.tp > 1 for _, s in plans)  # the whole model fits no single device


@pytest.mark.parametrize("speeds", [(1e9, 1e9), (2e9, 1e9), (1e9, 3e9)])
@pytest.mark.parametrize("inter", [1e9, 1e7])
def test_pruned_search_finds_the_exhaustive_best(speeds, inter):
    cl = two_clusters(speeds=speeds)
    comm = link_comm(cl, inter_bw=inter)
    best, stats = search(MODEL, cl, comm, top=3)
    full, fstats = search(MODEL, cl, comm, top=3, prune=False)
    assert [e.time_s for e, _ in best] == pytest.approx([e.time_s for e, _ in full])
    assert fstats.pruned == 0 and fstats.evaluated >= stats.evaluated


def test_slow_link_between_clusters_prefers_holmes_and_fast_devices_get_more_layers():
    cl = two_clusters(speeds=(2e9, 1e9))
    plans, _ = search(MODEL, cl, link_comm(cl, inter_bw=1e6), top=5)
    e, s = plans[0]
    if s.pp > 1 and s.dp > 1:
        assert s.layout == "holmes"  # DP inside clusters, only activations cross
    naive = estimate(MODEL, cl, link_comm(cl, inter_bw=1e6), Strategy(1, 2, 4, 1, 4, "naive", [4, 4], [0, 1]))
    holmes = estimate(MODEL, cl, link_comm(cl, inter_bw=1e6), Strategy(1, 2, 4, 1, 4, "holmes", [4, 4], [0, 1]))
    assert holmes.time_s < naive.time_s
    pp2 = [(e, s) for e, s in search(MODEL, cl, link_comm(cl, inter_bw=1e6), top=1000, prune=False)[0]
           if s.pp == 2 and s.layout == "holmes"]
    e, s = min(pp2, key=lambda x: x[0].time_s)
    fast_stage = s.order.index(0)  # position 0 = cluster 0 = the fast devices
    assert s.parts[fast_stage] > s.parts[1 - fast_stage], (s.parts, s.order)


def test_input_errors_are_named():
    with pytest.raises(PlanInputError, match="no 'devices'"):
        cluster_from_dict({"topology": {"clusters": []}})
    topo = {"clusters": [{"name": "a", "hosts": ["h0"]}]}
    with pytest.raises(PlanInputError, match="host 'h0'"):
        cluster_from_dict({"topology": topo, "devices": {"x": {"flops": 1}}})
    with pytest.raises(PlanInputError, match="unknown device kind 'y'"):
        cluster_from_dict({"topology": topo, "devices": {"x": {"flops": 1}}, "hosts": {"a": {"device": "y"}}})
    cl = cluster_from_dict({"topology": topo, "devices": {"x": {"tflops": 1, "efficiency": 0.5}},
                            "hosts": {"a": {"device": "x", "count": 4}}})
    assert cl.placement == ["h0"] * 4 and cl.device_of_rank[0].flops == 0.5e12
    with pytest.raises(PlanInputError, match="layers must be positive"):
        model_from_dict(dict(layers=0, hidden=8, heads=1, seq=4, vocab=4, global_batch=1))
