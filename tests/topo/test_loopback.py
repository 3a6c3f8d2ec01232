"""Hierarchical collectives between processes that pretend to be on several hosts/clusters.

UCCL_HOST_ID and UCCL_CLUSTER give each process its place; the data moves over loopback TCP
and shm. Checks: hierarchical == flat ring == numpy bit for bit, for every collective, dtype and
op (benchmarks/testbed/work_check.py), on an even grid, an uneven one and a flat fallback.
"""
import json
import os
import socket
import subprocess
import sys

import pytest

from conftest import REPO, TESTBED, launch


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(layout, argv, extra_env=None, timeout=540):
    """layout: [(host_id, cluster)] per rank. Returns the ranks' RESULT dicts."""
    import tempfile
    port, procs = _free_port(), []
    for r, (host, cluster) in enumerate(layout):
        env = launch.base_env({"RANK": str(r), "WORLD_SIZE": str(len(layout)), "MASTER_ADDR": "127.0.0.1",
                               "MASTER_PORT": str(port), "UCCL_HOST_ID": host, "UCCL_CLUSTER": cluster,
                               "UCCL_SOCKET_IFNAME": "lo", "UCCL_TIMEOUT_S": "400",
                               **(extra_env or {})})
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        procs.append((subprocess.Popen([sys.executable, *argv], env=env, stdout=out, stderr=err), out, err))
    results, errors = [], []
    for r, (p, out, err) in enumerate(procs):
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            errors.append(f"rank {r}: killed after {timeout} s")
        out.seek(0)
        err.seek(0)
        if p.returncode:
            errors.append(f"rank {r}: exit {p.returncode}: {err.read()[-2000:]}")
        results += [json.loads(l[7:]) for l in out.read().splitlines() if l.startswith("RESULT ")]
    assert not errors, "\n".join(errors)
    return sorted(results, key=lambda x: x["rank"])


GRID = [("h0", "c0"), ("h0", "c0"), ("h1", "c0"), ("h1", "c0"), ("h2", "c1"), ("h2", "c1"), ("h3", "c1"), ("h3", "c1")]
# 3 + 2 ranks per host in each cluster: no host rails, clusters even -> grid (5, 2)
UNEVEN = [("a", "c0")] * 3 + [("b", "c0")] * 2 + [("c", "c1")] * 3 + [("d", "c1")] * 2
# 3 ranks on each host, one host per cluster -> grid (3, 2): the host level (3 ranks of one host)
# runs all_reduce as one all-pairs phase each way (hierarchical.cc, Grid::direct)
HOSTS3 = [("a", "c0")] * 3 + [("b", "c1")] * 3
# one cluster, 3 + 2: no rails at all -> hier falls back to the ring
FLAT = [("a", "c0")] * 3 + [("b", "c0")] * 2


def _check(results, size, expect_algo):
    assert len(results) == size
    bad = [(r["rank"], c) for r in results for c in r["cases"] if not c["ok"]]
    assert not bad, bad[:5]
    algos = {c["algos"]["hier"] for r in results for c in r["cases"] if c["count"] > 0}
    assert algos <= expect_algo, algos


@pytest.mark.parametrize("name,layout,algo", [("grid-2x2x2", GRID, {"hier"}), ("uneven-3+2x2", UNEVEN, {"hier"}),
                                              ("hosts-3x2", HOSTS3, {"hier"}), ("flat-3+2", FLAT, {"ring", "direct"})])
def test_hier_equals_ring_every_op_dtype(name, layout, algo):
    res = run_local(layout, [os.path.join(TESTBED, "work_check.py"), "full"])
    _check(res, len(layout), algo)
    if algo == {"hier"}:
        assert "hierarchy:" in res[0]["describe"] and "rail {" in res[0]["describe"]


def test_level_bytes_match_formula_loopback():
    """Per rank, hierarchical all_gather sends (y-1) D/(x y) bytes to other clusters."""
    res = run_local(GRID, [os.path.join(TESTBED, "work_check.py"), "quick"])
    D = 1000 * 4 * 8  # work_check 'quick': 1000 float32 per rank, 8 ranks
    for r in res:
        for c in r["cases"]:
            if c["coll"] == "all_gather" and c["dtype"] == "float32":
                assert c["level_bytes"]["hier"]["inter_cluster"] == D // 8
                assert c["level_bytes"]["hier"]["cluster"] == D // 8 * 2       # (s1-1) * 2 blocks
                assert c["level_bytes"]["hier"]["host"] == D // 8 * 4          # (s0-1) * 4 blocks
