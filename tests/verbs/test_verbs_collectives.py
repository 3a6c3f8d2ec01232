"""Collectives over the RDMA verbs transport, on real Soft-RoCE (run inside ../shared/rxe/vm-run).

Ranks get distinct UCCL_HOST_IDs (so shared memory is not an option) and alternate between the
VM's two devices with UCCL_IB_HCA (=rxe0 / =rxe1), so traffic really crosses the veth pair.
Outside the VM, or without usable verbs, the module is skipped (decided by uccl.build_info()).

    ../shared/rxe/vm-run -- python3 -m pytest -q tests/verbs/test_verbs_collectives.py
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # spawned ranks inherit sys.path and import the bodies from here
sys.path.insert(0, os.path.dirname(HERE))

import uccl  # noqa: E402
from harness import run_world  # noqa: E402
from sweeps import describe_transports  # noqa: E402

pytestmark = pytest.mark.skipif(not uccl.build_info().get("verbs_available"),
                                reason="verbs transport not usable here: " +
                                str(uccl.build_info().get("verbs_unavailable_reason")))


def body_all(ctx):
    """Every collective at a few sizes (0, small, large enough for the rendezvous path)."""
    import numpy as np
    c, me, n, chk = ctx.comm, ctx.rank, ctx.world, ctx.check
    for count in (0, 1, 7, 3000, 70001):
        x = (np.arange(count) % 17 + me).astype(np.float32)
        want = sum((np.arange(count) % 17 + r).astype(np.float32) for r in range(n)) if count else x.copy()
        chk.equal(c.all_reduce(x.copy()), want, f"all_reduce {count}")
        chk.equal(c.all_gather(np.full(count, me, np.int32)), np.repeat(np.arange(n, dtype=np.int32), count),
                  f"all_gather {count}")
        chk.equal(c.reduce_scatter(np.ones(count * n, np.int64)), np.full(count, n, np.int64), f"reduce_scatter {count}")
        b = np.full(count, me, np.float64)
        chk.equal(c.broadcast(b, root=n - 1), np.full(count, n - 1, np.float64), f"broadcast {count}")
        r = c.reduce(np.full(count, me + 1, np.int32), op="max", root=0)
        if me == 0:
            chk.equal(r, np.full(count, n, np.int32), f"reduce {count}")
        a2a = np.repeat(np.arange(n, dtype=np.int32) + 100 * me, count)
        chk.equal(c.all_to_all(a2a), np.repeat(np.arange(n, dtype=np.int32) * 100 + me, count), f"all_to_all {count}")
    got = np.zeros(5, np.int32)
    w = c.batch_isend_irecv([("send", np.full(5, me, np.int32), (me + 1) % n), ("recv", got, (me - 1) % n)])
    w.wait()
    chk.equal(got, np.full(5, (me - 1) % n, np.int32), "ring send/recv")
    c.barrier()
    return describe_transports(c)


def hca(rank):
    return {"UCCL_IB_HCA": "=rxe0" if rank % 2 == 0 else "=rxe1", "UCCL_IB_TIMEOUT": "14"}


@pytest.mark.parametrize("world", [2, 3, 4])
def test_every_collective_over_verbs(world):
    results = run_world(world, "test_verbs_collectives:body_all", host_ids=[f"h{r}" for r in range(world)],
                        rank_env=hca, transport="verbs", timeout=600, comm_timeout=120)
    for me, peers in enumerate(results):
        assert peers and all(kind == "verbs" for kind in peers.values()), f"rank {me}: {peers}"


def test_mixed_verbs_and_tcp_group():
    """Ranks 0 and 1 share the RoCE fabric (verbs between them); rank 2 has no RDMA NIC it may
    use (UCCL_IB_HCA matches nothing), so it reaches both over tcp. One communicator, auto."""
    def env(rank):
        return hca(rank) if rank < 2 else {"UCCL_IB_HCA": "=nonexistent0"}
    results = run_world(3, "test_verbs_collectives:body_all", host_ids=["a", "b", "c"], rank_env=env,
                        timeout=600, comm_timeout=120)
    assert results[0][1] == "verbs" and results[1][0] == "verbs", results
    assert results[0][2] == "tcp" and results[1][2] == "tcp" and set(results[2].values()) == {"tcp"}, results


def _counters():
    def read(path):
        with open(path) as f:
            return int(f.read())
    out = {}
    for dev, net in (("rxe0", "veth0"), ("rxe1", "veth1")):
        out[dev] = read(f"/sys/class/infiniband/{dev}/ports/1/hw_counters/sent_pkts")
        out[net] = read(f"/sys/class/net/{net}/statistics/tx_bytes")
    return out


def body_striped(ctx):
    """Two ranks that may both use rxe0 and rxe1: one connection striped over both ports (issue
    18). Exact results at sizes no lane weight divides; rank 0 reads the devices' counters
    around the traffic (both ranks share the VM's two devices, so the deltas are the pair's)."""
    import numpy as np
    c, me, n, chk = ctx.comm, ctx.rank, ctx.world, ctx.check
    c.barrier()
    before = _counters()
    count = 600_001  # 2.4 MB of float32: ring messages of ~1.2 MB, well above the lane threshold
    x = (np.arange(count) % 23 + me).astype(np.float32)
    want = sum((np.arange(count) % 23 + r).astype(np.float32) for r in range(n))
    chk.equal(c.all_reduce(x.copy()), want, "all_reduce striped")
    g = 300_007
    chk.equal(c.all_gather(np.arange(g, dtype=np.int32) + me * 7),
              np.concatenate([np.arange(g, dtype=np.int32) + r * 7 for r in range(n)]), "all_gather striped")
    size = (1 << 20) + 5
    if me == 0:
        c.send(np.frombuffer(np.random.default_rng(5).bytes(size), np.uint8).copy(), 1)
    else:
        got = np.zeros(size, np.uint8)
        c.recv(got, 0)
        chk.equal(got, np.frombuffer(np.random.default_rng(5).bytes(size), np.uint8), "send/recv 1 MiB + 5")
    c.barrier()
    after = _counters()
    return {"describe": c.describe(), "delta": {k: after[k] - before[k] for k in after}}


def test_one_connection_striped_over_both_ports():
    """UCCL_IB_HCA=rxe selects both ports on each rank: the connection stripes over rxe0 and rxe1
    (the passive side pairs each offered port with its other one, so both lanes cross the veth
    pair), and each veth carries a large share of the bytes."""
    env = {"UCCL_IB_HCA": "rxe", "UCCL_IB_TIMEOUT": "14"}
    results = run_world(2, "test_verbs_collectives:body_striped", host_ids=["h0", "h1"], env=env,
                        transport="verbs", timeout=600, comm_timeout=120)
    desc = results[0]["describe"]
    peer = [l for l in desc.splitlines() if l.strip().startswith("peer 1:")][0]
    assert "verbs striped over rxe0:1 (to rxe1:1" in peer and "rxe1:1 (to rxe0:1" in peer, desc
    d = results[0]["delta"]
    # all_reduce moves 2 x 1.2 MB per rank, all_gather 1.2 MB per rank, send 1 MiB: ~8.2 MB in
    # all, half per lane; each veth must carry at least a quarter of it.
    total = 2 * (2 * 1_200_004 + 1_200_028) + (1 << 20)
    print("striped:", peer.strip(), "| counters", d, "| payload", total)
    assert d["veth0"] >= total // 4 and d["veth1"] >= total // 4, d
    assert d["rxe0"] > 0 and d["rxe1"] > 0, d



def body_one_large(ctx):
    import numpy as np
    c, me, n = ctx.comm, ctx.rank, ctx.world
    count = 100_003
    ctx.check.equal(c.all_reduce(np.full(count, me + 1, np.float32)), np.full(count, n * (n + 1) / 2, np.float32),
                    "all_reduce")
    return c.describe()


def test_one_port_when_striping_is_off_or_the_rank_is_pinned():
    """UCCL_STRIPE_NETWORKS=off keeps one port; a per-local-rank UCCL_IB_HCA list ("=rxe0;=rxe1")
    keeps each local rank on its own port (the rail choice), with no striping."""
    def peer_line(desc, p):
        return [l for l in desc.splitlines() if l.strip().startswith(f"peer {p}:")][0]
    env = {"UCCL_IB_HCA": "rxe", "UCCL_IB_TIMEOUT": "14", "UCCL_STRIPE_NETWORKS": "off"}
    off = run_world(2, "test_verbs_collectives:body_one_large", host_ids=["h0", "h1"], env=env, transport="verbs",
                    timeout=600, comm_timeout=120)
    line = peer_line(off[0], 1)
    assert "striped" not in line and "verbs rxe0:1" in line, line
    pinned = run_world(2, "test_verbs_collectives:body_one_large", host_ids=["h0", "h1"], transport="verbs",
                       env={"UCCL_IB_HCA": "=rxe0;=rxe1", "UCCL_IB_TIMEOUT": "14", "LOCAL_WORLD_SIZE": "2"},
                       rank_env=lambda r: {"LOCAL_RANK": str(r)}, timeout=600, comm_timeout=120)
    assert "verbs rxe0:1" in peer_line(pinned[0], 1) and "striped" not in peer_line(pinned[0], 1), pinned[0]
    assert "verbs rxe1:1" in peer_line(pinned[1], 0) and "striped" not in peer_line(pinned[1], 0), pinned[1]
