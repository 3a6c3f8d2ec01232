"""Device buffers end to end on the simulated device (cpp/base/sim_device.h): every collective x
dtype x op in and out of place against numpy, worlds 1-5, staged connections in split mode
(UCCL_STAGED=on: chunks pipelined through bounce buffers) and whole mode (no negotiation), mixed
communicators (host ranks, sim ranks, a second "vendor" with slower copies; the all_reduce
results must be bitwise equal on every rank), the stream argument, typed errors, a peer killed
during a staged transfer, and a measured overlap of copies with the wire."""
import os
import re
import signal
import sys
import threading
import time

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


# ---- the stream argument, errors, memory ---------------------------------------------------------

def body_stream(ctx):
    """The op starts only after the user's stream ran what was queued on it: a slow copy into x
    queued on a stream, then all_reduce(x, stream=s) must see the copied values."""
    from uccl.sim import SimArray, Stream
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    uccl.sim.set_copy_speed(0.05, 0)  # 4 MiB takes ~80 ms
    s = Stream(0)
    count = 1 << 20
    x = SimArray(count, np.float32)
    src = np.full(count, me + 1, np.float32)
    x.copy_from(src, stream=s, sync=False)  # queued, not finished
    comm.all_reduce(x, stream=s)
    uccl.sim.set_copy_speed(0, 0)
    got = x.numpy()
    errors = []
    try:
        comm.all_reduce(x, out=np.zeros(count, np.float32))
    except uccl.InvalidArgument as e:
        errors.append(("mixed", str(e)))
    try:
        comm.all_reduce(x, stream=12345)
    except uccl.InvalidArgument as e:
        errors.append(("stream", str(e)))
    comm.barrier()
    return {"ok": bool(np.all(got == n * (n + 1) / 2)), "first": float(got[0]), "errors": errors}


def test_stream_argument_orders_the_operation_and_bad_input_is_refused():
    results = run_world(2, "test_device:body_stream", env={"UCCL_STAGED": "on"}, transport="tcp", timeout=60)
    for r in results:
        assert r["ok"], r
        kinds = [k for k, _ in r["errors"]]
        assert kinds == ["mixed", "stream"], r["errors"]
        assert "different places" in r["errors"][0][1]


def body_wait_stream(ctx, kill_peer):
    """Work.wait(stream=s) returns at once and makes s wait: rank 1 starts its all_reduce only
    after rank 0's wait(stream=) returned (a store key), so a blocking wait would deadlock; a copy
    queued on s after it must read the reduced values, which do not exist before rank 1 joins (a
    stream that did not wait reads rank 0's own input). kill_peer: rank 1 dies instead; the
    stream must still be released and the Work report the dead rank."""
    import os
    from uccl.sim import SimArray, Stream
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    count = 4096
    x = SimArray.from_numpy(np.full(count, me + 1, np.float32))
    if me == 1:
        ctx.store.get("waiting", 30)
        if kill_peer:
            os._exit(0)
        comm.all_reduce(x)
        comm.all_reduce(np.ones(4, np.float32))  # rank 0's host operation below
        return {}
    s = Stream(0)
    w = comm.all_reduce(x, async_op=True)
    w.wait(stream=s)
    done_at_return = w.is_completed()
    ctx.store.set("waiting", b"1")
    got = x.numpy(stream=s)  # queued behind the wait; returns when the copy ran
    out = {"done_at_return": done_at_return, "first": float(got[0]), "all_same": bool(np.all(got == got[0])),
           "stream_wait": uccl.stream_wait_mode("sim")}
    try:
        w.wait()
    except uccl.UcclError as e:
        out["error"] = (type(e).__name__, str(e))
    host = comm.all_reduce(np.ones(4, np.float32), async_op=True) if not kill_peer else None
    if host is not None:
        try:
            host.wait(stream=s)
        except uccl.InvalidArgument as e:
            out["host_error"] = str(e)
        host.wait()
    return out


