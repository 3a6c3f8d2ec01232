"""Scenario bodies run inside every rank by tests/harness.py (called as fn(ctx, *args)).

Each body runs many operations on one communicator and records every mismatch in ctx.check
(so one failing scenario lists every failing op / dtype / count / rank at once). Every rank
issues the same operations in the same order, so a failed check never desynchronises the job.
"""
import hashlib
import time

import numpy as np

import uccl
from reference import (BIG, COUNTS, DTYPES, OPS, check_reduction, expected, is_int, make_input, np_dtype,
                       scalar_for)

# (dtype, op) pairs also run at 2^20+3 elements (the large-message paths: ring, striping, CMA).
BIG_ALL_REDUCE = [("float32", "sum"), ("bfloat16", "sum"), ("int32", "max"), ("int64", "prod"),
                  ("float64", "avg"), ("uint8", "premul_sum")]
# `big` in the sweeps: 0 none, 1 one large all_reduce (float32 sum, in and out of place),
# 2 every large case (BIG_ALL_REDUCE and the large cases of the other collectives).
SENTINEL = 77


def _sentinel(dtype, count):
    return np.full(count, SENTINEL, dtype=np_dtype(dtype))


def _scalar(dtype, op):
    return scalar_for(dtype) if op == "premul_sum" else None


def _iota(dtype, count, rank, salt=0):
    """A cheap distinct pattern for data-movement collectives: exact in every dtype."""
    v = (np.arange(count, dtype=np.int64) * 7 + rank * 31 + salt * 101) % 120 - 60
    return v.astype(np_dtype(dtype))


# ---- all_reduce ---------------------------------------------------------------------------------

def all_reduce_sweep(ctx, big=True, ops=OPS, dtypes=DTYPES, counts=COUNTS):
    """Every op x dtype x count, in place and out of place; returns a hash of every result."""
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    h = hashlib.sha256()
    combos = [(d, o, c, ip) for d in dtypes for o in ops for c in counts for ip in (True, False)]
    if big:
        pairs = BIG_ALL_REDUCE if big >= 2 else BIG_ALL_REDUCE[:1]
        combos += [(d, o, BIG, ip) for (d, o) in pairs for ip in ((True, False) if d == "float32" else (True,))]
    for dtype, op, count, inplace in combos:
        mine = make_input(me, dtype, count, op)
        x = mine.copy()
        scalar = _scalar(dtype, op)
        what = f"all_reduce {op} {dtype} count={count} {'in place' if inplace else 'out of place'}"
        if inplace:
            res = comm.all_reduce(x, op=op, scalar=scalar)
            check.true(res is x, f"{what}: did not return the input array")
            got = x
        else:
            out = _sentinel(dtype, count)
            res = comm.all_reduce(x, out=out, op=op, scalar=scalar)
            check.true(res is out, f"{what}: did not return out")
            check.equal(x, mine, f"{what}: input was modified")
            got = out
        check_reduction(check, got, expected(n, dtype, op, count), dtype, op, n, what)
        h.update(f"{what}:".encode())
        h.update(got.tobytes())
    return h.hexdigest()


# ---- reduce / broadcast ---------------------------------------------------------------------------

