"""Failures on device buffers: a peer killed during a staged transfer (survivors name it, bounce
buffers are released), a peer that freed the staging slots it named (reported as failed, with
its reason where the transport still has it), and a communicator dropped while a Python callback
of Work.wait(stream=) is due (no deadlock with the progress thread)."""
import os
import signal
import threading
import time

import numpy as np
import pytest

import uccl
from harness import run_world


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
    results = run_world(3, "test_device_failures:body_killed_during_staged", (2,), env={"UCCL_STAGED": "on"},
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
    [_, res] = run_world(2, "test_device_failures:body_slots_gone_before_read", (behind,), transport="shm",
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
    results = run_world(2, "test_device_failures:body_drop_comm_with_a_callback_due", env={"UCCL_STAGED": "on"},
                        transport="shm", timeout=60)
    assert all(t < 10 for t in results), results
