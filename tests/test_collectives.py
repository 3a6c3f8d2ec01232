"""Every collective x dtype x reduction op against a numpy reference, on real processes.

World sizes 1, 2, 3, 4, 5, 8; transports tcp only, shm only, auto, and mixed (ranks get
different UCCL_HOST_ID, so same-"host" pairs use shm and the others tcp); algorithms forced
with UCCL_ALGO=ring / direct / rhd / twoshot in some scenarios. Each scenario starts its ranks once and runs
the whole sweep inside them (tests/sweeps.py); all_reduce results must be bitwise identical on
every rank.
"""
import pytest

from harness import mixed_hosts, run_world

ALL_PARTS = ["reduce", "broadcast", "all_gather", "gather_scatter", "reduce_scatter", "all_to_all", "p2p",
             "barrier_async", "groups"]

# (id, world, transport, host groups for "mixed" (None: one host), extra environment,
#  large counts: 0 none, 1 one large all_reduce, 2 every large case (see sweeps.py))
SCENARIOS = [
    ("w1-auto", 1, "auto", None, {}, 1),
    ("w2-shm", 2, "shm", None, {}, 2),
    ("w2-tcp", 2, "tcp", None, {}, 2),
    ("w3-tcp-direct-kwarg", 3, "tcp", None, {"comm:algorithm": "direct"}, 0),
    ("w3-shm-ring", 3, "shm", None, {"UCCL_ALGO": "ring"}, 0),
    ("w4-auto", 4, "auto", None, {}, 1),
    ("w4-mixed", 4, "auto", 2, {}, 2),
    ("w4-tcp-direct", 4, "tcp", None, {"UCCL_ALGO": "direct"}, 0),
    ("w5-mixed-ring", 5, "auto", 2, {"UCCL_ALGO": "ring"}, 0),
    ("w5-shm-direct", 5, "shm", None, {"UCCL_ALGO": "direct"}, 2),
    ("w8-shm", 8, "shm", None, {}, 0),
    ("w8-mixed", 8, "auto", 3, {}, 1),
    ("w8-tcp-ring", 8, "tcp", None, {"UCCL_ALGO": "ring"}, 0),
    ("w4-shm-rhd", 4, "shm", None, {"UCCL_ALGO": "rhd"}, 2),
    ("w8-mixed-rhd", 8, "auto", 2, {"UCCL_ALGO": "rhd"}, 1),
    ("w2-tcp-rhd-kwarg", 2, "tcp", None, {"comm:algorithm": "rhd"}, 0),
    # two-shot: ordered receives taking turns on shm, posted one at a time on tcp / mixed
    ("w4-shm-twoshot", 4, "shm", None, {"UCCL_ALGO": "twoshot"}, 2),
    ("w3-tcp-twoshot", 3, "tcp", None, {"UCCL_ALGO": "twoshot"}, 2),
    ("w5-mixed-twoshot", 5, "auto", 2, {"UCCL_ALGO": "twoshot"}, 1),
    # hierarchical, whole and cut into segments pipelined over the levels (every size of 128
    # bytes and more runs as 2..8 segments, uneven ones included)
    ("w6-mixed-hier", 6, "auto", 2, {"UCCL_ALGO": "hier", "UCCL_HIER_SEGMENT_BYTES": "0"}, 1),
    ("w6-mixed-hier-seg", 6, "auto", 2, {"UCCL_ALGO": "hier", "UCCL_HIER_SEGMENT_BYTES": "64"}, 2),
    # transport knobs: tiny shm rings without CMA (pipelining and wrap-around), CMA for
    # everything, many striped sockets, no progress thread
    ("w3-shm-smallring-nocma", 3, "shm", None, {"UCCL_SHM_RING_BYTES": "64K", "UCCL_SHM_CMA": "0"}, 2),
    ("w2-shm-cma-all", 2, "shm", None, {"UCCL_SHM_CMA_MIN_BYTES": "1"}, 2),
    ("w3-tcp-4socks", 3, "tcp", None, {"UCCL_NSOCKS_PERPEER": "4", "UCCL_TCP_STRIPE_MIN_BYTES": "1K"}, 2),
    ("w3-mixed-noprogress", 3, "auto", 2, {"UCCL_PROGRESS_THREAD": "0"}, 0),
]


