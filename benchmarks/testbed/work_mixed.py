"""Rank program: random collectives and p2p, every result checked exactly, on several communicators.

    work_mixed.py OPS MAX_BYTES SEED [COMMS]

Every rank draws the same sequence (shared SEED) of OPS operations - all_reduce, all_gather,
reduce_scatter, broadcast, all_to_all, a send/recv ring - with counts up to MAX_BYTES / 4 int32
(half of them at most 1024), spread over COMMS communicators (the world, then splits in halves
and reversed groups: each one connects anew, so a run with COMMS > 1 makes many connections).
Integer data: every result must be exact. Prints ``RESULT {"rank", "bad", "nbad", "s"}``.
Used by tests/topo/test_lossy_links.py (a network that drops packets).
"""
import json
import sys
import time

import numpy as np

import uccl

KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "ring"]


def one_op(w, kind, cnt, root):
    """Runs one operation on communicator w; returns whether its result is exact."""
    r, n = w.rank, w.size
    base = (np.arange(cnt, dtype=np.int64) % 7).astype(np.int32)
    if kind == "all_reduce":
        x = base + r
        w.all_reduce(x)
        return np.array_equal(x, base * n + n * (n - 1) // 2)
    if kind == "all_gather":
        out = np.empty(cnt * n, np.int32)
        w.all_gather(base + r, out)
        return all(np.array_equal(out[k * cnt:(k + 1) * cnt], base + k) for k in range(n))
    if kind == "reduce_scatter":
        c = cnt // n
        full = (np.arange(c * n) % 5).astype(np.int32)
        out = np.empty(c, np.int32)
        w.reduce_scatter(full + r, out)
        return np.array_equal(out, full[r * c:(r + 1) * c] * n + n * (n - 1) // 2)
    if kind == "broadcast":
        x = base + 100 if r == root % n else np.zeros(cnt, np.int32)
        w.broadcast(x, root % n)
        return np.array_equal(x, base + 100)
    if kind == "all_to_all":
        c = cnt // n
        out = np.empty(c * n, np.int32)
        w.all_to_all(np.repeat(np.arange(n, dtype=np.int32) + 10 * r, c), out)
        return np.array_equal(out, np.repeat(np.arange(n, dtype=np.int32) * 10 + r, c))
    y = np.empty(cnt, np.int32)
    w.batch_isend_irecv([("send", base + r, (r + 1) % n), ("recv", y, (r - 1) % n)]).wait()
    return np.array_equal(y, base + (r - 1) % n)


def main():
    nops, max_bytes, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    ncomms = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    world = uccl.init()
    comms = [world]
    while len(comms) < ncomms:
        k = len(comms)
        if k % 2:
            comms.append(world.split(world.rank % 2))
        else:
            comms.append(world.new_group(list(reversed(range(world.size)))))
    rng = np.random.default_rng(seed)
    bad = []
    t0 = time.time()
    for i in range(nops):
        kind = str(rng.choice(KINDS))
        small = rng.random() < 0.5
        cnt = int(rng.integers(0, 1025)) if small else int(rng.integers(0, max_bytes // 4 + 1))
        root = int(rng.integers(0, world.size))
        w = comms[i % len(comms)]
        if not one_op(w, kind, cnt, root):
            bad.append([i, kind, cnt])
    print("RESULT " + json.dumps({"rank": world.rank, "bad": bad[:10], "nbad": len(bad), "s": time.time() - t0}),
          flush=True)


if __name__ == "__main__":
    main()
