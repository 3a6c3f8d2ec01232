"""The planner's calibrated cost model (uccl/planner/calibration.py) on given profiles: the fits,
max(link, CPU-bound) per operation, the quota scaling, measured compute and optimizer times,
DP buckets, and that a calibration covers every group shape the search can use."""
import pytest

from uccl.parallel.layout import Layout
from uccl.planner import calibration as cb
from uccl.planner.estimate import Comm, Strategy, bucketed, estimate
from uccl.planner.search import search
from uccl.planner.spec import Cluster, DeviceKind, ModelSpec, PlanInputError, model_from_dict

GIB = 1 << 30
PLACEMENT = [f"c{c}h{h}" for c in range(2) for h in range(2) for _ in range(2)]
CLUSTER_OF = {h: h[:2] for h in PLACEMENT}
MODEL = ModelSpec(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16)


def bed(timings=None, quota=0.1):
    kind = DeviceKind("cpu", 1e9, 4 * GIB, quota, timings)
    topo = {"clusters": [{"name": c, "hosts": [{"name": f"{c}h{h}"} for h in range(2)]} for c in ("c0", "c1")]}
    return Cluster(topo, list(PLACEMENT), [kind] * 8, {h: 2 for h in set(PLACEMENT)})


def test_fit_linear():
    assert cb.fit_linear([0, 100, 1000], [0.01, 0.02, 0.11]) == pytest.approx((0.01, 1e-4))
    assert cb.fit_linear([5], [0.3]) == (0.3, 0.0)
    # noisy points with a negative slope: no per-byte cost, the (1/t^2-weighted) mean latency
    a, b = cb.fit_linear([1, 2], [0.2, 0.1])
    assert b == 0.0 and a == pytest.approx((0.2 / 0.04 + 0.1 / 0.01) / (1 / 0.04 + 1 / 0.01))
    # a negative intercept is refitted through the origin
    a, b = cb.fit_linear([100, 200], [0.01, 0.05])
    assert a == 0.0 and b == pytest.approx((100 * 0.01 / 1e-4 + 200 * 0.05 / 25e-4) / (1e4 / 1e-4 + 4e4 / 25e-4))
    # relative weighting: one slow large message does not set the small messages' latency
    a, b = cb.fit_linear([256, 4096, 65536, 1 << 20], [0.063, 0.059, 0.189, 0.259])
    assert a < 0.08
    for bad in (([1, 2], [1.0]), ([1, 2], [0.0, 1.0])):
        with pytest.raises(ValueError):
            cb.fit_linear(*bad)


def test_group_shape():
    assert cb.group_shape(PLACEMENT, CLUSTER_OF, [0, 1]) == "n2h1c1"
    assert cb.group_shape(PLACEMENT, CLUSTER_OF, [0, 2]) == "n2h2c1"
    assert cb.group_shape(PLACEMENT, CLUSTER_OF, range(8)) == "n8h4c2"


CAL = {"quota": 0.1, "comm": {"n2h1c1": {"all_gather": {"0": 0.004, "1000": 0.005}},
                              "n2h2c2": {"p2p": {"0": 0.01, "1000000": 0.11}}}}


def test_comm_time_and_quota_scaling():
    cal = cb.Calibration(CAL)
    assert cal.comm_time("all_gather", 2000, "n2h1c1") == pytest.approx(0.006)
    # at half the cores CPU-bound work takes twice as long
    assert cal.comm_time("all_gather", 2000, "n2h1c1", quota=0.05) == pytest.approx(0.012)
    assert cal.comm_time("all_gather", 2000, "n4h2c1") is None
    assert cal.comm_time("reduce_scatter", 2000, "n2h1c1") is None


