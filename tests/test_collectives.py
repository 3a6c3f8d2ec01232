"""Every collective x dtype x reduction op against a numpy reference, on real processes.

World sizes 1, 2, 3, 4, 5, 8; transports tcp only, shm only, auto, and mixed (ranks get
different UCCL_HOST_ID, so same-"host" pairs use shm and the others tcp); algorithms forced
with UCCL_ALGO=ring / direct in some scenarios. Each scenario starts its ranks once and runs
the whole sweep inside them (tests/sweeps.py); all_reduce results must be bitwise identical on
every rank.
"""
import pytest

from harness import mixed_hosts, run_world

ALL_PARTS = ["reduce", "broadcast", "all_gather", "gather_scatter", "reduce_scatter", "all_to_all", "p2p",
             "barrier_async", "groups"]

# (id, world, transport, host groups for "mixed" (None: one host), UCCL_ALGO, large counts)
SCENARIOS = [
    ("w1-auto", 1, "auto", None, None, True),
    ("w2-shm", 2, "shm", None, None, True),
    ("w2-tcp", 2, "tcp", None, None, True),
    ("w3-tcp", 3, "tcp", None, None, False),
    ("w3-shm-ring", 3, "shm", None, "ring", False),
    ("w4-auto", 4, "auto", None, None, True),
    ("w4-mixed", 4, "auto", 2, None, True),
    ("w4-tcp-direct", 4, "tcp", None, "direct", False),
    ("w5-mixed-ring", 5, "auto", 2, "ring", False),
    ("w5-shm-direct", 5, "shm", None, "direct", True),
    ("w8-shm", 8, "shm", None, None, False),
    ("w8-mixed", 8, "auto", 3, None, True),
    ("w8-tcp-ring", 8, "tcp", None, "ring", False),
]


@pytest.mark.parametrize("sid,world,transport,groups,algo,big", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_collectives(sid, world, transport, groups, algo, big):
    hosts = mixed_hosts(world, groups) if groups else None
    env = {"UCCL_ALGO": algo} if algo else {}
    results = run_world(world, "sweeps:scenario", (ALL_PARTS, big), env=env, host_ids=hosts, transport=transport,
                        timeout=240)
    hashes = {r["hash"] for r in results}
    assert len(hashes) == 1, f"all_reduce results differ between ranks: {[r['hash'][:12] for r in results]}"
    # the transport chosen per peer pair follows the (forced) transport / host grouping
    for me, r in enumerate(results):
        for peer, kind in r["transports"].items():
            if transport != "auto":
                want = transport
            else:
                want = "shm" if hosts is None or hosts[me] == hosts[peer] else "tcp"
            assert kind == want, f"rank {me} -> peer {peer}: {kind}, expected {want} ({r['transports']})"
