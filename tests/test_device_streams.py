"""Device buffers and streams on the simulated device: the stream= argument orders an operation
after the work queued on a user's stream, Work.wait(stream=) makes a stream wait without blocking
the host (by signal, by kernel, by the host; UCCL_STREAM_WAIT), copies queued behind such a wait,
two communicators waited by stream in different orders, allocations behind a signal wait, a
stream capturing a graph refused, and a peer killed while a stream waits."""
import numpy as np
import pytest

import uccl
from harness import run_world


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
    results = run_world(2, "test_device_streams:body_stream", env={"UCCL_STAGED": "on"}, transport="tcp", timeout=60)
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
    results = run_world(2, "test_device_streams:body_copy_behind_a_wait",
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
    results = run_world(2, "test_device_streams:body_two_communicators_in_threads", env={"UCCL_STREAM_WAIT": "auto"},
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
    for r in run_world(world, "test_device_streams:body_overlapping_receives", env={"UCCL_STAGED": "on"}, transport="shm", timeout=60):
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
    results = run_world(2, "test_device_streams:body_wait_then_larger_op", env=env, transport="tcp", timeout=60)
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
    for r in run_world(2, "test_device_streams:body_graph_capture", transport="tcp", timeout=60):
        assert r["ok"], r
        assert len(r["errors"]) == 2, r
        assert r["errors"][0].startswith("all_reduce: the stream is capturing a sim graph"), r
        assert "wait_stream: the stream is capturing" in r["errors"][1], r


def test_wait_on_the_operations_own_stream_does_not_deadlock():
    results = run_world(2, "test_device_streams:body_wait_on_own_stream", env={"UCCL_STAGED": "on", "UCCL_TIMEOUT_S": "20"},
                        transport="tcp", timeout=60)
    assert all(r["ok"] for r in results), results


@pytest.mark.parametrize("kill_peer", [False, True], ids=["completes", "peer-killed"])
def test_stream_wait_by_the_host(kill_peer):
    results = run_world(2, "test_device_streams:body_wait_stream_host", (kill_peer,),
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
    results = run_world(2, "test_device_streams:body_wait_stream", (kill_peer,),
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