def test_calibrated_comm_takes_the_slower_of_link_and_cpu():
    link = Comm(lambda c, n, r: 1e-6 + n / 1e5, lambda s, d, n: n / 1e5)  # 100 kB/s
    comm = cb.calibrated_comm(link, cb.Calibration(CAL), PLACEMENT, CLUSTER_OF, [0.1] * 8)
    # small message: the CPU's per-operation latency (the CPU-bound rate is 1 MB/s)
    assert comm.coll("all_gather", 100, [0, 1]) == pytest.approx(0.004 + 1e-6 * 100)
    # large message: the link
    assert comm.coll("all_gather", 1e6, [0, 1]) == pytest.approx(1e-6 + 10.0)
    # uncalibrated shape: the link alone
    assert comm.coll("all_gather", 100, [0, 2]) == pytest.approx(1e-6 + 1e-3)
    # p2p across clusters: 0.01 + 1e-7 n against n / 1e5
    assert comm.p2p(0, 4, 1000) == pytest.approx(max(0.01 + 1e-4, 1e-2))
    assert comm.p2p(0, 4, 1e6) == pytest.approx(10.0)
    slow = cb.calibrated_comm(link, cb.Calibration(CAL), PLACEMENT, CLUSTER_OF, [0.1] * 4 + [0.05] * 4)
    assert slow.p2p(0, 4, 0) == pytest.approx(0.02)  # the slower member's quota


def test_async_buckets_priced_as_measured_async():
    """ZeRO's buckets are issued as a batch of async operations: a calibration that measured
    '<op>_async' prices them so; one that did not (and plain cost functions) as '<op>'."""
    doc = {"quota": 0.1, "comm": {"n2h1c1": {"reduce_scatter": {"0": 0.002, "1000": 0.003},
                                             "reduce_scatter_async": {"0": 0.004, "1000": 0.007}}}}
    free = Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0)
    comm = cb.calibrated_comm(free, cb.Calibration(doc), PLACEMENT, CLUSTER_OF, [0.1] * 8)
    assert comm.coll("reduce_scatter_async", 1000, [0, 1]) == pytest.approx(0.007)
    assert comm.coll("reduce_scatter", 1000, [0, 1]) == pytest.approx(0.003)
    doc["comm"]["n2h1c1"].pop("reduce_scatter_async")
    comm = cb.calibrated_comm(free, cb.Calibration(doc), PLACEMENT, CLUSTER_OF, [0.1] * 8)
    assert comm.coll("reduce_scatter_async", 1000, [0, 1]) == pytest.approx(0.003)
    seen = []
    plain = Comm(lambda c, n, r: seen.append(c) or 1.0, lambda s, d, n: 0.0)
    assert plain.coll("all_gather_async", 10, [0, 1]) == 1.0 and seen == ["all_gather"]
    # the estimate's DP term uses the async prices: 4 ranks per host pair, d = 2 inside a host
    tm = {"block": {"1,1": 0.1}, "head": {"1,1": 0.05}, "adam_per_param": 0.0}
    model = ModelSpec(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16, bucket_bytes=0)
    st = Strategy(1, 4, 2, 1, 8, "holmes", [1, 1, 1, 1], [0, 1, 2, 3])
    cal = {"quota": 0.1, "comm": {"n2h1c1x4": {op: {"0": v} for op, v in (
        ("reduce_scatter", 0.001), ("all_gather", 0.001), ("reduce_scatter_async", 0.01),
        ("all_gather_async", 0.02))}}}
    e = estimate(model, bed(tm), cb.calibrated_comm(free, cb.Calibration(cal), PLACEMENT, CLUSTER_OF,
                                                    [0.1] * 8), st)
    assert e.breakdown["dp"] == pytest.approx(0.03)


def test_measured_compute_replaces_flops():
    tm = {"block": {"1,1": 0.1, "2,1": 0.06}, "head": {"1,1": 0.05, "2,1": 0.03}, "adam_per_param": 0.0}
    free = Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0)
    e = estimate(MODEL, bed(tm), free, Strategy(1, 2, 4, 1, 4, "holmes", [3, 1], [0, 1]))
    assert e.stage_s == pytest.approx([0.3, 0.1 + 0.05])
    assert e.time_s == pytest.approx(0.3 + 0.15 + 3 * 0.3)
    e2 = estimate(MODEL, bed(tm), free, Strategy(2, 2, 2, 1, 8, "holmes", [2, 2], [0, 1]))
    assert e2.stage_s == pytest.approx([2 * 0.06, 2 * 0.06 + 0.03])
    # a (t, b) that was not measured falls back to FLOPs / t / speed
    e3 = estimate(MODEL, bed(tm), free, Strategy(1, 2, 4, 2, 2, "holmes", [2, 2], [0, 1]))
    assert e3.stage_s[0] == pytest.approx(2 * MODEL.layer_flops(2) / 1e9)