@pytest.mark.parametrize("sid,world,transport,groups,env,big", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_collectives(sid, world, transport, groups, env, big):
    hosts = mixed_hosts(world, groups) if groups else None
    kwargs = {k[5:]: v for k, v in env.items() if k.startswith("comm:")}  # Communicator(...) options
    env = {k: v for k, v in env.items() if not k.startswith("comm:")}
    results = run_world(world, "sweeps:scenario", (ALL_PARTS, big), env=env, host_ids=hosts, transport=transport,
                        timeout=240, **kwargs)
    assert sum(r["checks"] for r in results) >= 300 * world, "the sweep ran suspiciously few checks"
    hashes = {r["hash"] for r in results}
    assert len(hashes) == 1, f"all_reduce results differ between ranks: {[r['hash'][:12] for r in results]}"
    # the algorithm: forced by UCCL_ALGO / algorithm=, else direct for small and ring for large
    forced = env.get("UCCL_ALGO") or kwargs.get("algorithm")
    for me, r in enumerate(results):
        small, large = r["algos"][16], r["algos"][1 << 18]
        if world == 1:
            want = ("local", "local")
        elif forced:
            want = (forced, forced)
        elif hosts is None and world >= 4 and world & (world - 1) == 0:
            want = ("direct", "rhd")  # recursive halving/doubling: power-of-two group on one host
        else:
            want = ("direct", "ring")
        # Several hosts with several ranks each: the cost model may pick the hierarchical
        # schedule (host level first) for large messages, which is the point of it.
        multi_level = hosts is not None and len(set(hosts)) > 1 and len(set(hosts)) < world
        ok_large = {want[1], "hier"} if multi_level and not forced and world > 1 else {want[1]}
        assert small == want[0] and large in ok_large, \
            f"rank {me}: algorithms {small}/{large}, expected {want[0]}/{'|'.join(sorted(ok_large))}"
    # the transport chosen per peer pair follows the (forced) transport / host grouping
    for me, r in enumerate(results):
        for peer, kind in r["transports"].items():
            if transport != "auto":
                want = transport
            else:
                want = "shm" if hosts is None or hosts[me] == hosts[peer] else "tcp"
            assert kind == want, f"rank {me} -> peer {peer}: {kind}, expected {want} ({r['transports']})"


def body_nan(ctx):
    """max/min/sum with NaNs on different ranks, under each algorithm (sub-communicators made
    with split(..., algorithm=...))."""
    import numpy as np
    me, n = ctx.rank, ctx.world
    out = {}
    for algo in ("direct", "ring"):
        sub = ctx.comm.split(0, algorithm=algo)
        for dtype in ("float32", "float64", "float16"):
            for op in ("max", "min", "sum"):
                x = np.arange(2 * n, dtype=dtype) + me
                x[me] = np.nan              # element j is NaN on rank j only
                x[n + (me + 1) % n] = np.nan  # and element n + j on rank j - 1
                sub.all_reduce(x, op=op)
                out[f"{algo} {dtype} {op}"] = x.tobytes()  # bits: which NaN matters too
    return out


def test_min_max_propagate_nan_like_numpy():
    """min/max/sum propagate NaN like numpy's np.maximum/np.minimum/np.add, whichever rank holds
    the NaN and whatever the algorithm; and every NaN in a result is the canonical quiet NaN
    (cpp/base/elementwise.h: positive, all payload bits set, what NVIDIA's float units give),
    not numpy's 0x7fc00000 that went in, so results are bit-equal whichever device reduced."""
    import numpy as np
    world = 3
    results = run_world(world, "test_collectives:body_nan", transport="shm")
    canonical = {"float16": 0x7fff, "float32": 0x7fffffff, "float64": 0x7fffffffffffffff}
    problems = []
    for key, raw in results[0].items():
        algo, dtype, op = key.split()
        got = np.frombuffer(raw, dtype=dtype)
        inputs = []
        for p in range(world):
            x = np.arange(2 * world, dtype=np.float64) + p
            x[p] = np.nan
            x[world + (p + 1) % world] = np.nan
            inputs.append(x)
        fn = {"max": np.maximum, "min": np.minimum, "sum": np.add}[op]
        want = fn.reduce(np.stack(inputs), axis=0)
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            problems.append(f"{key}: got {got.tolist()}, numpy gives {want.tolist()}")
        bits = got.view(f"u{got.itemsize}")[np.isnan(got)]
        if np.any(bits != canonical[dtype]):
            problems.append(f"{key}: NaN bits {[hex(b) for b in bits]}, expected {hex(canonical[dtype])}")
    assert not problems, "\n".join(problems)


def body_probe_behind_async(ctx):
    """Asynchronous operations right after the communicator is made, then a large one whose
    algorithm needs the measured link rates: the link probe runs while the connections of the
    first operations are still being set up. Returns the reduce_scatter's block."""
    import numpy as np
    comm, n = ctx.comm, ctx.world
    w0 = comm.broadcast(np.full(1 << 18, ctx.rank, np.float32), root=0, async_op=True)
    w1 = comm.all_to_all(np.full(28, ctx.rank, np.float32), async_op=True)
    w2 = comm.reduce_scatter(np.ones(n << 20, np.float32), async_op=True)  # 4 MiB blocks: the rates decide
    w0.wait(), w1.wait()
    block = np.asarray(w2.wait())
    return [block.size, float(block.min()), float(block.max())]


def test_link_probe_behind_asynchronous_operations_does_not_stall():
    """The probe's store waits shared the store's client with the engine thread, which needed it
    to finish connecting for the operations queued before: every rank stalled until its
    timeout (deterministic with UCCL_PROBE_CACHE_S=0, 2 "hosts" of 2 ranks)."""
    results = run_world(4, "test_collectives:body_probe_behind_async", env={"UCCL_PROBE_CACHE_S": "0"},
                        host_ids=mixed_hosts(4, 2), transport="auto", comm_timeout=20, timeout=90)
    assert results == [[1 << 20, 4.0, 4.0]] * 4