def body_copy_behind_a_wait(ctx):
    """The H200 hang, on the simulated device: rank 0's stream waits on its all_reduce
    (wait(stream=s)), then rank 0 copies the buffer out on s (x.numpy(stream=s): a copy by the
    copy engine, queued behind the wait, as tensor.cpu() after torch's work.wait()). Rank 1 joins
    0.5 s later, so the copies rank 0's operation still needs come after that one. Returns what
    rank 0 read and the operation's error, if any."""
    import time
    from uccl.sim import SimArray, Stream
    comm, me = ctx.comm, ctx.rank
    x = SimArray.from_numpy(np.full(1 << 18, me + 1, np.float32))
    if me == 1:
        ctx.store.get("waiting", 30)
        time.sleep(0.5)
        try:
            comm.all_reduce(x)
        except uccl.UcclError as e:
            ctx.linger = False  # the communicator failed: no closing barrier
            return {"error": type(e).__name__}
        return {}
    s = Stream(0)
    w = comm.all_reduce(x, async_op=True)
    w.wait(stream=s)
    ctx.store.set("waiting", b"1")
    got = x.numpy(stream=s)
    out = {"first": float(got[0]), "copies": next(b["copies"] for b in uccl.build_info()["device_backends"]
                                                  if b["name"] == "sim")}
    try:
        w.wait()
    except uccl.UcclError as e:
        out["error"] = (type(e).__name__, str(e))
        ctx.linger = False
    out["describe"] = comm.describe()
    return out


@pytest.mark.parametrize("copies,transport", [("auto", "tcp"), ("engine", "tcp"), ("auto", "shm")])
def test_a_copy_queued_behind_a_stream_wait(copies, transport):
    """auto: uccl's own copies run as kernels on its streams (base/device.h, device_copy_async),
    so the user's copy holding the simulated copy engine behind the wait cannot stop them: the
    read sees the sum. shm: rank 0 maps rank 1's shared slots while its stream waits, so it
    cannot register them (cuda's rule, modelled) and no kernel reaches them: each chunk goes
    through a pinned hop (StagedEndpoint::hop_for), the CPU moving it out of the slot; without
    the hop those copies would go by the engine, behind the user's. engine (UCCL_DEVICE_COPIES=engine, the old way): uccl's copies queue on the
    engine behind the user's, which waits for the operation: it times out (the communicator's 5 s), and
    the stream is released with rank 0's own values - the hang the H200 showed, reproduced here."""
    results = run_world(2, "test_device:body_copy_behind_a_wait",
                        env={"UCCL_STAGED": "on", "UCCL_DEVICE_COPIES": copies},
                        transport=transport, timeout=90, comm_timeout=5)
    r = results[0]
    if copies == "auto":
        assert r["copies"] == "kernel" and r["first"] == 3.0 and "error" not in r, r
        if transport == "shm":
            assert "the peer's pageable" in r["describe"] and "through a pinned hop" in r["describe"], r
    else:
        assert r["copies"] == "engine", r
        assert r.get("error", ("",))[0] == "TimeoutError" and r["first"] == 1.0, r