def test_optimizer_and_buckets():
    calls = []

    def coll(c, n, r):
        calls.append((c, n))
        return 0.01 if c in ("reduce_scatter", "all_gather") else 0.0

    comm = Comm(coll, lambda s, d, n: 0.0)
    assert bucketed(comm, "reduce_scatter", 2.5e6, [0, 1], 1_000_000) == pytest.approx(0.03)
    assert bucketed(comm, "reduce_scatter", 2e6, [0, 1], 1_000_000) == pytest.approx(0.02)
    assert bucketed(comm, "reduce_scatter", 2e6, [0, 1], 0) == pytest.approx(0.01)
    assert ("reduce_scatter", 500000.0) in calls
    tm = {"block": {"1,1": 0.1}, "head": {"1,1": 0.05}, "adam_per_param": 1e-8}
    model = ModelSpec(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16, bucket_bytes=1 << 16)
    st = Strategy(1, 1, 8, 1, 2, "holmes", [4], [0])
    e = estimate(model, bed(tm), Comm(coll, lambda s, d, n: 0.0), st)
    params = 4 * model.layer_params() + model.embed_params() + model.head_params()
    n_ops = -(-params * 4 // (1 << 16))
    assert e.breakdown["dp"] == pytest.approx(2 * 0.01 * n_ops + 1e-8 * params / 8)
    with pytest.raises(PlanInputError):
        model_from_dict(dict(layers=1, hidden=8, heads=1, seq=8, vocab=8, global_batch=1, bucket_bytes=-1))


def test_partitions_cover_every_group_of_every_layout():
    """Every group the estimate prices has a calibrated '<shape>x<k>' with the k it asks for:
    world / size for TP/DP groups (all of them run at once), t * d for a boundary's messages."""
    parts = cb.spec_partitions(8, [1, 2], [1, 2, 4, 8], ("holmes", "naive"), PLACEMENT, CLUSTER_OF)
    have = {(p["kind"], p["shape"]) for p in parts}
    for p in parts:  # disjoint groups of one shape, as many as the key says
        flat = [r for g in p["groups"] for r in g]
        assert len(flat) == len(set(flat))
        shape, k = p["shape"].split("x")
        assert {cb.group_shape(PLACEMENT, CLUSTER_OF, g) for g in p["groups"]} == {shape}
        assert len(p["groups"]) == int(k)
    for t in (1, 2):
        for pp in (1, 2, 4, 8):
            if 8 % (t * pp):
                continue
            for layout in ("holmes", "naive"):
                lay = Layout(8, t, pp, layout=layout)
                for g in lay.tp_groups() + lay.dp_groups() + [list(range(8))]:
                    if len(g) > 1:
                        key = f"{cb.group_shape(PLACEMENT, CLUSTER_OF, g)}x{8 // len(g)}"
                        assert ("coll", key) in have, (t, pp, layout, g)
                for g in lay.pp_groups():
                    for a in g:
                        for b in g:
                            if a != b:
                                key = f"{cb.group_shape(PLACEMENT, CLUSTER_OF, [a, b])}x{8 // pp}"
                                assert ("p2p", key) in have, (t, pp, layout, a, b)


def test_concurrency_key_lookup():
    doc = {"comm": {"n2h2c2x4": {"p2p": {"0": 0.04}}, "n2h2c2x2": {"p2p": {"0": 0.02}},
                    "n2h1c1": {"p2p": {"0": 0.01}}}}
    cal = cb.Calibration(doc)
    assert cal.comm_time("p2p", 0, "n2h2c2", concurrent=2) == pytest.approx(0.02)
    assert cal.comm_time("p2p", 0, "n2h2c2", concurrent=4) == pytest.approx(0.04)
    assert cal.comm_time("p2p", 0, "n2h2c2", concurrent=3) == pytest.approx(0.04)  # tie: the larger k
    assert cal.comm_time("p2p", 0, "n2h2c2", concurrent=8) == pytest.approx(0.04)
    assert cal.comm_time("p2p", 0, "n2h1c1", concurrent=8) == pytest.approx(0.01)  # bare shape: any k
    link = Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0)
    comm = cb.calibrated_comm(link, cal, PLACEMENT, CLUSTER_OF)
    assert comm.p2p(0, 4, 10, concurrent=2) == pytest.approx(0.02)
    assert comm.p2p(0, 4, 10, concurrent=4) == pytest.approx(0.04)
    # the estimate asks for t * d concurrent messages at a boundary
    model = ModelSpec(layers=4, hidden=64, heads=4, seq=32, vocab=128, global_batch=16)
    e2 = estimate(model, bed(), comm, Strategy(1, 4, 2, 1, 8, "holmes", [1, 1, 1, 1], [0, 1, 2, 3]))
    e4 = estimate(model, bed(), comm, Strategy(1, 2, 4, 1, 4, "holmes", [2, 2], [0, 1]))
    assert e2.breakdown["pp"] > 0 and e4.breakdown["pp"] > 0
    assert comm.p2p(2, 4, model.seq * model.hidden * 4, concurrent=2) == pytest.approx(0.02)


