"""Device buffers end to end on the simulated device (cpp/base/sim_device.h): every collective x
dtype x op in and out of place against numpy, worlds 1-5, staged connections in split mode
(UCCL_STAGED=on: chunks pipelined through bounce buffers) and whole mode (no negotiation), mixed
communicators (host ranks, sim ranks, a second "vendor" with slower copies; the all_reduce
results must be bitwise equal on every rank), shared staging slots on one host, and a measured
overlap of copies with the wire. Streams are in test_device_streams.py, failures in
test_device_failures.py, foreign and CUDA arrays in test_device_arrays.py, the random soaks in
test_device_soaks.py."""
import os
import re
import sys

import numpy as np
import pytest

import uccl
from harness import mixed_hosts, run_world

PARTS = ["reduce", "broadcast", "all_gather", "gather_scatter", "reduce_scatter", "all_to_all", "p2p"]

# (id, world, transport, host groups, rank modes (device_sweeps.setup), environment, big)
# uccl's own copies run by kernel under the simulated device's signal waits (UCCL_DEVICE_COPIES=
# auto); "engine" keeps the copy-engine path (CUDA's default, with host waits) covered.
SCENARIOS = [
    ("w1-sim-whole", 1, "auto", None, ["sim0"], {}, 1),
    ("w2-tcp-sim-split", 2, "tcp", None, ["sim0", "sim1"], {"UCCL_STAGED": "on"}, 2),
    ("w2-shm-host+sim-engine", 2, "shm", None, ["host", "sim0"], {"UCCL_STAGED": "on", "UCCL_DEVICE_COPIES": "engine"}, 1),
    ("w3-shm-sim-whole-engine", 3, "shm", None, ["sim0", "sim1", "sim0"],
     {"UCCL_STAGED": "off", "UCCL_DEVICE_COPIES": "engine"}, 1),
    # shm pairs in split mode use shared slots by default; this one keeps the plain chunks covered
    ("w3-shm-split-no-slots", 3, "shm", None, ["sim0", "host", "sim1-slow"],
     {"UCCL_STAGED": "on", "UCCL_STAGED_SHARED": "off"}, 1),
    ("w3-tcp-vendors-ring", 3, "tcp", None, ["host", "sim0", "sim1-slow"],
     {"UCCL_STAGED": "on", "UCCL_ALGO": "ring", "UCCL_STAGED_CHUNK_BYTES": "64K"}, 1),
    ("w4-mixed-hosts", 4, "auto", 2, ["sim0", "host", "sim1-slow", "sim0"], {"UCCL_STAGED": "on"}, 0),
    ("w5-shm-direct-vendors", 5, "shm", None, ["sim0", "sim1-slow", "host", "sim1", "sim0"],
     {"UCCL_STAGED": "on", "UCCL_ALGO": "direct"}, 1),
]