def reduce_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    combos = []
    for root in range(n):  # every root, a spread of dtypes / ops / counts
        combos += [(root, "float32", "sum", 7), (root, "int32", "max", 1023), (root, "bfloat16", "avg", 1),
                   (root, "int8", "prod", 0), (root, DTYPES[root % 8], OPS[root % 6], 1023)]
    combos += [(n - 1, d, o, 7) for d in DTYPES for o in OPS]  # every dtype x op on one root
    if big:
        combos += [(n // 2, "float32", "sum", BIG), (0, "int64", "min", BIG)]
    for i, (root, dtype, op, count) in enumerate(combos):
        inplace = i % 2 == 0
        mine = make_input(me, dtype, count, op)
        want = expected(n, dtype, op, count)
        x = mine.copy()
        what = f"reduce {op} {dtype} count={count} root={root} {'in place' if inplace else 'out of place'}"
        if inplace:
            res = comm.reduce(x, op=op, root=root, scalar=_scalar(dtype, op))
            if me == root:
                check_reduction(check, x, want, dtype, op, n, what)
            else:
                check.equal(x, mine, f"{what}: non-root input was modified")
        else:
            out = _sentinel(dtype, count)
            res = comm.reduce(x, out=out, op=op, root=root, scalar=_scalar(dtype, op))
            check.equal(x, mine, f"{what}: input was modified")
            if me == root:
                check.true(res is out, f"{what}: did not return out on the root")
                check_reduction(check, out, want, dtype, op, n, what)
            else:
                check.equal(out, _sentinel(dtype, count), f"{what}: non-root output was written")


def broadcast_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    combos = [(root, DTYPES[(root + ci) % 8], c) for root in range(n) for ci, c in enumerate(COUNTS)]
    combos += [(0, d, 7) for d in DTYPES]
    if big:
        combos += [(n - 1, "float32", BIG), (0, "uint8", BIG)]
    for i, (root, dtype, count) in enumerate(combos):
        inplace = i % 2 == 0
        src = _iota(dtype, count, root, i)
        x = src.copy() if me == root else _sentinel(dtype, count)
        what = f"broadcast {dtype} count={count} root={root} {'in place' if inplace else 'out of place'}"
        if inplace:
            res = comm.broadcast(x, root=root)
            check.true(res is x, f"{what}: did not return the buffer")
            check.equal(x, src, what)
        else:
            out = _sentinel(dtype, count)
            keep = x.copy()
            res = comm.broadcast(x, root=root, out=out)
            check.true(res is out, f"{what}: did not return out")
            check.equal(out, src, what)
            check.equal(x, keep, f"{what}: input was modified")


# ---- gathers / scatters -----------------------------------------------------------------------------

def all_gather_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    combos = [(d, c) for d in DTYPES for c in COUNTS]
    if big:
        combos.append(("float32", BIG // n + 1))
    for i, (dtype, count) in enumerate(combos):
        want = np.concatenate([_iota(dtype, count, p, i) for p in range(n)])
        x = _iota(dtype, count, me, i)
        what = f"all_gather {dtype} count={count}"
        got = comm.all_gather(x)
        check.equal(got, want, what)
        if count in (0, 7):  # in place: x is this rank's slot of the output
            out = _sentinel(dtype, count * n)
            out[me * count:(me + 1) * count] = x
            comm.all_gather(out[me * count:(me + 1) * count], out=out)
            check.equal(out, want, f"{what} in place")
    # all_gather_v: uneven counts with zeros, packed and with displacements (gaps stay untouched)
    for j, dtype in enumerate(["float32", "int8", "bfloat16", "int64"]):
        counts = [(p * 3 + j) % 5 for p in range(n)]
        x = _iota(dtype, counts[me], me, j)
        want = np.concatenate([_iota(dtype, counts[p], p, j) for p in range(n)])
        got = comm.all_gather_v(x, counts)
        check.equal(got, want, f"all_gather_v {dtype} counts={counts}")
        # reversed placement with a gap of 2 after every block
        displs, off = [0] * n, 0
        for p in reversed(range(n)):
            displs[p] = off
            off += counts[p] + 2
        out = _sentinel(dtype, off)
        want2 = _sentinel(dtype, off)
        for p in range(n):
            want2[displs[p]:displs[p] + counts[p]] = _iota(dtype, counts[p], p, j)
        comm.all_gather_v(x, counts, out=out, displs=displs)
        check.equal(out, want2, f"all_gather_v {dtype} counts={counts} displs={displs}")
    # all zero counts
    got = comm.all_gather_v(np.zeros(0, np.float32), [0] * n)
    check.equal(got, np.zeros(0, np.float32), "all_gather_v all counts zero")


def gather_scatter_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    for root in range(n):
        for ci, count in enumerate(COUNTS):
            dtype = DTYPES[(root * 3 + ci) % 8]
            x = _iota(dtype, count, me, root)
            got = comm.gather(x, root=root)
            what = f"gather {dtype} count={count} root={root}"
            if me == root:
                check.equal(got, np.concatenate([_iota(dtype, count, p, root) for p in range(n)]), what)
            else:
                check.true(got is None, f"{what}: non-root got {type(got).__name__}, expected None")
            # scatter: root's block p goes to rank p
            blocks = [_iota(dtype, count, p, root + 50) for p in range(n)]
            what = f"scatter {dtype} count={count} root={root}"
            if me == root:
                got = comm.scatter(np.concatenate(blocks), root=root)
            else:
                got = comm.scatter(None, out=_sentinel(dtype, count), root=root)
            check.equal(got, blocks[me], what)
    if big:
        count = BIG // n
        x = _iota("float32", count, me, 9)
        got = comm.gather(x, root=n - 1)
        if me == n - 1:
            check.equal(got, np.concatenate([_iota("float32", count, p, 9) for p in range(n)]), "gather big")


def reduce_scatter_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    combos = [(d, o, 7) for d in DTYPES for o in OPS]
    combos += [(d, o, c) for d in ("float32", "int32") for o in OPS for c in (0, 1, 1023)]
    if big:
        combos += [("float32", "sum", BIG // n), ("bfloat16", "avg", BIG // n)]
    for i, (dtype, op, count) in enumerate(combos):
        total = count * n
        mine = make_input(me, dtype, total, op)
        want = expected(n, dtype, op, total)[me * count:(me + 1) * count]
        what = f"reduce_scatter {op} {dtype} count={count}"
        x = mine.copy()
        got = comm.reduce_scatter(x, op=op, scalar=_scalar(dtype, op))
        check_reduction(check, got, want, dtype, op, n, what)
        check.equal(x, mine, f"{what}: input was modified")
        if i % 3 == 0:  # in place: the output is this rank's block of the input
            x = mine.copy()
            comm.reduce_scatter(x, out=x[me * count:(me + 1) * count], op=op, scalar=_scalar(dtype, op))
            check_reduction(check, x[me * count:(me + 1) * count], want, dtype, op, n, f"{what} in place")
    # reduce_scatter_v: uneven blocks with zeros
    for j, (dtype, op) in enumerate([("float32", "sum"), ("int32", "prod"), ("float16", "max"), ("int8", "avg"),
                                     ("float64", "premul_sum"), ("uint8", "min")]):
        counts = [(p * 5 + j) % 4 for p in range(n)]
        counts[(j + 1) % n] += 1000  # one large block
        total = sum(counts)
        mine = make_input(me, dtype, total, op, seed=j + 1)
        start = sum(counts[:me])
        want = expected(n, dtype, op, total, seed=j + 1)[start:start + counts[me]]
        got = comm.reduce_scatter_v(mine, counts, op=op, scalar=_scalar(dtype, op))
        check_reduction(check, got, want, dtype, op, n, f"reduce_scatter_v {op} {dtype} counts={counts}")


def all_to_all_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check

    def block(src, dst, dtype, count, salt):
        return _iota(dtype, count, src * 17 + dst, salt)

    combos = [(d, c) for d in DTYPES for c in COUNTS]
    if big:
        combos.append(("float32", BIG // (n * n) + 1))
    for i, (dtype, count) in enumerate(combos):
        x = np.concatenate([block(me, p, dtype, count, i) for p in range(n)])
        want = np.concatenate([block(p, me, dtype, count, i) for p in range(n)])
        keep = x.copy()
        got = comm.all_to_all(x)
        check.equal(got, want, f"all_to_all {dtype} count={count}")
        check.equal(x, keep, f"all_to_all {dtype} count={count}: input was modified")
        if count == 7:
            comm.all_to_all(x, out=x)  # in place
            check.equal(x, want, f"all_to_all {dtype} count={count} in place")
    # all_to_all_v: rank i sends (i + 2j) % 4 elements to rank j (zeros included)
    for j, dtype in enumerate(["float32", "int64", "uint8", "float16"]):
        sc = [(me + 2 * p + j) % 4 for p in range(n)]
        rc = [(p + 2 * me + j) % 4 for p in range(n)]
        x = np.concatenate([block(me, p, dtype, sc[p], j) for p in range(n)])
        want = np.concatenate([block(p, me, dtype, rc[p], j) for p in range(n)])
        got = comm.all_to_all_v(x, sc, rc)
        check.equal(got, want, f"all_to_all_v {dtype} send={sc} recv={rc}")
        # explicit displacements: receive blocks in reverse order with a gap of 1
        rd, off = [0] * n, 0
        for p in reversed(range(n)):
            rd[p] = off
            off += rc[p] + 1
        out = _sentinel(dtype, off)
        want2 = _sentinel(dtype, off)
        for p in range(n):
            want2[rd[p]:rd[p] + rc[p]] = block(p, me, dtype, rc[p], j)
        comm.all_to_all_v(x, sc, rc, out=out, recv_displs=rd)
        check.equal(out, want2, f"all_to_all_v {dtype} send={sc} recv={rc} recv_displs={rd}")


# ---- point to point, barrier, async ------------------------------------------------------------------

def p2p_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    nxt, prv = (me + 1) % n, (me - 1) % n
    sizes = [0, 1, 7, 1023] + ([BIG] if big else [])
    # Ring pattern, several tags in a row. Operations complete in issue order, so a ring of
    # blocking sends would deadlock: rank 0 sends first, everyone else receives first (a
    # pipeline around the ring). One rank talks to itself through a batch.
    for i, count in enumerate(sizes):
        for tag in (0, 5, 2 ** 31 + 3):
            x = _iota("float32", count, me, tag % 97 + i)
            y = _sentinel("float32", count)
            what = f"ring send/recv count={count} tag={tag}"
            if n == 1:
                comm.batch_isend_irecv([("send", x, 0, tag), ("recv", y, 0, tag)]).wait()
                got = y
            elif me == 0:
                comm.send(x, nxt, tag=tag)
                got = comm.recv(y, prv, tag=tag)
            else:
                got = comm.recv(y, prv, tag=tag)
                comm.send(x, nxt, tag=tag)
            check.true(got is y, f"{what}: recv did not return the buffer")
            check.equal(y, _iota("float32", count, prv, tag % 97 + i), what)
    # batch_isend_irecv with every peer (self included), mixed dtypes
    for j, dtype in enumerate(["int8", "bfloat16", "float64"]):
        ops, recvs = [], {}
        for p in range(n):
            ops.append(("send", _iota(dtype, 3 + p + me, me * 10 + p, j), p, 11))
            recvs[p] = _sentinel(dtype, 3 + p + me)
            ops.append(("recv", recvs[p], p, 11))
        w = comm.batch_isend_irecv(ops)
        w.wait()
        for p in range(n):
            check.equal(recvs[p], _iota(dtype, 3 + p + me, p * 10 + me, j), f"batch_isend_irecv {dtype} from {p}")
    # two messages to the same peer in one batch match in order
    if n > 1:
        a, b = _sentinel("int32", 4), _sentinel("int32", 4)
        w = comm.batch_isend_irecv([("send", np.full(4, me, np.int32), nxt, 1),
                                    ("send", np.full(4, 100 + me, np.int32), nxt, 1),
                                    ("recv", a, prv, 1), ("recv", b, prv, 1)])
        w.wait()
        check.equal(a, np.full(4, prv, np.int32), "two sends in one batch: first")
        check.equal(b, np.full(4, 100 + prv, np.int32), "two sends in one batch: second")
        # In place (MPI_Sendrecv_replace, nccl-tests' in-place sendrecv): one buffer sent to the
        # next rank and received from the previous in one batch. The send goes out from a copy:
        # from shm's CMA sizes up the peer read the buffer while the receive overwrote it.
        for count in [7, 4099] + ([1 << 18, BIG] if big else []):
            buf = _iota("float32", count, me, 3)
            comm.batch_isend_irecv([("send", buf, nxt, 2), ("recv", buf, prv, 2)]).wait()
            check.equal(buf, _iota("float32", count, prv, 3), f"in-place sendrecv count={count}")
        # Partly overlapping: the tail of the sent range is the head of the received one.
        buf = _iota("int32", 3000, me, 4)
        mine = buf[:2000].copy()
        comm.batch_isend_irecv([("send", buf[:2000], nxt, 3), ("recv", buf[1000:], prv, 3)]).wait()
        check.equal(buf[:1000], mine[:1000], "overlapping sendrecv: the part only sent")
        check.equal(buf[1000:], _iota("int32", 3000, prv, 4)[:2000], "overlapping sendrecv: received")
    # Two receives into overlapping memory (PyTorch's pipelining warms up with both neighbours'
    # messages into one tensor) land in batch order: the later op's bytes win the overlap,
    # whichever message came first. (Through the communicator under device_sweeps' wrapper, which
    # would give every buffer of the batch its own device copy.)
    comm = comm if isinstance(comm, uccl.Communicator) else comm._c
    z = _sentinel("int32", 8)
    a, b = _iota("int32", 6, me, 5), _iota("int32", 4, me, 6)
    comm.batch_isend_irecv([("send", a, nxt, 9), ("send", b, prv, 9), ("recv", z[:6], prv, 9), ("recv", z[4:], nxt, 9)]).wait()
    want = np.concatenate([_iota("int32", 6, prv, 5)[:4], _iota("int32", 4, nxt, 6)])
    check.equal(z, want, "overlapping receives land in batch order")


def barrier_async_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    # barrier: nobody leaves before everybody arrived (a store counter proves it)
    for i in range(3):
        time.sleep(0.02 * ((me + i) % n))
        ctx.store.add(f"barrier{i}", 1)
        res = comm.barrier()
        check.true(res is None, f"barrier returned {res!r}")
        seen = ctx.store.add(f"barrier{i}", 0)
        check.true(seen >= n, f"barrier {i}: left after only {seen} of {n} ranks arrived")
    # async ops: Work handles, results, completion in issue order
    x = np.full(1023, me + 1, np.float32)
    y = _iota("int32", 5, me)
    z = _iota("int64", 9, 0) if me == 0 else _sentinel("int64", 9)
    w1 = comm.all_reduce(x, async_op=True)
    w2 = comm.all_gather(y, async_op=True)
    w3 = comm.broadcast(z, root=0, async_op=True)
    w4 = comm.barrier(async_op=True)
    check.true(all(hasattr(w, "wait") and hasattr(w, "is_completed") for w in (w1, w2, w3, w4)),
               "async_op=True did not return Work objects")
    check.true(w1.seq < w2.seq < w3.seq < w4.seq, f"Work.seq not increasing: {[w.seq for w in (w1, w2, w3, w4)]}")
    check.true(w4.wait() is None, "barrier Work.wait() result")
    check.true(w1.is_completed() and w2.is_completed() and w3.is_completed(),
               "earlier async ops not completed after a later one finished (issue order)")
    got3 = w3.wait()
    got2 = w2.wait()
    got1 = w1.wait()
    check.true(got1 is x, "all_reduce Work.wait() did not return the array")
    check.equal(x, np.full(1023, n * (n + 1) / 2, np.float32), "async all_reduce")
    check.equal(got2, np.concatenate([_iota("int32", 5, p) for p in range(n)]), "async all_gather")
    check.equal(got3, _iota("int64", 9, 0), "async broadcast")
    check.true(w1.result() is x, "Work.result()")
    st = w1.stats()
    check.true(isinstance(st, dict) and "algorithm" in st and "bytes_sent" in st, f"Work.stats() = {st!r}")
    # on_complete runs with None on success
    seen = []
    w = comm.all_reduce(np.ones(3, np.float64), async_op=True)
    w.on_complete(lambda err: seen.append(err))
    w.wait()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    check.true(seen == [None], f"on_complete callback saw {seen!r}")
    # many async all_reduces in flight, waited in reverse
    works, bufs = [], []
    for i in range(20):
        b = np.full(i + 1, me * i, np.int64)
        bufs.append(b)
        works.append(comm.all_reduce(b, async_op=True))
    for w in reversed(works):
        w.wait()
    for i, b in enumerate(bufs):
        check.equal(b, np.full(i + 1, i * n * (n - 1) // 2, np.int64), f"async all_reduce #{i}")


# ---- sub-communicators ------------------------------------------------------------------------------

def groups_sweep(ctx, big=False):
    comm, me, n, check = ctx.comm, ctx.rank, ctx.world, ctx.check
    # split by parity, key reverses the order
    color = me % 2
    sub = comm.split(color, key=-me)
    members = sorted((p for p in range(n) if p % 2 == color), reverse=True)
    check.true(sub is not None, "split returned None for color >= 0")
    if sub is not None:
        check.true(sub.size == len(members) and sub.rank == members.index(me),
                   f"split(color={color}, key={-me}): rank {sub.rank} of {sub.size}, expected "
                   f"{members.index(me)} of {len(members)}")
        got = sub.all_gather(np.array([me], np.int32))
        check.equal(got, np.array(members, np.int32), "all_gather over split(parity, reversed key)")
        x = np.array([me], np.int64)
        sub.all_reduce(x)
        check.equal(x, np.array([sum(members)], np.int64), "all_reduce over split")
    # color -1 -> None; default key keeps the old order
    sub2 = comm.split(-1 if me == 0 else 7)
    if me == 0:
        check.true(sub2 is None, f"split(color=-1) returned {sub2!r}, expected None")
    else:
        check.true(sub2 is not None and sub2.rank == me - 1 and sub2.size == n - 1,
                   f"split(7) without rank 0: got {None if sub2 is None else (sub2.rank, sub2.size)}")
        if sub2 is not None:
            x = np.ones(5, np.float32)
            sub2.all_reduce(x)
            check.equal(x, np.full(5, n - 1, np.float32), "all_reduce over split without rank 0")
    # new_group: every other rank, in reverse order; outsiders get None
    ranks = list(range(n - 1, -1, -2))
    g = comm.new_group(ranks)
    if me in ranks:
        check.true(g is not None and g.rank == ranks.index(me) and g.size == len(ranks),
                   f"new_group({ranks}): got {None if g is None else (g.rank, g.size)}")
        if g is not None:
            got = g.all_gather(np.array([me], np.int32))
            check.equal(got, np.array(ranks, np.int32), f"all_gather over new_group({ranks})")
            b = np.array([me * 1.5], np.float64) if g.rank == 0 else np.zeros(1)
            g.broadcast(b, root=0)
            check.equal(b, np.array([ranks[0] * 1.5]), "broadcast over new_group")
    else:
        check.true(g is None, f"new_group({ranks}) returned a communicator to non-member {me}")
    # the parent still works after creating children
    x = np.full(3, me, np.int32)
    comm.all_reduce(x, op="max")
    check.equal(x, np.full(3, n - 1, np.int32), "parent all_reduce after split/new_group")


PARTS = {
    "reduce": reduce_sweep,
    "broadcast": broadcast_sweep,
    "all_gather": all_gather_sweep,
    "gather_scatter": gather_scatter_sweep,
    "reduce_scatter": reduce_scatter_sweep,
    "all_to_all": all_to_all_sweep,
    "p2p": p2p_sweep,
    "barrier_async": barrier_async_sweep,
    "groups": groups_sweep,
}


def describe_transports(comm):
    """{peer: transport} parsed from comm.describe() ("  peer 3: tcp (...)")."""
    out = {}
    for line in comm.describe().splitlines():
        line = line.strip()
        if line.startswith("peer "):
            head, _, rest = line.partition(":")
            out[int(head.split()[1])] = rest.split()[0] if rest.split() else ""
    return out


def scenario(ctx, parts, big, all_reduce=True):
    """The body of one scenario: the all_reduce sweep (hashed), then the other parts."""
    times = {}
    digest = None
    if all_reduce:
        t = time.monotonic()
        digest = all_reduce_sweep(ctx, big=big)
        times["all_reduce"] = time.monotonic() - t
    for name in parts:
        t = time.monotonic()
        PARTS[name](ctx, big=big >= 2)
        times[name] = time.monotonic() - t
    # which algorithm ran for a small and a large all_reduce (Work.stats())
    algos = {}
    for count in (16, 1 << 18):
        w = ctx.comm.all_reduce(np.ones(count, np.float32), async_op=True)
        w.wait()
        algos[count] = w.stats()["algorithm"]
    return {"hash": digest, "transports": describe_transports(ctx.comm), "times": times, "checks": ctx.check.count,
            "algos": algos}