def test_apply_and_pruned_search_with_measured_timings():
    tm = {"block": {f"{t},{b}": 0.05 * b / t ** 0.8 for t in (1, 2) for b in (1, 2, 4)},
          "head": {f"{t},{b}": 0.02 * b / t for t in (1, 2) for b in (1, 2, 4)}, "adam_per_param": 1e-8}
    doc = {"quota": 0.1, "compute": {"cpu": tm},
           "comm": {s: {op: {"256": 0.005, "1048576": 0.2} for op in ("all_gather", "reduce_scatter", "all_reduce",
                                                                       "p2p")}
                    for s in ("n2h1c1", "n2h2c1", "n2h2c2", "n4h2c1", "n4h4c2", "n8h4c2")}}
    cl = bed()
    comm = cb.apply(cb.Calibration(doc), cl, Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0))
    assert cl.device_of_rank[0].timings is tm
    pruned, _ = search(MODEL, cl, comm, top=3, max_micro_batch=4)
    full, _ = search(MODEL, cl, comm, top=3, max_micro_batch=4, prune=False)
    assert [round(e.time_s, 12) for e, _ in pruned] == [round(e.time_s, 12) for e, _ in full]
    assert all(e.time_s > 0 for e, _ in pruned)


def test_link_items_one_pair_per_level():
    """calibrate.py times one pair per level the topology file declares a rate for."""
    assert cb.link_items(PLACEMENT, CLUSTER_OF) == [
        {"level": "host", "pair": [0, 1]}, {"level": "nic:c0", "pair": [0, 2]},
        {"level": "nic:c1", "pair": [4, 6]}, {"level": "uplink:c0,c1", "pair": [0, 4]}]
    # one rank per host, one cluster: only the NIC level
    assert cb.link_items(["a", "b"], {"a": "x", "b": "x"}) == [{"level": "nic:x", "pair": [0, 1]}]
    assert cb.link_items(["a", "a"], {"a": "x"}) == [{"level": "host", "pair": [0, 1]}]


def _declared_topo():
    return {"inter_cluster_gbps": 0.05, "clusters": [
        {"name": c, "fabric": f"{c}-fabric", "nic_gbps": 1.0, "uplink_gbps": 0.05,
         "hosts": [{"name": f"{c}h{h}", "nics": [{"name": "eth0", "kind": "tcp", "fabric": f"{c}-fabric", "gbps": 1.0}]}
                   for h in range(2)]} for c in ("c0", "c1")]}


