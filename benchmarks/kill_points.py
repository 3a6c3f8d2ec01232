"""Peer death at random points: N trials of 4 ranks running random collectives, one of them
SIGKILLed at a random operation (between operations, or by a timer in the middle of one).

Every survivor must raise a uccl error that names the dead rank within --max-detect-s, then exit
cleanly (exit code 0) without hanging, and /dev/shm must hold no uccl segment afterwards.
Ranks 0,1 and 2,3 share a "host" (UCCL_HOST_ID), so both shm and tcp peers die. One blocking
all_reduce runs before the random operations (a job's first step): deaths come after every rank
joined, since a rank that never reached rank 0's store cannot tell a dead rank 0 from a late one.

    python benchmarks/kill_points.py --trials 150

With --shrink, every survivor then calls comm.shrink() (cpp/core/agreement.h) and must get the
same communicator of the survivors (ranks renumbered in order) and an exact all_reduce on it,
without a hang. In every third trial the lowest survivor, which coordinates the agreement, is
killed inside it too (UCCL_AGREE_KILL_POINT: after its PREPARE or ACCEPT phase, or after
committing to one rank only). Victims include rank 0, whose process serves the store: the
survivors then agree without it and the coordinator serves their new store (after the first
all_reduce the ranks know each other's agreement addresses even if the store dies next).

    python benchmarks/kill_points.py --shrink --trials 100

With --shrink-exclude the survivors shrink naming the ranks to exclude, as torch's
dist.shrink_group callers do: comm.shrink(exclude=[victim]). Where the coordinator was killed
inside the agreement too, the first call fails with RemoteError naming it (the list missed it)
and the survivor calls again with both; the checks are those of --shrink.

    python benchmarks/kill_points.py --shrink-exclude --trials 60

With --async-batch K the operations are issued asynchronously, K in flight before the rank
waits for them (the engine's queue instead of the blocking calls' inline path), so a death
fails several queued operations at once.

    python benchmarks/kill_points.py --async-batch 4 --trials 150

With --device every rank passes, per operation, host memory or either simulated device's
(uccl.sim.SimArray), over staged pairs (UCCL_STAGED=on, 64 KiB chunks, shared slots on one
host): a death in the middle of a staged transfer. Besides the checks above, each survivor's
bounce buffers must be released once its error came (uccl._core.staged_bounce_bytes() == 0:
pools, hops and shared slots; issue 14 item 8).

    python benchmarks/kill_points.py --device --async-batch 2 --trials 100

Each trial's number fixes its plan (victim, operation, delay, buffers): --first K --trials 1
replays trial K (KP_COMM_TIMEOUT=S shortens the communicators' timeout, so a survivor that
does not notice the death reports where it waited).
"""
import argparse
import multiprocessing as mp
import multiprocessing.connection
import os
import random
import signal
import socket
import sys
import threading
import time

import numpy as np


