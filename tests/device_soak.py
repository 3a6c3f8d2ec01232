"""A random soak of the device paths (run inside each rank; tests/test_device_soaks.py and
benchmarks/device_soak.py drive it).

The deterministic sweeps (device_sweeps.py) run each collective alone, each rank keeping one
memory kind for the whole scenario. Jobs do neither: a rank passes a CUDA tensor to one call and
a CPU tensor to the next, several asynchronous operations are in flight at once (DDP's buckets),
and point-to-point batches mix with collectives. Here one seed decides a sequence of operations
that every rank draws alike: the collective, dtype, reduction, root, count (0, 1, odd, a few
chunks...), in place or not, and per rank where its buffers live for that call (host memory,
simulated device 0 or 1); operations go out in batches of one to four asynchronous calls before
any is waited for. Inputs are small integers drawn from (seed, operation, rank), so every rank
computes every rank's input and the exact expected result with numpy (sums, products, max and
min of small integers are exact in every dtype used, whatever the order of reduction).

A failed check names the seed, the operation's index and its whole description, so
`python benchmarks/device_soak.py --seed S` replays it. job(seed) draws the job around the
operations; run_seed(seed) runs it (from the parent process).
"""
import os
import sys
import threading

import numpy as np

import uccl
from uccl.sim import SimArray

DTYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]
COLLS = ["all_reduce", "reduce", "broadcast", "all_gather", "all_gather_v", "reduce_scatter", "reduce_scatter_v",
         "all_to_all", "all_to_all_v", "gather", "scatter", "sendrecv"]
COUNTS = [0, 1, 2, 7, 31, 1023, 4099, 65537, 200003]
KINDS = ["host", "sim0", "sim1"]


def plan(seed, world, n_ops):
    """The operations every rank runs, as dicts; the same list on every rank for one seed."""
    rng = np.random.default_rng([seed, world])
    ops = []
    for i in range(n_ops):
        coll = COLLS[rng.integers(len(COLLS))]
        dtype = DTYPES[rng.integers(len(DTYPES))]
        red = ["sum", "max", "min", "prod"][rng.integers(4)]
        if dtype == "uint8" and red == "prod":
            red = "max"
        count = int(COUNTS[rng.integers(len(COUNTS))])
        if count > 4099 and rng.random() < 0.5:  # the big ones less often (2 cores)
            count = int(rng.integers(2, 5000))
        ops.append({
            "i": i, "coll": coll, "dtype": dtype, "op": red, "count": count,
            "root": int(rng.integers(world)),
            "in_place": bool(rng.random() < 0.4),
            "kinds": [KINDS[rng.integers(len(KINDS))] for _ in range(world)],
            # all_gather_v: each rank's own count; sendrecv: each rank's peer offset
            "counts": [int(rng.integers(0, max(count, 1) + 1)) for _ in range(world)],
            "shift": int(rng.integers(1, world)) if world > 1 else 0,
            "batch_end": bool(rng.random() < 0.45),
            "stream": bool(rng.random() < 0.5),  # device buffers: ordered on a user's stream
            # all_to_all_v: counts[i][j] elements from rank i to rank j
            "matrix": [[int(rng.integers(0, max(count, 1) + 1)) for _ in range(world)] for _ in range(world)],
            # on the even / odd sub-communicator (comm.split) instead of the whole one
            "sub": bool(world > 2 and rng.random() < 0.2),
        })
    if ops:
        ops[-1]["batch_end"] = True
    return ops


def _input(seed, op, rank, n):
    rng = np.random.default_rng([seed, op["i"], rank, 7])
    dt = np.dtype(op["dtype"])
    if op["op"] == "prod":  # products of world factors stay small and exact
        vals = rng.choice(np.array([1, 2, -1] if dt.kind != "u" else [1, 2]), size=n)
    elif dt.kind == "u":
        vals = rng.integers(0, 40, size=n)
    else:
        vals = rng.integers(-20, 21, size=n)
    return vals.astype(dt)


def _reduce(arrs, red):
    f = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}[red]
    out = arrs[0].copy()
    for a in arrs[1:]:
        out = f(out, a).astype(arrs[0].dtype)
    return out