@pytest.mark.parametrize("sid,world,transport,groups,modes,env,big", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_device_collectives(sid, world, transport, groups, modes, env, big):
    hosts = mixed_hosts(world, groups) if groups else None
    results = run_world(world, "device_sweeps:scenario", (modes, PARTS, big), env=env, host_ids=hosts,
                        transport=transport, timeout=300)
    hashes = {r["hash"] for r in results}
    assert len(hashes) == 1, f"all_reduce results differ between ranks: {[(r['mode'], r['hash'][:12]) for r in results]}"
    assert all(r["checks"] > 100 for r in results)
    staged = "on" if env.get("UCCL_STAGED") == "on" else None
    if staged and world > 1:
        assert "staged (chunks of" in results[0]["describe"], results[0]["describe"]
        if transport == "shm":
            slots = env.get("UCCL_STAGED_SHARED", "on") == "on"
            assert ("shared slots" in results[0]["describe"]) == slots, results[0]["describe"]


# ---- small host messages on staged pairs ---------------------------------------------------------

def body_tiny_on_staged(ctx):
    """Blocking all_reduce of 8 bytes and of 4 KiB, different values every call, on staged pairs:
    from its second run an express operation runs from its tiny plan, which re-posts the same
    request objects. A staged endpoint that left them as the last run had them ("done") let the
    call return before its data came (seen as a MismatchError at the next barrier, or a wrong sum)."""
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    for count in (2, 1024):
        x = np.empty(count, np.float32)  # one buffer: the express key is the same every call
        for i in range(200):
            x[:] = (i + 1) * (me + 1)
            comm.all_reduce(x)
            want = float((i + 1) * n * (n + 1) // 2)
            ctx.check.equal(float(x[0]), want, f"all_reduce of {count} call {i}")
            ctx.check.equal(float(x[-1]), want, f"all_reduce of {count} call {i}, last")
    comm.barrier()
    return comm.describe()


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_small_host_messages_on_staged_pairs(transport):
    results = run_world(3, "test_device:body_tiny_on_staged", env={"UCCL_STAGED": "on"}, transport=transport,
                        timeout=120)
    assert "staged (chunks of" in results[0], results[0]


# ---- shared staging slots on one host (transports/staged/staged_slots.h) ----------------------------

def body_shared_slots(ctx):
    """Every form of chunk on a shm pair with shared slots: device -> host (the receiver reads the
    sender's slot), host -> device (a plain chunk), device -> device, reduced on the way (all_reduce,
    one rank on host memory), a receive from any source whose sender is a device, and a size
    mismatch (a typed error naming the peer, not a hang)."""
    from uccl._buffers import as_buffer
    from uccl.sim import SimArray
    comm, me = ctx.comm, ctx.rank
    n = (3 << 17) + 5  # 3 chunks of 512 KiB and a ragged end
    base = (np.arange(n) % 977).astype(np.float32)
    out = {}
    if me == 0:
        comm.send(SimArray.from_numpy(base), 1)
        comm.send(base * 2, 1)
        comm.send(SimArray.from_numpy(base * 3), 1)
        comm.send(SimArray.from_numpy(base * 4), 1, tag=7)
        # Another device, then the first again: the sender makes a new segment each time (its
        # slots are tied to the device's copies), the receiver maps it and lets the old one go.
        for dev, k in ((1, 5), (0, 6)):
            comm.send(SimArray.from_numpy(base * k, device=dev), 1)
    else:
        h = np.zeros(n, np.float32)
        comm.recv(h, 0)
        d1, d2 = SimArray(n, np.float32), SimArray(n, np.float32)
        comm.recv(d1, 0)
        comm.recv(d2, 0)
        a = SimArray(n, np.float32)
        b = as_buffer(a, "recv buffer", writable=True)
        comm._c.p2p([(False, b.addr, b.count, b.dtype, -1, 7)], 0).wait(30)  # any source
        out["p2p"] = [bool(np.array_equal(h, base)), bool(np.array_equal(d1.numpy(), base * 2)),
                      bool(np.array_equal(d2.numpy(), base * 3)), bool(np.array_equal(a.numpy(), base * 4))]
        for dev, k in ((1, 5), (0, 6)):
            y = SimArray(n, np.float32, device=dev)
            comm.recv(y, 0)
            out["p2p"].append(bool(np.array_equal(y.numpy(), base * k)))
    out["describe"] = comm.describe()
    x = base + me
    buf = SimArray.from_numpy(x) if me == 0 else x.copy()
    comm.all_reduce(buf)
    got = buf.numpy() if me == 0 else buf
    out["all_reduce"] = bool(np.array_equal(got, 2 * base + 1))
    out["bounce_bytes"] = uccl._core.staged_bounce_bytes()
    comm.barrier()
    ctx.linger = False
    try:
        if me == 0:
            comm.send(SimArray.from_numpy(np.ones(1 << 18, np.float32)), 1)
        else:
            comm.recv(SimArray(1 << 19, np.float32), 0)
        out["mismatch"] = "no error"
    except uccl.UcclError as e:
        out["mismatch"] = f"{type(e).__name__}: {e}"
    return out


def test_shared_slots_carry_every_form_of_chunk():
    results = run_world(2, "test_device:body_shared_slots", env={"UCCL_STAGED": "on"}, transport="shm",
                        timeout=120, grace=20)
    assert "shared slots" in results[0]["describe"], results[0]["describe"]
    assert results[1]["p2p"] == [True] * 6, results[1]
    assert all(r["all_reduce"] for r in results), results
    assert all(r["bounce_bytes"] > 0 for r in results), results  # the slots exist while the pair does
    # The receiver names the sender and the sizes (the sender's sends completed: its data left).
    assert results[1]["mismatch"].startswith("MismatchError") and "rank 0" in results[1]["mismatch"] and \
        "count 262144" in results[1]["mismatch"], results[1]


def body_zero_copy_reduce(ctx):
    """A staged all_reduce of device buffers on every rank, whose reducing receives read each
    chunk straight out of its host slot (the sim backend's kernel_view_of_host): the device memory
    allocated during the operation is only what the collective itself needs (nothing with a
    ring in place: the chunk-sized device temporaries of copy-then-reduce are gone), and the
    result is exact."""
    from uccl.sim import SimArray, allocated_bytes
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    count = (3 << 17) + 5  # 3 chunks of 512 KiB and a ragged end per message
    x = SimArray.from_numpy((np.arange(count) % 977).astype(np.float32) + me)
    before = allocated_bytes()
    comm.all_reduce(x)
    want = n * (np.arange(count) % 977).astype(np.float32) + sum(range(n))
    return {"ok": bool(np.array_equal(x.numpy(), want)), "device_bytes_added": allocated_bytes() - before,
            "describe": comm.describe()}


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_reducing_receives_read_the_slot_without_a_device_temporary(transport):
    env = {"UCCL_STAGED": "on", "UCCL_ALGO": "ring"}
    results = run_world(3, "test_device:body_zero_copy_reduce", env=env, transport=transport, timeout=120)
    assert "staged (chunks of" in results[0]["describe"], results[0]["describe"]
    # Where the chunks' time went (a ring: rank 0 sends to one peer, receives from the other).
    d = results[0]["describe"]
    sent = re.search(r"per chunk sent \((\d+)\), mean us: to host \d+, to the peer \d+, waiting for a slot \d+", d)
    got = re.search(r"per chunk received \((\d+)\), mean us: arriving \d+, to the device \d+", d)
    assert sent and got and int(sent.group(1)) > 0 and int(got.group(1)) > 0, d
    for r in results:
        assert r["ok"], r
        assert r["device_bytes_added"] == 0, r
    # A device that copies first (as cuda does) makes its chunk-sized temporaries: the check sees them.
    results = run_world(3, "test_device:body_zero_copy_reduce", env={**env, "UCCL_SIM_REDUCE_FROM_HOST": "0"},
                        transport=transport, timeout=120)
    for r in results:
        assert r["ok"], r
        assert r["device_bytes_added"] > 0, r


def body_either_form(ctx, send_n=0, recv_n=0):
    """Messages of 4095, 4096, 4097 floats and of 2 chunks and more, between host and simulated-
    device buffers in every direction, one received from any source: each chunk comes as its
    bytes (a host sender) or a note (a device sender), and every receive, posted ahead, takes
    either (RecvRequest::alt_dst). Then, if send_n, a message of send_n floats to a receive of
    recv_n: a typed error naming the sender, not a hang."""
    from uccl._buffers import as_buffer
    from uccl.sim import SimArray
    comm, me = ctx.comm, ctx.rank
    kinds = [("host", "host"), ("host", "sim"), ("sim", "host"), ("sim", "sim")]
    ok = []
    for n in (4095, 4096, 4097, (1 << 17) + 3):
        base = (np.arange(n) % 613).astype(np.float32) + n
        for i, (src, dst) in enumerate(kinds):
            if me == 0:
                comm.send(SimArray.from_numpy(base + i) if src == "sim" else base + i, 1, tag=i)
            else:
                y = SimArray(n, np.float32) if dst == "sim" else np.zeros(n, np.float32)
                if i == 1:  # from any source
                    b = as_buffer(y, "recv buffer", writable=True)
                    comm._c.p2p([(False, b.addr, b.count, b.dtype, -1, i)], 0).wait(30)
                else:
                    comm.recv(y, 0, tag=i)
                ok.append(bool(np.array_equal(y.numpy() if dst == "sim" else y, base + i)))
    out = {"ok": ok, "describe": comm.describe()}
    if send_n:
        ctx.linger = False
        try:
            if me == 0:
                comm.send(np.ones(send_n, np.float32), 1)
            else:
                comm.recv(SimArray(recv_n, np.float32), 0)
            out["mismatch"] = "no error"
        except uccl.UcclError as e:
            out["mismatch"] = f"{type(e).__name__}: {e}"
    return out


@pytest.mark.parametrize("sizes", [None, (4095, 4096), (4096, 4095)], ids=["exact", "smaller", "larger"])
def test_receives_take_either_form_on_shared_slots(sizes):
    results = run_world(2, "test_device:body_either_form", env={"UCCL_STAGED": "on"}, transport="shm",
                        args=sizes or (), timeout=120, grace=20)
    assert "shared slots" in results[0]["describe"], results[0]["describe"]
    assert results[1]["ok"] == [True] * 16, results[1]
    if sizes:
        assert results[1]["mismatch"].startswith("MismatchError") and "rank 0" in results[1]["mismatch"], results[1]



# ---- posting ahead (core/schedule_executor.h: ScheduleTask::post_ahead) ------------------------------

def body_post_ahead(ctx):
    """Ring all_reduce, reduce_scatter and all_gather of simulated-device buffers, in place and out
    of place, sum and avg: exact against numpy, and how many phases each posted ahead (Work.stats()).
    A ring's every step after the first sends what the step before received, so it is posted with
    that step, fed chunk by chunk; avg's division is a local action before the all-gather, whose
    first step then waits for the phase to end."""
    from uccl.sim import SimArray
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    count = n * ((1 << 18) + 5)  # chunks of 64 KiB (the test's UCCL_STAGED_CHUNK_BYTES) and ragged ends
    base = (np.arange(count) % 1013).astype(np.float32)
    total = base * np.float32(n * (n + 1) // 2)
    ahead = {}
    for op in ("sum", "avg"):
        for inplace in (True, False):
            x = SimArray.from_numpy(base * np.float32(me + 1))
            y = x if inplace else SimArray((count,), "float32")
            w = comm.all_reduce(x, out=None if inplace else y, op=op, async_op=True)
            w.wait()
            want = total if op == "sum" else total / np.float32(n)
            ctx.check.true(np.array_equal(y.numpy(), want), f"all_reduce {op} in place {inplace}")
            ahead[f"all_reduce {op} {'in' if inplace else 'out of'} place"] = w.stats()["phases_ahead"]
    per = count // n
    x = SimArray.from_numpy(base * np.float32(me + 1))
    y = SimArray((per,), "float32")
    w = comm.reduce_scatter(x, out=y, async_op=True)
    w.wait()
    ctx.check.true(np.array_equal(y.numpy(), total[me * per:(me + 1) * per]), "reduce_scatter")
    ahead["reduce_scatter"] = w.stats()["phases_ahead"]
    x = SimArray.from_numpy(base[:per] * np.float32(me + 1))
    y = SimArray((per * n,), "float32")
    w = comm.all_gather(x, out=y, async_op=True)
    w.wait()
    want = np.concatenate([base[:per] * np.float32(p + 1) for p in range(n)])
    ctx.check.true(np.array_equal(y.numpy(), want), "all_gather")
    ahead["all_gather"] = w.stats()["phases_ahead"]
    return ahead


@pytest.mark.parametrize("world,transport,post", [(2, "shm", "on"), (3, "tcp", "on"), (3, "shm", "off")])
def test_ring_steps_are_posted_ahead_and_exact(world, transport, post):
    env = {"UCCL_STAGED": "on", "UCCL_ALGO": "ring", "UCCL_STAGED_CHUNK_BYTES": "64K", "UCCL_POST_AHEAD": post}
    results = run_world(world, "test_device:body_post_ahead", env=env, transport=transport, timeout=120)
    # A ring all_reduce has 2 (n - 1) phases: all but the first go ahead, but for avg the
    # all-gather's first; a ring reduce_scatter or all_gather has n - 1, all but the first go ahead.
    on = post == "on"
    want = {"all_reduce sum in place": 2 * world - 3, "all_reduce sum out of place": 2 * world - 3,
            "all_reduce avg in place": 2 * world - 4, "all_reduce avg out of place": 2 * world - 4,
            "reduce_scatter": world - 2, "all_gather": world - 2}
    for r in results:
        assert r == {k: v if on else 0 for k, v in want.items()}, r


# ---- staging is offered when a pair connects (core/handshake.h) ------------------------------------

def body_offer_at_connect(ctx):
    """The communicator exists before any device memory (as after init_process_group or
    uccl.init(), before the program touches its device). Ranks 0 and 2 first exchange host
    messages, which connects their pair while no rank has device memory; then ranks 0 and 1
    take simulated-device buffers (rank 2 stays a host-only process) and run every ring step.
    The pairs connected by then are split (pipelined chunks): each has a rank with device memory
    that offered staging in the handshake, and rank 2, which offers none, follows. The pair
    connected before stays unsplit (rank 0's device messages to rank 2 go whole). Exact
    everywhere."""
    from uccl.sim import SimArray
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    if me in (0, 2):
        got, peer = np.zeros(5, np.float32), 2 - me
        for turn in (me, peer):
            if turn == me:
                comm.send(np.full(5, me, np.float32), peer)
            else:
                comm.recv(got, peer)
        ctx.check.true(np.array_equal(got, np.full(5, peer, np.float32)), "host exchange")
    count = 3 * (1 << 18) + 7  # several 512 KiB chunks per ring step, a ragged end
    base = (np.arange(count) % 1013).astype(np.float32)
    x = base * np.float32(me + 1)
    buf = SimArray.from_numpy(x) if me < 2 else x.copy()
    comm.all_reduce(buf)
    got = buf.numpy() if me < 2 else buf
    ctx.check.true(np.array_equal(got, base * np.float32(n * (n + 1) // 2)), "all_reduce")
    return {ln.split(":")[0].strip(): ln for ln in comm.describe().splitlines() if ln.strip().startswith("peer ")}


def test_staging_is_offered_when_a_pair_connects():
    results = run_world(3, "test_device:body_offer_at_connect", env={"UCCL_ALGO": "ring"}, transport="tcp",
                        timeout=120)
    split = "staged (chunks of 524288 bytes"
    whole = "staged (whole messages: connected before either rank had device memory to offer staging; " \
            "UCCL_STAGED=on splits every pair)"
    assert split in results[0]["peer 1"] and split in results[1]["peer 0"], results[:2]
    assert split in results[1]["peer 2"] and split in results[2]["peer 1"], results[1:]
    # Connected before any device memory: rank 0 wraps its device messages whole; rank 2 never
    # has device memory and keeps the plain endpoint (host messages on both sides).
    assert whole in results[0]["peer 2"], results[0]
    assert "staged" not in results[2]["peer 0"], results[2]


# ---- the pipeline overlaps copies with the wire -----------------------------------------------------

def body_overlap(ctx, mib):
    """Measured in one run (benchmarks/testbed/work_staged_overlap.py's measure()): host
    all_reduce time (the wire), a sim copy of the same size at a copy speed set so that it takes
    about as long (the copies), and the staged all_reduce of device memory with that copy speed.
    Pipelined, the staged one takes about the slower of the two, not their sum."""
    testbed = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "testbed")
    sys.path.insert(0, testbed)
    import work_staged_overlap
    return work_staged_overlap.measure(ctx.comm, mib << 18)


# A timed measurement, not a correctness check: the project's rule is that speed is judged by
# benchmarks that print ratios measured in one run, not by timed tests in CI (the 2-core machine is
# noisy). Over loopback the wire's CPU work and the simulated copies take the same two CPUs, so it
# measures ~1.0 (2026-11-27: 0.98-1.02 on a quiet machine, 0.80-0.91 beside a CI run, where the
# wire itself is slower; a copy-bound run, copies 4x the wire: staged 78 ms against
# copies 67 + wire 16, the copies of both directions and the wire overlapped). The overlap is
# checked where the wire costs time and not CPU, on the testbed's shaped link:
# tests/topo/test_staged_overlap.py (ratio 0.61). Run this one with UCCL_TIMING_TESTS=1.
@pytest.mark.skipif(os.environ.get("UCCL_TIMING_TESTS") != "1",
                    reason="timed measurement: set UCCL_TIMING_TESTS=1 (speed is judged by benchmarks, not CI)")
def test_staged_pipeline_overlaps_copies_and_wire():
    # Serial staging would take wire + copy (ratio ~1); a pipeline about max(wire, copy) (~0.5;
    # measured 0.73 on the shared 2-core VM at load 7). Each attempt is one run's own ratio; a
    # later attempt absorbs a burst of load from other processes (at load 20-29 on the VM one
    # run of two attempts failed).
    seen = []
    for attempt in range(3):
        results = run_world(2, "test_device:body_overlap", (32,), env={"UCCL_STAGED": "on"}, transport="tcp",
                            timeout=120)
        r = max(results, key=lambda x: x["staged"])
        ratio = r["staged"] / (r["wire"] + r["copy"])
        seen.append(f"staged {r['staged']*1e3:.1f} ms vs wire {r['wire']*1e3:.1f} + copy {r['copy']*1e3:.1f} ms "
                    f"(ratio {ratio:.2f})")
        if ratio < 0.85:
            return
    pytest.fail("; ".join(seen))
