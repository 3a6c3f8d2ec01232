"""uccl.cost: the C++ topology reader, cost model and algorithm choice from Python.

The last tests start real communicators (ranks given UCCL_HOST_ID and a UCCL_TOPO_FILE) and
check that cost.choose() names the algorithm each operation reports in Work.stats().
"""
import json
import os

import numpy as np
import pytest

import uccl
from harness import run_world
from uccl import cost

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "benchmarks", "testbed", "example_topology.yaml")
EXAMPLE_PLACEMENT = ["a-node1"] * 4 + ["a-node2"] * 4 + ["b-node1"] * 4 + ["b-node2"] * 4

# Two clusters of one host each behind a slow uplink (as in the testbed).
TWO_CLUSTERS = {"inter_cluster_gbps": 0.5, "host_gbps": 40,
                "clusters": [{"name": "c0", "nic_gbps": 4, "uplink_gbps": 0.5, "hosts": [{"name": "ha"}]},
                             {"name": "c1", "nic_gbps": 4, "uplink_gbps": 0.5, "hosts": ["hb"]}]}


@pytest.fixture(scope="module")
def example():
    if not os.path.exists(EXAMPLE):
        pytest.skip("benchmarks/testbed/example_topology.yaml is not in this checkout")
    return cost.Topology.from_file(EXAMPLE, EXAMPLE_PLACEMENT)


def test_example_file(example):
    t = example
    assert t.world_size == 16
    assert [t.host_of(r) for r in (0, 3, 4, 8, 15)] == [0, 0, 1, 2, 3]
    assert [t.cluster_of(r) for r in (0, 7, 8, 15)] == [0, 0, 1, 1]
    assert t.host_name(5) == "a-node2" and t.cluster_name(12) == "b"
    d = t.describe()
    assert "16 ranks, 4 hosts, 2 clusters" in d
    assert "cluster uplink 25 Gbit/s (declared)" in d          # the file's rates, parsed in C++
    assert "in-host=4 hosts-in-cluster=2 clusters-in-world=2" in d


def test_from_dict_is_the_file(tmp_path):
    placement = ["ha", "ha", "hb", "hb"]
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(TWO_CLUSTERS))
    a, b = cost.Topology.from_file(path, placement), cost.Topology.from_dict(TWO_CLUSTERS, placement)
    assert a.describe() == b.describe()
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        assert cost.predict(a, coll, 1 << 20) == cost.predict(b, coll, 1 << 20)


def test_predictions_follow_the_links():
    t = cost.Topology.from_dict(TWO_CLUSTERS, ["ha", "ha", "hb", "hb"])
    # bandwidth terms: 16x the bytes costs (nearly) 16x the time at large sizes
    small, big = cost.predict(t, "all_gather", 16 << 20, algorithm="ring"), cost.predict(t, "all_gather", 256 << 20,
                                                                                             algorithm="ring")
    assert 15 < big / small < 16.01
    # a message inside a host is far cheaper than one across the 0.5 Gbit/s uplink
    assert cost.predict_p2p(t, 0, 1, 1 << 20) * 50 < cost.predict_p2p(t, 0, 2, 1 << 20)
    # 1 MiB over 0.5 Gbit/s is ~16.8 ms, plus latency
    assert 0.0167 < cost.predict_p2p(t, 0, 2, 1 << 20) < 0.0175
    # all_reduce = reduce_scatter + all_gather for the ring
    rs, ag = (cost.predict(t, c, 1 << 24, algorithm="ring") for c in ("reduce_scatter", "all_gather"))
    assert cost.predict(t, "all_reduce", 1 << 24, algorithm="ring") == pytest.approx(rs + ag)
    # "auto" is the chosen algorithm's prediction
    name, seconds, reason = cost.choose(t, "all_reduce", 1 << 24)
    assert cost.predict(t, "all_reduce", 1 << 24) == seconds == cost.predict(t, "all_reduce", 1 << 24, algorithm=name)
    assert name in reason and "predicted" in reason