class _Place:
    """Buffers of one kind: numpy, or SimArrays on one simulated device. With a stream (a
    device kind, op["stream"]), inputs are written by copies queued on that stream right
    before the call (not waited for: the operation must be ordered after them), the call is
    ordered on it, and results are read by copies queued there behind Work.wait(stream=)."""

    _streams = threading.local()  # .by_device: device -> uccl.sim.Stream, one per rank and thread

    def __init__(self, kind, use_stream):
        self.kind = kind
        self.device = None if kind == "host" else int(kind[3])
        self.stream = None
        self.keep = []  # host sources of copies still queued
        if self.device is not None and use_stream:
            mine = _Place._streams.__dict__.setdefault("by_device", {})
            if self.device not in mine:
                mine[self.device] = uccl.sim.Stream(self.device)
            self.stream = mine[self.device]

    def put(self, a):
        if self.device is None:
            return a.copy()
        if self.stream is None:
            return SimArray.from_numpy(a, self.device)
        x = SimArray(a.shape, a.dtype, self.device)
        self.keep.append(a)
        return x.copy_from(a, stream=self.stream, sync=False)

    def empty(self, n, dtype):
        # a visible pattern: a receive that never lands shows
        return self.put(np.full(n, 99, dtype))

    def get(self, x):
        return x.numpy(stream=self.stream) if isinstance(x, SimArray) else np.asarray(x)