def body_two_communicators_in_threads(ctx):
    """Each rank: a thread on the world communicator and one on a split copy, each issuing an
    all_reduce of device memory, wait(stream=) and a copy queued behind the wait (a read of the
    result: it holds the simulated copy engine until the wait is met). Rank 0's world thread goes
    first, rank 1's split thread goes first; the other thread starts its input copy 0.3 s later.
    With signal waits on both communicators the first thread's held copy stands in front of the
    other communicator's input copy on each rank, and each operation waits for the rank where the
    other holds it: neither ever runs. Under auto only the world (the process's first
    communicator) waits by signal; the split copy's wait is the host's."""
    import threading
    import time
    from uccl.sim import SimArray, Stream
    comm, me = ctx.comm, ctx.rank
    sub = comm.split(0)
    count = 4096
    first = threading.Event()
    out = {"errors": []}

    def run(c, name, value, starts_first):
        try:
            if not starts_first:
                first.wait(30)
                time.sleep(0.3)
            s = Stream(0)
            src = np.full(count, value * (me + 1), np.float32)
            x = SimArray((count,), np.float32, 0)
            x.copy_from(src, stream=s, sync=False)
            w = c.all_reduce(x, async_op=True, stream=s)
            if starts_first:
                first.set()  # (before the wait: under auto the split copy's wait blocks this thread)
            w.wait(stream=s)
            held = SimArray((count,), np.float32, 0)
            held.copy_from(src, stream=s, sync=False)  # behind the wait, on the engine
            w.wait(timeout=15)
            s.synchronize()
            out[name] = float(x.numpy()[0])
        except Exception as e:  # noqa: BLE001 - reported in the result
            out["errors"].append(f"{name}: {type(e).__name__}: {e}")
            first.set()

    threads = [threading.Thread(target=run, args=(comm, "world", 1.0, me == 0)),
               threading.Thread(target=run, args=(sub, "sub", 10.0, me == 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    out["describe_world"], out["describe_sub"] = comm.describe(), sub.describe()
    return out


def test_two_communicators_waited_by_stream_in_different_orders_do_not_deadlock():
    """Found by tests/thread_soak.py (seed 0, 4 threads: an operation timed out on every run with
    device buffers and stream waits, never with host buffers or host waits): base/device.h
    stream_wait_for gives signal waits to one communicator of the process under auto. Before, the
    scenario timed out on both communicators (their 10 s)."""
    results = run_world(2, "test_device:body_two_communicators_in_threads", env={"UCCL_STREAM_WAIT": "auto"},
                        transport="tcp", timeout=90, comm_timeout=10)
    for r in results:
        assert not r["errors"], r
        assert r["world"] == 3.0 and r["sub"] == 30.0, r
        assert "stream waits on sim: signal" in r["describe_world"], r["describe_world"]
        assert "stream waits on sim: host (auto: another communicator of this process waits by signal)" in \
            r["describe_sub"], r["describe_sub"]


def body_wait_stream_host(ctx, kill_peer):
    """UCCL_STREAM_WAIT=host (what auto picks for CUDA): wait(stream=)
    returns only once the operation is done, so the stream has nothing left to wait for and reads
    the reduced values; a dead peer's error comes from wait(stream=) itself, naming it."""
    import os
    from uccl.sim import SimArray, Stream
    comm, me = ctx.comm, ctx.rank
    x = SimArray.from_numpy(np.full(4096, me + 1, np.float32))
    if me == 1:
        if kill_peer:
            ctx.store.get("started", 30)
            os._exit(0)
        comm.all_reduce(x)
        return {}
    s = Stream(0)
    w = comm.all_reduce(x, async_op=True)
    ctx.store.set("started", b"1")
    out = {"stream_wait": uccl.stream_wait_mode("sim")}
    try:
        w.wait(stream=s)
        out["done_at_return"] = w.is_completed()
        got = x.numpy(stream=s)
        out["first"], out["all_same"] = float(got[0]), bool(np.all(got == got[0]))
    except uccl.UcclError as e:
        out["error"] = (type(e).__name__, str(e))
    return out


def body_overlapping_receives(ctx):
    """Two receives of one p2p batch into overlapping device memory land in batch order (the
    later op wins the overlap, whichever message came first): PyTorch's pipelining warms up with
    both neighbours' messages received into one CUDA tensor."""
    from uccl.sim import SimArray
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    nxt, prv = (me + 1) % n, (me - 1) % n
    a = SimArray.from_numpy(np.arange(6, dtype=np.int32) + 100 * me)
    b = SimArray.from_numpy(np.arange(4, dtype=np.int32) + 1000 + 100 * me)
    z = SimArray.from_numpy(np.full(8, -1, np.int32))
    comm.batch_isend_irecv([("send", a, nxt, 9), ("send", b, prv, 9), ("recv", z[:6], prv, 9), ("recv", z[4:], nxt, 9)]).wait()
    want = np.concatenate([np.arange(4) + 100 * prv, np.arange(4) + 1000 + 100 * nxt]).astype(np.int32)
    return {"got": z.numpy().tolist(), "want": want.tolist()}


@pytest.mark.parametrize("world", [2, 3])
def test_overlapping_receives_of_device_memory_land_in_batch_order(world):
    for r in run_world(world, "test_device:body_overlapping_receives", env={"UCCL_STAGED": "on"}, transport="shm", timeout=60):
        assert r["got"] == r["want"], r


def body_wait_on_own_stream(ctx):
    """An operation ordered on stream s, then made to wait on s (what ProcessGroupNCCL's
    work.wait() does, and the torch backend now too). The op's start event must be recorded on
    s when the call is made: recorded when the engine started the op, it came after the wait,
    which waits for the op itself (a deadlock until the timeout; seen with the torch backend)."""
    from uccl.sim import SimArray, Stream
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    s = Stream(0)
    x = SimArray.from_numpy(np.full(1024, me + 1, np.float32))
    for _ in range(20):
        w = comm.all_reduce(x, async_op=True, stream=s)
        w.wait(stream=s)
    got = x.numpy(stream=s)
    want = float(sum(r + 1 for r in range(n))) * n ** 19  # each round sums n copies of the last
    return {"ok": bool(np.all(got == want)), "first": float(got[0]), "want": want}


def body_wait_then_larger_op(ctx):
    """Two async all_reduces, each followed by wait(stream=s), the second four hundred times
    larger, before the peer joins: the second operation needs new device scratch and bounce
    buffers while s waits for its signal. Allocating them the device-synchronizing way (CUDA's
    cudaMalloc / cudaHostAlloc, modelled by the simulated device) waits for s, which waits for
    the operation: the deadlock of the first H200 runs (base/signal_safe_memory.h)."""
    from uccl.sim import SimArray, Stream
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    small = SimArray.from_numpy(np.full(1024, me + 1, np.float32))
    big = SimArray.from_numpy(np.full(400 * 1024 + 3, me + 1, np.float32))
    if me == 1:
        ctx.store.get("waiting", 30)
        comm.all_reduce(small)
        comm.all_reduce(big)
        return {}
    s = Stream(0)
    w1 = comm.all_reduce(small, async_op=True)
    w1.wait(stream=s)
    w2 = comm.all_reduce(big, async_op=True)
    w2.wait(stream=s)
    ctx.store.set("waiting", b"1")
    got = big.numpy(stream=s)
    w1.wait()
    w2.wait()
    return {"ok": bool(np.all(got == 3.0)), "first": float(got[0]), "stats": uccl._core.sim_memory_stats()}


def test_allocations_behind_a_signal_wait_do_not_deadlock():
    # The device copies first, as cuda does: its staged receives allocate device temporaries
    # behind the wait (a device that reduces from host memory may allocate nothing there).
    env = {"UCCL_STAGED": "on", "UCCL_TIMEOUT_S": "20", "UCCL_SIM_REDUCE_FROM_HOST": "0"}
    results = run_world(2, "test_device:body_wait_then_larger_op", env=env, transport="tcp", timeout=60)
    r = results[0]
    assert r["ok"], r
    # The second operation's memory came without a device-wide synchronization; its bounce
    # buffers from the pinned reserve filled just before the first wait was queued.
    st = r["stats"]
    assert st["unsync_allocs"] > 0 and st["reserve_allocs"] > 0, r


def body_graph_capture(ctx):
    """A collective ordered on a stream that is capturing a graph (CUDA graph capture; the
    simulated stream's stand-in), and a wait(stream=) into one, are refused with NotSupported
    naming the operation, nothing queued; the same calls work once the capture ended."""
    from uccl.sim import SimArray, Stream
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    s = Stream(0)
    x = SimArray.from_numpy(np.full(256, me + 1, np.float32))
    errors = []
    with s.capture():
        try:
            comm.all_reduce(x, stream=s)
        except uccl.NotSupported as e:
            errors.append(str(e))
    w = comm.all_reduce(x, async_op=True, stream=s)
    with s.capture():
        try:
            w.wait(stream=s)
        except uccl.NotSupported as e:
            errors.append(str(e))
    w.wait()
    got = x.numpy(stream=s)
    return {"errors": errors, "ok": bool(np.all(got == float(sum(r + 1 for r in range(n)))))}


def test_a_stream_capturing_a_graph_is_refused():
    for r in run_world(2, "test_device:body_graph_capture", transport="tcp", timeout=60):
        assert r["ok"], r
        assert len(r["errors"]) == 2, r
        assert r["errors"][0].startswith("all_reduce: the stream is capturing a sim graph"), r
        assert "wait_stream: the stream is capturing" in r["errors"][1], r


def test_wait_on_the_operations_own_stream_does_not_deadlock():
    results = run_world(2, "test_device:body_wait_on_own_stream", env={"UCCL_STAGED": "on", "UCCL_TIMEOUT_S": "20"},
                        transport="tcp", timeout=60)
    assert all(r["ok"] for r in results), results


@pytest.mark.parametrize("kill_peer", [False, True], ids=["completes", "peer-killed"])
def test_stream_wait_by_the_host(kill_peer):
    results = run_world(2, "test_device:body_wait_stream_host", (kill_peer,),
                        env={"UCCL_STAGED": "on", "UCCL_TIMEOUT_S": "20", "UCCL_STREAM_WAIT": "host"},
                        transport="tcp", timeout=90, expect_exit={1} if kill_peer else None)
    r = results[0]
    assert r["stream_wait"] == "host (UCCL_STREAM_WAIT=host)", r
    if not kill_peer:
        assert r["done_at_return"] is True and r["first"] == 3.0 and r["all_same"], r
    else:
        assert "error" in r and "rank 1" in r["error"][1], r


@pytest.mark.parametrize("kill_peer,wait", [(False, "auto"), (True, "auto"), (False, "kernel")],
                         ids=["completes", "peer-killed", "completes-kernel-wait"])
def test_work_makes_a_stream_wait_without_blocking(kill_peer, wait):
    """auto: the simulated device's signal wait; kernel: UCCL_STREAM_WAIT=kernel (CUDA's polling
    kernel; the simulated stream's worker waits the same way for both) reaches the backend."""
    results = run_world(2, "test_device:body_wait_stream", (kill_peer,),
                        env={"UCCL_STAGED": "on", "UCCL_TIMEOUT_S": "20", "UCCL_STREAM_WAIT": wait},
                        transport="tcp", timeout=90, expect_exit={1} if kill_peer else None)
    r = results[0]
    assert r["stream_wait"] == ("signal" if wait == "auto" else wait), r
    assert r["done_at_return"] is False, r
    if not kill_peer:
        assert r["first"] == 3.0 and r["all_same"], r  # 1 + 2: the copy ran after the operation
        assert "error" not in r, r
        assert "device buffers" in r["host_error"], r
    else:
        assert "error" in r and "rank 1" in r["error"][1], r


def test_sim_array_basics():
    from uccl.sim import SimArray
    before = uccl.sim.allocated_bytes()
    a = SimArray.from_numpy(np.arange(10, dtype=np.int32))
    assert np.array_equal(a.numpy(), np.arange(10, dtype=np.int32))
    v = a[2:5]
    assert np.array_equal(v.numpy(), [2, 3, 4])
    assert a.__dlpack_device__() == (uccl.sim.KDL_EXT_DEV, 0)
    assert np.array_equal(np.from_dlpack(a, device="cpu", copy=True), np.arange(10))
    with pytest.raises(BufferError):
        a.__dlpack__()
    assert uccl._core.memory_location(a.ptr) == ("sim", 0)
    del a, v
    assert uccl.sim.allocated_bytes() == before
    names = [b["name"] for b in uccl.build_info()["device_backends"]]
    assert "sim" in names


# ---- a peer killed during a staged transfer --------------------------------------------------------

def body_killed_during_staged(ctx, victim):
    from uccl.sim import SimArray
    comm, me, n = ctx.comm, ctx.rank, ctx.world
    ctx.linger = False
    uccl.sim.set_copy_speed(2.0, 0)  # 16 MiB messages take a while: the kill lands mid-transfer
    x = SimArray.from_numpy(np.ones(1 << 22, np.float32))

    def die():
        ctx.store.set("killed-at", repr(time.time()).encode())
        os.kill(os.getpid(), signal.SIGKILL)

    if me == victim:
        threading.Timer(0.6, die).start()
    for i in range(100000):
        try:
            comm.all_reduce(x)
        except uccl.UcclError as e:
            failed_at = time.time()
            killed_at = float(ctx.store.get("killed-at", 10))
            held = uccl._core.staged_bounce_bytes()
            # Nothing of ours left in /dev/shm: the staged slots and the shm rings are unlinked.
            import glob
            leftover = glob.glob(f"/dev/shm/uccl-{os.getpid()}-*")
            ctx.store.add("survivors-done", 1)
            while me == 0 and ctx.store.add("survivors-done", 0) < n - 1:
                time.sleep(0.01)
            return {"kind": type(e).__name__, "msg": str(e), "after_s": failed_at - killed_at, "iteration": i,
                    "bounce_bytes_after": held, "leftover": leftover}
    return {"kind": "no error"}


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_peer_killed_during_staged_transfer(transport):
    results = run_world(3, "test_device:body_killed_during_staged", (2,), env={"UCCL_STAGED": "on"},
                        transport=transport, expect_exit={2}, timeout=90, grace=15)
    for r in (0, 1):
        res = results[r]
        assert res["kind"] == "RemoteError", res
        assert "rank 2" in res["msg"], res["msg"]
        assert res["after_s"] < 5, res
        assert res["bounce_bytes_after"] == 0, res
        assert res["leftover"] == [], res


def body_slots_gone_before_read(ctx, behind):
    """Rank 0 sends from device memory through shared slots (a note naming its slot segment),
    then fails (comm.abort: the abort note goes out, then its slots are freed and unlinked)
    before rank 1 posts the receive. Rank 1 takes the note, finds the segment gone, and must
    report rank 0's failure with its cause, not "cannot open shared memory segment"
    (NotSupported, naming nobody: kill_points.py --device trial 30, where the receiver then
    blamed nobody and its peers the wrong rank). behind: rank 0 also sent a plain message after
    the note, so its close note is not the next thing in the ring (trial 120 of --device
    --async-batch 4: the receiver then waited 1 s and blamed rank 0 without the root cause)."""
    from uccl.sim import SimArray
    comm, me = ctx.comm, ctx.rank
    ctx.linger = False
    n = 1 << 14  # one 64 KiB chunk: its send completes once the note is out
    if me == 0:  # the pair connects first (lazily: the receiver's engine must take part)
        comm.send(np.ones(4, np.float32), 1)
    else:
        comm.recv(np.zeros(4, np.float32), 0)
    if me == 0:
        comm.send(SimArray.from_numpy(np.ones(n, np.float32)), 1)
        if behind:
            comm.send(np.ones(4, np.float32), 1)
        comm.abort("rank 0 gives up (test)")
        ctx.store.set("aborted", b"1")
        ctx.store.wait(["received"], 30)
        return None
    ctx.store.wait(["aborted"], 30)
    t = time.monotonic()
    try:
        comm.recv(np.zeros(n, np.float32), 0)
        res = {"kind": "no error"}
    except uccl.UcclError as e:
        res = {"kind": type(e).__name__, "msg": str(e), "peer": e.peer, "took": time.monotonic() - t}
    ctx.store.set("received", b"1")
    return res


@pytest.mark.parametrize("behind", [False, True], ids=["close-note-next", "message-behind-the-note"])
def test_a_peer_that_freed_the_slots_it_named_is_reported_as_failed(behind):
    [_, res] = run_world(2, "test_device:body_slots_gone_before_read", (behind,), transport="shm",
                         env={"UCCL_STAGED": "on", "UCCL_STAGED_SHARED": "on", "UCCL_STAGED_CHUNK_BYTES": "64K"},
                         timeout=60)
    assert res["kind"] == "RemoteError" and res["peer"] == 0, res
    assert "rank 0 gives up (test)" in res["msg"], res
    assert res["took"] < 0.5, res  # the close note says why at once


def body_drop_comm_with_a_callback_due(ctx):
    """A communicator dropped from Python (the GIL held) while its last operation, waited for
    with wait(stream=), has not finished: the Python callback that keeps its buffers is due on
    the progress thread, which needs the GIL, while the destructor joins that thread. Hung
    (tests/device_soak.py seed 446, one run in ~8); the Python-facing communicator now lets
    the GIL go while it is destroyed (python/core/module.cc for_python)."""
    from uccl.sim import SimArray, Stream
    import sys
    ctx.linger = False
    interval = sys.getswitchinterval()
    for i in range(3):
        comm = ctx.comm.split(0)  # held only here
        x = SimArray.from_numpy(np.ones(1 << 16, np.float32))
        st = Stream(0)
        w = comm.all_reduce(x, async_op=True)
        # Keep the GIL (no switch for 60 s) while the operation completes: its callback then
        # waits for the GIL on the progress thread, as it did when the drop came at that moment.
        sys.setswitchinterval(60)
        w.wait(stream=st)  # returns at once, a Python callback registered
        until = time.monotonic() + 0.3
        while time.monotonic() < until:
            pass
        t = time.monotonic()
        del comm, w  # the last references: the destructor runs here, the GIL held
        took = time.monotonic() - t
        sys.setswitchinterval(interval)
    ctx.store.add("dropped", 1)
    while ctx.rank == 0 and ctx.store.add("dropped", 0) < ctx.world:
        time.sleep(0.01)
    return took


def test_dropping_a_communicator_with_a_python_callback_due_does_not_hang():
    results = run_world(2, "test_device:body_drop_comm_with_a_callback_due", env={"UCCL_STAGED": "on"},
                        transport="shm", timeout=60)
    assert all(t < 10 for t in results), results


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


# ---- arrays of a device without a uccl backend: staged through their library's copy ------------------

class _FakeVendorArray:
    """An array on a device uccl has no backend for (DLPack device type 10, ROCm): reachable only
    through DLPack host copies and its own namespace, like a vendor library's arrays."""

    def __init__(self, host):
        self._host = np.array(host)
        self.device = "vendor:0"

    def __dlpack_device__(self):
        return (10, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if dl_device is None or tuple(dl_device)[0] != 1 or copy is False:
            raise BufferError("device memory: ask for a host copy")
        return self._host.copy().__dlpack__()

    def __array_namespace__(self):
        return _FakeVendorNamespace

    def __setitem__(self, key, value):
        self._host[key] = value._host if isinstance(value, _FakeVendorArray) else value


class _FakeVendorNamespace:
    @staticmethod
    def asarray(x, device=None):
        return _FakeVendorArray(np.asarray(x))


def body_foreign(ctx):
    x = _FakeVendorArray(np.arange(5, dtype=np.float32) * (ctx.rank + 1))
    res = ctx.comm.all_reduce(x)
    g = ctx.comm.all_gather(_FakeVendorArray(np.full(2, ctx.rank, np.int32)))
    return {"same": res is x, "value": x._host.tolist(), "gathered": g._host.tolist(), "type": type(g).__name__}


def test_arrays_of_a_device_without_backend_are_staged_through_their_library():
    results = run_world(2, "test_device:body_foreign", transport="tcp", timeout=60)
    for r in results:
        assert r["same"] and r["value"] == [0.0, 3.0, 6.0, 9.0, 12.0], r
        assert r["type"] == "_FakeVendorArray" and r["gathered"] == [0, 0, 1, 1], r


class _FakeCudaArray(_FakeVendorArray):
    """A CUDA array as CuPy shows itself: DLPack device 2, __cuda_array_interface__, a namespace
    that allocates on a device."""

    def __init__(self, host, read_only=False):
        super().__init__(host)
        self.device = "cuda:1"
        self.dtype = self._host.dtype
        self.read_only = read_only

    def __dlpack_device__(self):
        return (2, 1)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self._host.shape, "typestr": self._host.dtype.str, "data": (0x7f0000000000, self.read_only),
                "version": 3, "strides": None}

    def __array_namespace__(self):
        return _FakeCudaNamespace


class _FakeCudaNamespace:
    @staticmethod
    def empty(shape, dtype=None, device=None):
        a = _FakeCudaArray(np.empty(shape, dtype))
        a.device = device
        return a


def test_cuda_arrays_are_used_in_place_when_the_cuda_backend_is_there(monkeypatch):
    """CuPy-like arrays (writable, __cuda_array_interface__) take the device path while uccl's cuda
    backend is available (in place, ordered on stream=; issue 14 item 7), and are staged through
    their library's host copy otherwise, as read-only ones (JAX's) always are; outputs uccl allocates are the input's library on its device
    (torch tensors too: a tensor of another device gets an output on that device)."""
    from uccl import _buffers
    from uccl._interop import is_foreign
    from uccl.comm import _alloc_like

    x = _FakeCudaArray(np.arange(4, dtype=np.float32))
    monkeypatch.setitem(_buffers._BACKENDS, "cuda", True)
    assert not is_foreign(x)
    assert is_foreign(_FakeCudaArray([1.0], read_only=True))  # JAX's are read-only: worked on in a host copy
    out = _alloc_like(x, 12)
    assert type(out) is _FakeCudaArray and out.device == "cuda:1" and out.dtype == np.float32 and out._host.shape == (12,)
    monkeypatch.setitem(_buffers._BACKENDS, "cuda", False)
    assert is_foreign(x)
    assert is_foreign(_FakeVendorArray([1.0]))  # no CUDA interface: staged whatever the backends
    torch = pytest.importorskip("torch")
    t = _alloc_like(torch.empty(3, dtype=torch.bfloat16, device="meta"), 7)
    assert t.device.type == "meta" and t.dtype == torch.bfloat16 and t.shape == (7,)


def test_cuda_memory_the_backend_does_not_recognize_is_refused_not_read():
    """A CUDA array whose memory uccl's cuda backend does not see as device memory (managed
    memory, another process's pointer) would be read by host code as if it were host memory:
    refused with NotSupported instead (the check every CUDA array and torch CUDA tensor passes)."""
    from uccl._buffers import check_cuda_memory
    x = np.ones(16, np.float32)
    with pytest.raises(uccl.NotSupported, match="does not recognize as device memory .it says: host"):
        check_cuda_memory(x.ctypes.data, x.nbytes, "x")
    check_cuda_memory(0, 0, "an empty array")  # nothing to read: nothing to check


# ---- a random soak of the device paths (tests/device_soak.py; benchmarks/device_soak.py runs more) ----

@pytest.mark.parametrize("seed", [3, 11, 29, 42, 57, 68])
def test_random_soak_of_device_paths(seed):
    """One seed = one job (world, transport, staging settings, copies, algorithm, a slow rank)
    and 150 operations drawn alike on every rank: any collective (the v forms too; some on a
    sub-communicator beside the whole one) or a p2p ring, any dtype and
    reduction, counts from 0 to 200003, each rank's buffers on the host or either simulated
    device per call, some ordered on a user's stream and waited for there, in asynchronous
    batches of up to four; every result exact against numpy."""
    import device_soak
    world, transport, hosts, env, slow, res = device_soak.run_seed(seed, 150, timeout=240)
    assert res.checks >= 150 * world // 2, res.checks
    assert all(r["ops"] == 150 for r in res)
    assert len({k for r in res for k in r["kinds"]}) == 3  # host and both devices took part


@pytest.mark.parametrize("seed", [0, 3, 19, 66])
def test_random_soak_with_threads(seed):
    """The soak with 2-4 threads per rank (tests/thread_soak.py), each on a communicator of its
    own (the world, split copies), some handing their operations to another thread to wait for
    and check, one thread reading describe() and estimate() of them all meanwhile, the copies
    destroyed by their threads while the others run; every result exact against numpy. Seed 0
    (3 ranks on 2 hosts, 4 threads) timed out on every run before stream waits by signal were
    kept to one communicator; seed 19's watcher got InvalidArgument from estimate() (rhd forced on
    3 ranks); seed 66 (4 ranks, 3 threads) timed out in one run of three while the endpoints of
    three communicators spent the pinned reserve and a staged copy went by the engine behind a
    user's read (StagedEndpoint::hop_for: the device's hop of the process)."""
    import thread_soak
    world, transport, hosts, env, slow, res = thread_soak.run_seed_threads(seed, 60, timeout=240)
    n = thread_soak.threads_for(seed)
    assert all(r["issued"] == [60] * n for r in res), res
    assert res.checks >= 60 * n * world // 2, res.checks


def test_device_pools_past_the_pinned_reserve_do_not_hang():
    """Found by the soak: while a stream waits on a signal (Work.wait(stream=)), pinned memory
    comes from the backend's bounded reserve; one connection's receive-ahead pool of 4 KiB slots
    took all of it, the next connection's first slot came pageable, its copies went by the copy
    engine and queued behind the user's read of the result on that stream, which waited for this
    very operation: a hang until the timeout. Pools now keep to two slots while pinned memory is
    scarce and the device has a pinned hop made before the pools spend the reserve
    (StagedEndpoint::hop_for; first one per endpoint and direction, now one per device).
    Whole mode too: a message-sized slot past the reserve's blocks went the same way; it now
    moves through the hop by pieces. And shared slots (one host): a chunk through the
    device's hop must not be copied out of a slot hop it never had (a crash the soak found
    in the first version of this fix)."""
    base = {"op": "sum", "root": 0, "in_place": False, "counts": [0, 0, 0], "matrix": [[0] * 3] * 3,
            "sub": False, "shift": 1, "batch_end": True, "stream": True}
    ops = [dict(base, i=0, coll="sendrecv", dtype="float32", count=200003, shift=1, kinds=["host", "host", "sim0"]),
           dict(base, i=1, coll="all_to_all", dtype="float64", count=200003, shift=1, kinds=["host", "host", "sim0"]),
           dict(base, i=2, coll="all_reduce", dtype="float32", count=300001, shift=1, kinds=["sim0", "host", "sim1"]),
           dict(base, i=3, coll="gather", dtype="int64", count=65537, root=1, kinds=["sim1", "sim1", "sim0"])]
    small = {"UCCL_STAGED": "on", "UCCL_STAGED_CHUNK_BYTES": "4K", "UCCL_STAGED_BOUNCE_BYTES": "1M"}
    for env, hosts in ((small, mixed_hosts(3, 2)), ({"UCCL_STAGED": "off"}, mixed_hosts(3, 2)),
                       (dict(small, UCCL_STAGED_SHARED="on", UCCL_ALGO="ring"), None)):
        res = run_world(3, "device_soak:soak", (5, 0, (), True, ops), env=env, host_ids=hosts,
                        timeout=120, comm_timeout=20)
        assert res[2]["on_streams"] == 4 and res[0]["on_streams"] == 2, res