def test_groups_are_their_own_topology():
    t = cost.Topology.from_dict(TWO_CLUSTERS, ["ha", "ha", "hb", "hb"])
    inside = cost.choose(t, "all_reduce", 1 << 20, ranks=[0, 1])
    across = cost.choose(t, "all_reduce", 1 << 20, ranks=[0, 2])
    assert inside[1] * 20 < across[1]
    assert "2 ranks" in inside[2]
    # the same as a topology that holds only those ranks
    only = cost.Topology.from_dict(TWO_CLUSTERS, ["ha", "hb"])
    assert cost.predict(t, "all_gather", 1 << 20, ranks=[1, 3]) == cost.predict(only, "all_gather", 1 << 20)
    # group order is the caller's: a rooted collective's root is group rank 0
    assert cost.predict(t, "broadcast", 1 << 20, ranks=[2, 0, 1]) > 0


def test_reasons_and_choices_on_one_host():
    t = cost.Topology.from_dict(TWO_CLUSTERS, ["ha"] * 4)
    assert cost.choose(t, "all_reduce", 1024)[0] == "direct"
    name, _, reason = cost.choose(t, "all_reduce", 1 << 20)
    assert name == "rhd"
    assert "ring" in reason and "UCCL_SMALL_MSG_BYTES" in reason and "flat" in reason
    assert "twoshot" in reason and "below 32 MiB" in reason  # avoided there, and says why
    # from 32 MiB two-shot: 2 phases against rhd's 4 and the ring's 6
    assert cost.choose(t, "all_reduce", 64 << 20)[0] == "twoshot"
    assert cost.choose(t, "reduce_scatter", 1 << 20)[0] == "twoshot"
    assert cost.predict(t, "all_reduce", 64 << 20, algorithm="twoshot") < cost.predict(t, "all_reduce", 64 << 20, algorithm="rhd")
    assert cost.choose(t, "barrier", 0)[0] == "dissemination"
    assert cost.choose(t, "all_to_all", 1 << 20)[0] == "direct"


def test_bad_input_is_named(tmp_path):
    t = cost.Topology.from_dict(TWO_CLUSTERS, ["ha", "hb"])
    with pytest.raises(uccl.InvalidArgument, match=r"placement\[1\].*'nohost'"):
        cost.Topology.from_dict(TWO_CLUSTERS, ["ha", "nohost"])
    with pytest.raises(uccl.InvalidArgument, match="placement is empty"):
        cost.Topology.from_dict(TWO_CLUSTERS, [])
    with pytest.raises(uccl.InvalidArgument, match="cannot be read"):
        cost.Topology.from_file(tmp_path / "missing.yaml", ["ha"])
    bad = tmp_path / "bad.json"
    bad.write_text("{\"clusters\": [}")
    with pytest.raises(uccl.InvalidArgument):
        cost.Topology.from_file(bad, ["ha"])
    with pytest.raises(uccl.InvalidArgument, match="unknown collective 'allreduce'"):
        cost.predict(t, "allreduce", 1)
    with pytest.raises(uccl.InvalidArgument, match="unknown algorithm 'rng'"):
        cost.predict(t, "all_reduce", 1, algorithm="rng")
    with pytest.raises(uccl.InvalidArgument, match="hier cannot run.*flat"):
        cost.predict(cost.Topology.from_dict(TWO_CLUSTERS, ["ha"] * 2), "all_reduce", 1 << 20, algorithm="hier")
    with pytest.raises(uccl.InvalidArgument, match="rhd cannot run.*power of two"):
        cost.predict(cost.Topology.from_dict(TWO_CLUSTERS, ["ha"] * 3), "all_reduce", 1 << 20, algorithm="rhd")
    with pytest.raises(uccl.InvalidArgument, match="rank 5 out of range"):
        cost.predict(t, "all_reduce", 1, ranks=[0, 5])
    with pytest.raises(uccl.InvalidArgument, match="appears twice"):
        cost.predict(t, "all_reduce", 1, ranks=[0, 0])
    with pytest.raises(uccl.InvalidArgument, match="rank 2 out of range"):
        cost.predict_p2p(t, 0, 2, 1)
    with pytest.raises(uccl.InvalidArgument, match="rank -1 out of range"):
        t.host_of(-1)


def test_buffers_take_the_enums_from_core():
    from uccl import _buffers, _core
    assert _buffers.DTYPES is _core.DTYPES and _buffers.OPS is _core.RED_OPS
    assert _core.DTYPES["float32"] == 6 and _core.DTYPE_SIZE[_core.DTYPES["bfloat16"]] == 2
    assert _core.RED_OPS["premul_sum"] == 5 and _core.RED_OPS["bxor"] == 8