def _issue(comm, op, me, members, seed, stream_ok):
    """Issues one operation asynchronously on `comm`, whose ranks are the job's ranks `members`
    (me: this one); returns (work, place, check): check() compares (after the work was waited
    for, on place.stream when there is one)."""
    rank, world = members.index(me), len(members)
    n, red, root = op["count"], op["op"], op["root"] % world
    dt = np.dtype(op["dtype"])
    place = _Place(op["kinds"][me], op["stream"] and stream_ok)
    st = {"stream": place.stream} if place.stream is not None else {}
    ins = lambda r, m=n: _input(seed, op, members[r], m)  # noqa: E731
    coll = op["coll"]
    op = dict(op, counts=[op["counts"][g] for g in members],
              matrix=[[op["matrix"][a][b] for b in members] for a in members],
              shift=(op["shift"] % world or 1) if world > 1 else 0)
    if coll == "all_reduce":
        x = place.put(ins(rank))
        out = None if op["in_place"] else place.empty(n, dt)
        w = comm.all_reduce(x, out=out, op=red, async_op=True, **st)
        want = _reduce([ins(r) for r in range(world)], red)
        return w, place, lambda: [("result", place.get(x if out is None else out), want)]
    if coll == "reduce":
        x = place.put(ins(rank))
        out = None if op["in_place"] else place.empty(n, dt)
        w = comm.reduce(x, out=out, op=red, root=root, async_op=True, **st)
        if rank != root:
            return w, place, lambda: [("input kept", place.get(x), ins(rank))] if out is not None else []
        want = _reduce([ins(r) for r in range(world)], red)
        return w, place, lambda: [("result at the root", place.get(x if out is None else out), want)]
    if coll == "broadcast":
        x = place.put(ins(rank))
        w = comm.broadcast(x, root=root, async_op=True, **st)
        return w, place, lambda: [("result", place.get(x), ins(root))]
    if coll == "all_gather":
        if op["in_place"]:  # the input is this rank's block of the output
            fill = lambda k: np.full(k * n, 99, dt)  # noqa: E731
            out = place.put(np.concatenate([fill(rank), ins(rank), fill(world - rank - 1)]))
            x = out[rank * n:(rank + 1) * n]
        else:
            x = place.put(ins(rank))
            out = place.empty(n * world, dt)
        w = comm.all_gather(x, out=out, async_op=True, **st)
        return w, place, lambda: [("result", place.get(out), np.concatenate([ins(r) for r in range(world)]))]
    if coll == "all_gather_v":
        counts = op["counts"]
        x = place.put(ins(rank, counts[rank]))
        out = place.empty(sum(counts), dt)
        w = comm.all_gather_v(x, counts, out=out, async_op=True, **st)
        want = np.concatenate([ins(r, counts[r]) for r in range(world)]) if sum(counts) else np.empty(0, dt)
        return w, place, lambda: [("result", place.get(out), want)]
    if coll == "reduce_scatter":
        x = place.put(ins(rank, n * world))
        out = place.empty(n, dt)
        w = comm.reduce_scatter(x, out=out, op=red, async_op=True, **st)
        want = _reduce([ins(r, n * world) for r in range(world)], red)[rank * n:(rank + 1) * n]
        return w, place, lambda: [("result", place.get(out), want)]
    if coll == "reduce_scatter_v":
        counts = op["counts"]
        total = sum(counts)
        x = place.put(ins(rank, total))
        out = place.empty(counts[rank], dt)
        w = comm.reduce_scatter_v(x, counts, out=out, op=red, async_op=True, **st)
        lo = sum(counts[:rank])
        want = _reduce([ins(r, total) for r in range(world)], red)[lo:lo + counts[rank]]
        return w, place, lambda: [("result", place.get(out), want)]
    if coll == "all_to_all_v":
        m = op["matrix"]  # m[i][j]: elements rank i sends rank j
        sc, rc = m[rank], [m[i][rank] for i in range(world)]
        x = place.put(ins(rank, sum(sc)))
        out = place.empty(sum(rc), dt)
        w = comm.all_to_all_v(x, sc, rc, out=out, async_op=True, **st)
        parts = [ins(i, sum(m[i]))[sum(m[i][:rank]):sum(m[i][:rank]) + m[i][rank]] for i in range(world)]
        want = np.concatenate(parts) if sum(rc) else np.empty(0, dt)
        return w, place, lambda: [("result", place.get(out), want)]
    if coll == "all_to_all":
        x = place.put(ins(rank, n * world))
        out = place.empty(n * world, dt)
        w = comm.all_to_all(x, out=out, async_op=True, **st)
        want = np.concatenate([ins(r, n * world)[rank * n:(rank + 1) * n] for r in range(world)]) if n else \
            np.empty(0, dt)
        return w, place, lambda: [("result", place.get(out), want)]
    if coll == "gather":
        x = place.put(ins(rank))
        out = place.empty(n * world, dt) if rank == root else None
        w = comm.gather(x, out=out, root=root, async_op=True, **st)
        if rank != root:
            return w, place, lambda: [("input kept", place.get(x), ins(rank))]
        want = np.concatenate([ins(r) for r in range(world)])
        return w, place, lambda: [("result at the root", place.get(out), want)]
    if coll == "scatter":
        x = place.put(ins(root, n * world)) if rank == root else None
        out = place.empty(n, dt)
        w = comm.scatter(x, out=out, root=root, count=n, dtype=op["dtype"], async_op=True, **st)
        return w, place, lambda: [("result", place.get(out), ins(root, n * world)[rank * n:(rank + 1) * n])]
    if coll == "sendrecv":  # every rank sends to rank + shift and receives from rank - shift
        to, frm = (rank + op["shift"]) % world, (rank - op["shift"]) % world
        x = place.put(ins(rank))
        out = place.empty(n, dt)
        w = comm.batch_isend_irecv([("send", x, to, op["i"]), ("recv", out, frm, op["i"])], **st)
        return w, place, lambda: [("received", place.get(out), ins(frm)), ("sent buffer kept", place.get(x), ins(rank))]
    raise ValueError(coll)


def describe(op):
    """The fields that matter for the operation's kind (a failure names them)."""
    c = op["coll"]
    keys = ["coll", "dtype", "count"]
    keys += ["op"] if c in ("all_reduce", "reduce", "reduce_scatter") else []
    keys += ["root"] if c in ("reduce", "broadcast", "gather", "scatter") else []
    keys += ["op"] if c == "reduce_scatter_v" else []
    keys += ["in_place"] if c in ("all_reduce", "reduce", "all_gather") else []
    keys += ["counts"] if c in ("all_gather_v", "reduce_scatter_v") else ["shift"] if c == "sendrecv" else []
    keys += ["matrix"] if c == "all_to_all_v" else []
    keys += ["stream", "sub"]
    return "op #%d: " % op["i"] + ", ".join(f"{k}={op.get(k)}" for k in keys + ["kinds"])