def test_measured_links_replace_the_declared_rates():
    topo = _declared_topo()
    doc = cb.with_measured_links(topo, {"host": 40.0, "nic:c0": 0.8, "uplink:c0,c1": 0.01, "nic:nowhere": 3.0})
    assert topo == _declared_topo()  # the caller's document is not changed
    c0, c1 = doc["clusters"]
    assert doc["host_gbps"] == 40.0 and doc["inter_cluster_gbps"] == 0.01
    assert c0["nic_gbps"] == 0.8 and all(h["nics"][0]["gbps"] == 0.8 for h in c0["hosts"])
    assert c1["nic_gbps"] == 1.0 and all(h["nics"][0]["gbps"] == 1.0 for h in c1["hosts"])
    assert c0["uplink_gbps"] == c1["uplink_gbps"] == 0.01


def test_a_calibration_with_measured_links_prices_with_them():
    """apply(): the link cost comes from uccl's cost model on the measured rates: a cross-cluster
    message over an uplink measured at 0.01 Gbit/s costs ~5x the declared 0.05's."""
    kind = DeviceKind("cpu", 1e9, 4 * GIB, 0.1)
    cluster = Cluster(_declared_topo(), list(PLACEMENT), [kind] * 8, {h: 2 for h in set(PLACEMENT)})
    declared = Comm.from_uccl(cluster.topology())
    comm = cb.apply(cb.Calibration({"quota": 0.1, "links": {"uplink:c0,c1": 0.01}}), cluster, declared)
    assert comm.p2p(0, 4, 1e6) == pytest.approx(5 * declared.p2p(0, 4, 1e6), rel=0.1)
    assert comm.p2p(0, 2, 1e6) == pytest.approx(declared.p2p(0, 2, 1e6), rel=0.01)  # inside c0: as declared


def test_tp_priced_as_measured_in_place():
    """A calibration that timed blocks with their real TP groups (block_tp) prices a stage's TP
    work as block_tp - block per layer, not as operations timed back to back; TP groups that
    span hosts (not what was measured) keep the per-operation price."""
    assert cb.tp_inside_hosts(PLACEMENT, 2) and not cb.tp_inside_hosts(PLACEMENT, 4)
    assert cb.tp_in_place({"block": {"2,1": 0.06}}, 2, 1) is None
    assert cb.tp_in_place({"block": {"2,1": 0.06}, "block_tp": {"2,1": 0.05}}, 2, 1) == 0.0  # noise: no negative cost
    tm = {"block": {"2,1": 0.06}, "head": {"2,1": 0.03}, "block_tp": {"2,1": 0.09}, "adam_per_param": 0.0}
    ops = Comm(lambda c, n, r: 0.001, lambda s, d, n: 0.0)
    e = estimate(MODEL, bed(tm), ops, Strategy(2, 2, 2, 1, 8, "holmes", [2, 2], [0, 1]))
    assert e.stage_s == pytest.approx([2 * 0.09, 2 * 0.09 + 0.03])
    del tm["block_tp"]
    e = estimate(MODEL, bed(tm), ops, Strategy(2, 2, 2, 1, 8, "holmes", [2, 2], [0, 1]))
    assert e.stage_s == pytest.approx([2 * (0.06 + 8 * 0.001), 2 * (0.06 + 8 * 0.001) + 0.03])


def test_pipeline_messages_priced_as_measured_between_compute():
    """p2p_in_place (messages between units of compute) wins over back-to-back p2p where measured."""
    free = Comm(lambda c, n, r: 0.0, lambda s, d, n: 0.0)
    doc = {"quota": 0.1, "comm": {"n2h2c2x4": {"p2p": {"0": 0.01, "1000": 0.01}}}}
    comm = cb.calibrated_comm(free, cb.Calibration(doc), PLACEMENT, CLUSTER_OF, [0.1] * 8)
    assert comm.p2p(0, 4, 1000, concurrent=4) == pytest.approx(0.01)
    doc["comm"]["n2h2c2x4"]["p2p_in_place"] = {"0": 0.03, "1000": 0.03}
    comm = cb.calibrated_comm(free, cb.Calibration(doc), PLACEMENT, CLUSTER_OF, [0.1] * 8)
    assert comm.p2p(0, 4, 1000, concurrent=4) == pytest.approx(0.03)