# --- against real communicators ---------------------------------------------------------------

CASES = [("all_reduce", 1 << 10), ("all_reduce", 1 << 20), ("all_gather", 1 << 20), ("reduce_scatter", 1 << 20),
         ("broadcast", 1 << 20), ("reduce", 1 << 20), ("all_to_all", 1 << 12)]


def _run(comm, coll, nbytes):
    n = comm.size
    x = np.ones(nbytes // 4, np.float32)
    if coll == "all_reduce":
        return comm.all_reduce(x, async_op=True)
    if coll == "all_gather":
        return comm.all_gather(np.ones(nbytes // 4 // n, np.float32), async_op=True)
    if coll == "reduce_scatter":
        return comm.reduce_scatter(x, async_op=True)
    if coll == "broadcast":
        return comm.broadcast(x, async_op=True)
    if coll == "reduce":
        return comm.reduce(x, async_op=True)
    return comm.all_to_all(x, async_op=True)


def body_reported_algorithms(ctx):
    """Work.stats()['algorithm'] of CASES on the world and on the split by rank parity, and each
    communicator's estimate of them (before and after they ran)."""
    out = {"world": [], "half": [], "estimate_world": [], "estimate_half": []}
    half = ctx.comm.split(color=ctx.rank % 2)
    for key, comm in (("world", ctx.comm), ("half", half)):
        out["estimate_" + key] = [comm.estimate(c, n) for c, n in CASES]
        for coll, nbytes in CASES:
            w = _run(comm, coll, nbytes)
            w.wait(timeout=60)
            out[key].append(w.stats()["algorithm"])
        # Declared rates win over the probe's: the same prediction once the probe has run.
        assert [comm.estimate(c, n) for c, n in CASES] == out["estimate_" + key], key
    return out


@pytest.mark.parametrize("placement", [["ha", "ha", "hb", "hb"], ["ha"] * 4, ["ha", "hb", "ha", "hb"]],
                         ids=["two-clusters", "one-host", "interleaved"])
def test_choose_agrees_with_a_communicator(tmp_path, placement):
    path = tmp_path / "topo.json"
    path.write_text(json.dumps(TWO_CLUSTERS))
    results = run_world(4, "test_cost:body_reported_algorithms", env={"UCCL_TOPO_FILE": str(path)},
                        host_ids=placement, transport="auto", timeout=180)
    t = cost.Topology.from_file(path, placement)
    want_world = [cost.choose(t, c, n)[0] for c, n in CASES]
    for r, res in enumerate(results):
        assert res["world"] == want_world, f"rank {r}"
        group = [q for q in range(4) if q % 2 == r % 2]
        assert res["half"] == [cost.choose(t, c, n, ranks=group)[0] for c, n in CASES], f"rank {r}"
        # comm.estimate is the model's prediction on the communicator's own topology.
        assert res["estimate_world"] == pytest.approx([cost.predict(t, c, n) for c, n in CASES], rel=1e-12)
        assert res["estimate_half"] == pytest.approx([cost.predict(t, c, n, ranks=group) for c, n in CASES],
                                                     rel=1e-12), f"rank {r}"
    assert len(set(want_world)) >= 2  # the cases do exercise the choice


def body_small_and_large(ctx):
    for n in (256, 1 << 18, 256, 1 << 18):
        ctx.comm.all_reduce(np.ones(n, np.float32))
    return True


def test_info_log_says_why(tmp_path):
    run_world(2, "test_cost:body_small_and_large", env={"UCCL_DEBUG": "INFO"}, transport="auto", timeout=120,
              rank_env=lambda r: {"UCCL_DEBUG_FILE": str(tmp_path / f"rank{r}.log")})
    log = (tmp_path / "rank0.log").read_text()
    lines = [x for x in log.splitlines() if "all_reduce of" in x]
    # once per algorithm the communicator picks, not on every call
    assert len(lines) == 2, log
    assert "all_reduce of 1 KiB on 2 ranks: direct predicted" in lines[0]
    assert "ring" in lines[0] and "UCCL_SMALL_MSG_BYTES" in lines[0]
    assert "all_reduce of 1 MiB on 2 ranks: ring predicted" in lines[1] and "rhd" in lines[1]