def soak(ctx, seed, n_ops, slow_ranks=(), stream_waits=True, ops=None):
    """Runs plan(seed) (or `ops`, a list of plan()'s dicts) on this rank; failed checks go to
    ctx.check (with the seed and the op).
    stream_waits: device operations may be ordered on a user's stream and waited for there
    (Work.wait(stream=)); False where uccl's copies go by the copy engine, whose hazard under
    stream waits is by design (tests/test_device_streams.py::test_a_copy_queued_behind_a_stream_wait)."""
    comm, rank, world = ctx.comm, ctx.rank, ctx.world
    if rank in slow_ranks:
        uccl.sim.set_copy_speed(3.0, 20.0)  # a slower "vendor" on this rank
    ops = plan(seed, world, n_ops) if ops is None else ops
    # op["sub"]: on the communicator of the ranks of this one's parity (comm.split), in flight
    # beside the whole one's operations
    sub = comm.split(rank % 2) if any(op.get("sub") for op in ops) else None
    parity = [r for r in range(world) if r % 2 == rank % 2]
    pending = []
    kinds_seen, on_streams = set(), 0
    trace = os.environ.get("SOAK_TRACE") == "1"  # each operation on stderr as it is issued (a crash's last)
    for op in ops:
        if trace:
            print(f"rank {rank} issues {describe(op)}", file=sys.stderr, flush=True)
        kinds_seen.add(op["kinds"][rank])
        on_sub = op.get("sub") and sub is not None
        w, place, check = _issue(sub if on_sub else comm, op, rank, parity if on_sub else list(range(world)), seed,
                                 stream_waits)
        pending.append((op, w, place, check))
        if not op["batch_end"]:
            continue
        for op2, w2, place2, check2 in pending:
            if place2.stream is not None:
                w2.wait(stream=place2.stream)  # returns at once; the reads below queue behind it
                on_streams += 1
            else:
                w2.wait()
        for op2, w2, place2, check2 in pending:
            for what, got, want in check2():
                ctx.check.equal(got, want, f"seed {seed}, {describe(op2)}: {what}")
            w2.wait()  # its error, if any (a stream wait reports none)
        pending = []
    comm.barrier()
    return {"ops": len(ops), "kinds": sorted(kinds_seen), "on_streams": on_streams, "describe": comm.describe()}


# ---- the job around the operations (run in the parent: benchmarks/device_soak.py, tests) ----

def job(seed):
    """(world, transport, host_ids, env, slow_ranks) for a seed."""
    rng = np.random.default_rng([seed, 1])
    world = int(rng.integers(2, 5))
    transport = ["shm", "tcp", "auto", "hosts"][rng.integers(4)]
    from harness import mixed_hosts
    hosts = mixed_hosts(world, 2) if transport == "hosts" else None
    env = {
        "UCCL_STAGED": ["on", "auto", "off"][rng.integers(3)],
        "UCCL_STAGED_SHARED": ["on", "off"][rng.integers(2)],
        "UCCL_STAGED_CHUNK_BYTES": ["auto", "4K", "64K", "512K"][rng.integers(4)],
        "UCCL_STAGED_BOUNCE_BYTES": ["auto", "64K", "1M"][rng.integers(3)],
        "UCCL_DEVICE_COPIES": ["auto", "engine", "kernel"][rng.integers(3)],
        "UCCL_ALGO": ["auto", "auto", "ring", "direct", "rhd", "twoshot"][rng.integers(6)],
    }
    slow = tuple(r for r in range(world) if rng.random() < 0.3)
    return world, ("auto" if transport == "hosts" else transport), hosts, env, slow


def run_seed(seed, n_ops, timeout):
    """Runs seed's job (in this process: the harness starts the ranks); returns its description
    and the harness's results. A failure raises the harness's pytest failure."""
    from harness import run_world
    world, transport, hosts, env, slow = job(seed)
    stream_waits = env["UCCL_DEVICE_COPIES"] != "engine"  # (the engine's hazard under stream waits is by design)
    res = run_world(world, "device_soak:soak", (seed, n_ops, slow, stream_waits), env=env, host_ids=hosts,
                    transport=transport, timeout=timeout, comm_timeout=float(os.environ.get("SOAK_COMM_TIMEOUT", 60)))
    return world, transport, hosts, env, slow, res
