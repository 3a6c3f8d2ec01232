"""The device soak with several threads per rank (run inside each rank; tests/test_device_soaks.py and
`benchmarks/device_soak.py --threads` drive it).

device_soak.py issues every operation from one thread. Programs do not: a trainer runs its data-
parallel all_reduces on one group while a pipeline thread sends activations on another, a metrics
thread all_reduces a counter now and then, torch hands a Work to a future's callback on another
thread, Ray actors serve calls from a thread pool. Each of those is legal as long as the
operations of ONE communicator are issued in the same order on every rank, which one thread per
communicator guarantees. Here each rank runs `threads` threads, each with a communicator of its
own (the world for thread 0, `comm.split(0)` copies for the others: separate engines, progress
threads and connections over the same transports), each running its own plan (device_soak.plan
for the thread's seed), with:
  * hand-offs: odd threads do not wait for their own operations; a waiter thread of theirs does
    (Work.wait and the checks on another thread than the one that issued, as torch's futures);
  * a watcher thread calling describe() and estimate() on every communicator meanwhile;
  * each split copy destroyed by its own thread as soon as its plan is done, while the others
    still run (an engine torn down beside live ones).
A failed check names the seed, the thread and the operation (`python benchmarks/device_soak.py
--threads --seed S` replays it).
"""
import queue
import threading

import numpy as np

import uccl
from device_soak import _issue, describe, job, plan

_DONE = object()


def _run_plan(ctx, comm, seed, n_ops, stream_waits, handoff, lock, tag):
    """Runs plan(seed) on `comm`; the batches' waits and checks go to `handoff` (a queue another
    thread serves) when one is given. Returns the number of operations issued."""
    rank, world = ctx.rank, ctx.world
    ops = plan(seed, world, n_ops)
    members = list(range(world))
    pending = []
    for op in ops:
        pending.append((op,) + _issue(comm, op, rank, members, seed, stream_waits))
        if not op["batch_end"]:
            continue
        if handoff is not None:
            handoff.put(pending)
        else:
            _settle(ctx, pending, seed, lock, tag)
        pending = []
    return len(ops)


def _settle(ctx, pending, seed, lock, tag):
    """Waits for a batch (on the user's stream where it was ordered on one) and checks it."""
    for op, w, place, check in pending:
        if place.stream is not None:
            w.wait(stream=place.stream)
        else:
            w.wait()
    for op, w, place, check in pending:
        for what, got, want in check():
            with lock:
                ctx.check.equal(got, want, f"seed {seed}, {tag}, {describe(op)}: {what}")
        w.wait()


def soak_threads(ctx, seed, n_ops, n_threads, slow_ranks=(), stream_waits=True):
    comm, rank = ctx.comm, ctx.rank
    if rank in slow_ranks:
        uccl.sim.set_copy_speed(3.0, 20.0)  # a slower "vendor" on this rank
    comms = [comm] + [comm.split(0) for _ in range(n_threads - 1)]
    lock = threading.Lock()
    errors = []
    issued = [0] * n_threads
    watching = threading.Event()

    def guarded(fn, what):
        def body():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported with the thread's name below
                import traceback
                with lock:
                    errors.append(f"rank {rank}, {what}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return threading.Thread(target=body, name=what, daemon=True)

    def worker(t):
        tseed = seed * 16 + t
        handoff = queue.Queue() if t % 2 else None
        waiter = None
        if handoff is not None:
            def serve():
                while (batch := handoff.get()) is not _DONE:
                    _settle(ctx, batch, tseed, lock, f"thread {t} (waited by its waiter)")
            waiter = guarded(serve, f"waiter of thread {t}")
            waiter.start()
        try:
            issued[t] = _run_plan(ctx, comms[t], tseed, n_ops, stream_waits, handoff, lock, f"thread {t}")
        finally:
            if handoff is not None:
                handoff.put(_DONE)
                waiter.join()
        if t > 0:
            comms[t].barrier()
            comms[t] = None  # destroyed here, while the other threads' communicators still run

    def watch():
        while not watching.is_set():
            for c in list(comms):
                if c is not None:
                    c.describe()
                    c.estimate("all_reduce", 1 << 20)

    threads = [guarded(lambda t=t: worker(t), f"thread {t}") for t in range(n_threads)]
    watcher = guarded(watch, "watcher")
    watcher.start()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    watching.set()
    watcher.join()
    if errors:
        raise AssertionError("\n".join(errors))
    comm.barrier()
    return {"issued": issued}


def threads_for(seed):
    """How many threads (communicators) each rank runs for a seed: 2 to 4."""
    return int(np.random.default_rng([seed, 2]).integers(2, 5))


def run_seed_threads(seed, n_ops, timeout):
    """Runs seed's job (device_soak.job) with threads_for(seed) threads per rank, from the parent."""
    import os

    from harness import run_world
    world, transport, hosts, env, slow = job(seed)
    stream_waits = env["UCCL_DEVICE_COPIES"] != "engine"  # (the engine's hazard under stream waits is by design)
    res = run_world(world, "thread_soak:soak_threads", (seed, n_ops, threads_for(seed), slow, stream_waits), env=env,
                    host_ids=hosts, transport=transport, timeout=timeout,
                    comm_timeout=float(os.environ.get("SOAK_COMM_TIMEOUT", 60)))
    return world, transport, hosts, env, slow, res
