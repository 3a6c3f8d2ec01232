"""On the emulated network (benchmarks/testbed): 2 clusters x 2 hosts x 2 ranks, hosts joined
by 4 Gbit/s inside a cluster, clusters by 0.5 Gbit/s. Needs root and `ip netns`.

* hierarchical == ring == numpy for every collective/dtype/op, ranks launched with torchrun
  (--nnodes 4 --node-rank i, uccl.init() joining torchrun's store);
* bytes on the slow level match (y-1) D/(x y) per rank, both in uccl's per-level counters and in
  the bridge/tc counters of the inter-cluster link;
* a group whose members are all in one cluster never touches the inter-cluster link.
"""
import importlib.util
import os

import pytest

from conftest import TESTBED, launch

RANKS_PER_HOST = 2
N = 8
COUNT = 1 << 18  # float32 per rank block: D = 8 MiB


def test_hier_equals_ring_under_torchrun(bed, topo_file):
    if importlib.util.find_spec("torch") is None:  # not imported here: the ranks need it, not pytest
        pytest.skip("torchrun needs torch")
    res = launch.run(bed, RANKS_PER_HOST, [os.path.join(TESTBED, "work_check.py"), "full"], topo_file=topo_file,
                     torchrun=True, timeout=900)
    assert len(res) == N
    bad = [(r["rank"], c) for r in res for c in r["cases"] if not c["ok"]]
    assert not bad, bad[:5]
    assert {c["algos"]["hier"] for r in res for c in r["cases"] if c["count"]} == {"hier"}
    d = res[0]["describe"]
    assert "2 clusters" in d and "rail {0,2,4,6}" in d and "(inter_cluster level)" in d


def test_slow_level_bytes_match_formula(bed, topo_file):
    res = launch.run(bed, RANKS_PER_HOST, [os.path.join(TESTBED, "work_levels.py"), "world", str(COUNT)],
                     topo_file=topo_file, timeout=600)
    assert len(res) == N
    block = COUNT * 4
    D = block * N
    x, y = 4, 2  # ranks per cluster, clusters
    per_rank = (y - 1) * D // (x * y)
    for r in res:
        for run in r["runs"]:
            inter = run["levels"]["inter_cluster"]
            assert run["algorithm"] == run["algo"], run
            if run["algo"] == "hier":
                assert inter == per_rank * (2 if run["coll"] == "all_reduce" else 1), (r["rank"], run)
            else:  # ring in rank order: only ranks 3 and 7 send across, (n-1)/n D each
                expect = (N - 1) * block if r["rank"] in (3, 7) else 0
                assert inter == expect * (2 if run["coll"] == "all_reduce" else 1), (r["rank"], run)
    # The wire agrees: bytes through the inter-cluster qdiscs vs payload (headers add ~1-5%).
    for run in res[0]["runs"]:
        payload = sum(next(x for x in r["runs"] if x["algo"] == run["algo"] and x["coll"] == run["coll"])
                      ["levels"]["inter_cluster"] for r in res)
        assert payload <= run["tc_inter"] <= payload * 1.10 + 64 * 1024, run
    hier = {x["coll"]: x["tc_inter"] for x in res[0]["runs"] if x["algo"] == "hier"}
    ring = {x["coll"]: x["tc_inter"] for x in res[0]["runs"] if x["algo"] == "ring"}
    assert all(hier[c] < 0.65 * ring[c] for c in hier)  # 1 D vs 1.75 D across clusters


def test_cluster_group_stays_inside_cluster(bed, topo_file):
    res = launch.run(bed, RANKS_PER_HOST, [os.path.join(TESTBED, "work_levels.py"), "group", str(COUNT)],
                     topo_file=topo_file, timeout=600)
    assert len(res) == N
    for r in res:
        for run in r["runs"]:
            assert run["levels"]["inter_cluster"] == 0, (r["rank"], run)
            assert run["levels"]["host"] + run["levels"]["cluster"] > 0
    # Only the world barriers around each measurement cross clusters: a few KiB, while one
    # leaked all_reduce would be MiBs.
    for run in res[0]["runs"]:
        assert run["tc_inter"] < 64 * 1024, run
    d = res[0]["describe"]
    assert "1 clusters" in d and "same network c0-fabric" in d