def rank_main(rank, world, port, seed, victim, kill_op, kill_delay, q, shrink="", agree_kill="", batch=0,
              device=False):
    os.environ["UCCL_HOST_ID"] = "a" if rank < 2 else "b"
    if agree_kill:
        os.environ["UCCL_AGREE_KILL_POINT"] = agree_kill
    if device:
        os.environ.update(UCCL_STAGED="on", UCCL_STAGED_CHUNK_BYTES="64K")
    import uccl
    mine = random.Random(seed * 10 + rank)  # where this rank's buffers live (ranks differ)

    def buf(arr):
        kind = mine.choice(["host", "sim0", "sim1"]) if device else "host"
        return arr if kind == "host" else uccl.sim.SimArray.from_numpy(arr, int(kind[3]))
    store = uccl.TcpStore("127.0.0.1", port, is_server=(rank == 0), timeout=30)
    comm = uccl.Communicator(rank, world, store, timeout=float(os.environ.get("KP_COMM_TIMEOUT", 60)))
    rng = random.Random(seed)  # the same op sequence on every rank
    pending = []  # with --async-batch: operations in flight (the queued path, not the blocking one)
    try:
        # The first step, blocking: every rank has joined. Without it a victim killed at its
        # first operation could take the store (rank 0 serves it) with it before a peer had even
        # connected to it (trial 905): that peer cannot tell a dead rank 0 from a slow one.
        comm.all_reduce(np.ones(world, np.float32))
        for i in range(10000):
            kind = rng.choice(["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"])
            n = rng.choice([1, 7, 1024, 65536, 1 << 20]) * world
            if rank == victim and i == kill_op:
                if kill_delay == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
                q.send(("kill", rank, time.time() + kill_delay))
                threading.Timer(kill_delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            x = buf(np.ones(n, np.float32))
            a = batch > 0
            if kind == "all_reduce":
                w = comm.all_reduce(x, async_op=a)
            elif kind == "all_gather":
                w = comm.all_gather(x[: n // world], async_op=a)
            elif kind == "reduce_scatter":
                w = comm.reduce_scatter(x, async_op=a)
            elif kind == "broadcast":
                w = comm.broadcast(x, root=rng.randrange(world), async_op=a)
            elif kind == "all_to_all":
                w = comm.all_to_all(x, async_op=a)
            else:
                w = comm.barrier(async_op=a)
            if a:
                pending.append(w)
                if len(pending) >= batch:
                    for w in pending:
                        w.wait()
                    pending = []
        q.send(("no-error", rank, time.time(), ""))
    except uccl.UcclError as e:
        # Released with the failure: the thread that fails the connections may still be at it
        # when the error reaches this one, so give it a moment (a leak stays).
        bounce, until = 0, time.time() + 2
        while device and time.time() < until and (bounce := uccl._core.staged_bounce_bytes()):
            time.sleep(0.01)
        q.send(("error", rank, time.time(), f"{type(e).__name__}: {e}", bounce))
        if shrink:
            shrink_and_check(comm, rank, world, q, [victim] if shrink == "exclude" else None)
    sys.exit(0)  # a normal exit: communicator destructors run


def shrink_and_check(comm, rank, world, q, exclude=None):
    """The survivors' new communicator: its size and order, and an exact all_reduce of the old
    ranks (the sum says which ranks are in it, so every survivor checks the same membership).
    exclude: shrink naming these ranks; a RemoteError naming another rank adds it (once per rank)."""
    import uccl
    t0 = time.time()
    try:
        while True:
            try:
                new = comm.shrink() if exclude is None else comm.shrink(exclude=sorted(exclude))
                break
            except uccl.RemoteError as e:
                if exclude is None or e.peer is None or e.peer in exclude:
                    raise
                exclude.append(e.peer)
        x = np.full(4099, 1 << rank, np.float32)  # a bitmask of the members' old ranks
        new.all_reduce(x)
        members = int(x[0])
        exact = bool((x == members).all())
        new.barrier()  # rank 0 of the new communicator serves its store: leave together
        q.send(("shrunk", rank, time.time() - t0, new.rank, new.size, members, exact))
    except uccl.UcclError as e:
        q.send(("shrink-error", rank, time.time() - t0, f"{type(e).__name__}: {e}"))


worst_shrink = [0.0]  # slowest shrink over the trials (seconds)


def trial(k, args):
    rnd = random.Random(1000 + k)
    world, victim = 4, rnd.randrange(4)
    kill_op = rnd.randrange(0, 40)
    kill_delay = rnd.choice([0, 0, rnd.uniform(0.0005, 0.02)])
    coordinator = min(r for r in range(world) if r != victim)  # the lowest survivor
    shrink = "exclude" if args.shrink_exclude else "agree" if args.shrink else ""
    agree_kill = rnd.choice(["prepare", "accept", "commit"]) if shrink and k % 3 == 2 else ""
    dead = {victim} | ({coordinator} if agree_kill else set())
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("fork")
    # One pipe per rank, written without a lock or a feeder thread: a multiprocessing.Queue
    # shares one write lock among its writers, and a rank killed while holding it (its feeder
    # thread was sending "kill") leaves every other rank blocked on it at exit forever.
    pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
    procs = [ctx.Process(target=rank_main, args=(r, world, port, k, victim, kill_op, kill_delay, pipes[r][1],
                                                 shrink, agree_kill if r == coordinator else "", args.async_batch,
                                                 args.device))
             for r in range(world)]
    for p in procs:
        p.start()
    for _, w in pipes:
        w.close()  # the parent reads only: a dead rank's pipe then reads as closed
    readers = [r for r, _ in pipes]
    pending = []

    def next_message(timeout):
        while not pending:
            if not readers:  # every rank has exited
                time.sleep(timeout)
                raise TimeoutError
            ready = mp.connection.wait(readers, timeout)
            if not ready:
                raise TimeoutError
            for conn in ready:
                try:
                    pending.append(conn.recv())
                except (EOFError, OSError):  # the rank exited (or was killed mid-message)
                    readers.remove(conn)
        return pending.pop(0)

    deadline = time.time() + args.max_detect_s + 30 + (150 if shrink else 0)
    killed_at, reports, shrunk = None, {}, {}
    want_shrunk = world - len(dead) if shrink else 0
    while (len(reports) < world - 1 or len(shrunk) < want_shrunk) and time.time() < deadline:
        try:
            msg = next_message(timeout=1)
        except Exception:
            if killed_at is None and not procs[victim].is_alive():
                killed_at = time.time()  # died between ops before reporting (delay 0)
            continue
        if msg[0] == "kill":
            killed_at = msg[2]
        elif msg[0] in ("shrunk", "shrink-error"):
            shrunk[msg[1]] = msg
        else:
            reports[msg[1]] = msg
    if killed_at is None:
        killed_at = time.time()
    for p in procs:
        p.join(max(1, deadline - time.time()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    problems = []
    if hung:
        problems.append(f"ranks {hung} still running (hang)")
    worst = 0.0
    for r in range(world):
        if r == victim:
            continue
        rep = reports.get(r)
        if rep is None:
            problems.append(f"rank {r} reported nothing")
            continue
        if rep[0] != "error":
            problems.append(f"rank {r} finished without an error")
            continue
        took = rep[2] - killed_at
        worst = max(worst, took)
        if f"rank {victim} " not in rep[3]:
            problems.append(f"rank {r}'s error does not name rank {victim}: {rep[3][:200]}")
        if took > args.max_detect_s:
            problems.append(f"rank {r} took {took:.1f}s")
        if len(rep) > 4 and rep[4]:
            problems.append(f"rank {r} still holds {rep[4]} bytes of staging buffers after the failure")
        if procs[r].exitcode not in (0, None) and r not in dead:
            problems.append(f"rank {r} exit code {procs[r].exitcode}")
    if shrink:
        survivors = [r for r in range(world) if r not in dead]
        mask = sum(1 << r for r in survivors)
        for r in survivors:
            rep = shrunk.get(r)
            if rep is None:
                problems.append(f"rank {r} reported no shrink")
            elif rep[0] != "shrunk":
                problems.append(f"rank {r} shrink failed: {rep[3][:300]}")
            else:
                _, _, took, new_rank, new_size, members, exact = rep
                worst_shrink[0] = max(worst_shrink[0], took)
                if (new_rank, new_size, members, exact) != (survivors.index(r), len(survivors), mask, True):
                    problems.append(f"rank {r}: new rank {new_rank} of {new_size}, members {members:b} "
                                    f"(want {survivors.index(r)} of {len(survivors)}, {mask:b}), exact {exact}")
    if problems:  # what every survivor saw: which one named the wrong rank first
        problems += [f"  rank {r}: {rep[3][:300]}" for r, rep in sorted(reports.items()) if rep[0] == "error"]
    # Only this trial's segments ("uccl-<pid>-..."): other jobs on the machine may hold their own.
    pids = {p.pid for p in procs}
    leftovers = [f for f in os.listdir("/dev/shm")
                 if f.startswith("uccl-") and f.split("-")[1].isdigit() and int(f.split("-")[1]) in pids]
    if leftovers:
        problems.append(f"/dev/shm leftovers {leftovers}")
    return victim, kill_op, kill_delay, worst, problems, agree_kill


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--max-detect-s", type=float, default=5.0)
    p.add_argument("--async-batch", type=int, default=0, metavar="K",
                   help="issue operations asynchronously, K in flight before waiting for them (0: blocking calls)")
    p.add_argument("--shrink", action="store_true", help="survivors shrink and all_reduce on the new communicator")
    p.add_argument("--device", action="store_true",
                   help="buffers on the host or a simulated device per operation, over staged pairs")
    p.add_argument("--shrink-exclude", action="store_true",
                   help="as --shrink, naming the ranks to exclude (comm.shrink(exclude=...), torch's shrink_group)")
    p.add_argument("--first", type=int, default=0, help="the first trial's number (each number is one plan)")
    args = p.parse_args()
    failed, worst = 0, 0.0
    for k in range(args.first, args.first + args.trials):
        victim, op, delay, w, problems, agree_kill = trial(k, args)
        worst = max(worst, w)
        status = "ok" if not problems else "FAIL " + "; ".join(problems)
        failed += bool(problems)
        extra = f", coordinator killed at {agree_kill}" if agree_kill else ""
        print(f"trial {k:2d}: rank {victim} killed at op {op:2d} (+{delay * 1000:.1f} ms){extra}: "
              f"slowest survivor {w:.2f}s  {status}", flush=True)
    tail = f"; slowest shrink {worst_shrink[0]:.2f}s" if args.shrink or args.shrink_exclude else ""
    print(f"{args.trials - failed}/{args.trials} trials clean; slowest detection {worst:.2f}s{tail}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
