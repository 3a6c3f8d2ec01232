"""Soak test: thousands of mixed collectives on several communicators at once, checked exactly.

Every rank draws the same random sequence of operations (shared seed), issues them
asynchronously on two or three communicators (the world, a split, and a reversed new_group) and
checks each result exactly against numpy (integer data, and floats whose sums are exact). RSS is
sampled along the way: after warm-up it must stay flat (growth under --max-growth-mb).

    python benchmarks/soak.py --ranks 4 --ops 3000 --max-mb 64
"""
import argparse
import multiprocessing as mp
import os
import resource
import socket
import sys
import time
import traceback

import numpy as np

SIZES_SMALL = [0, 1, 7, 1023, 4096, 65537]


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def make(rng, rank, n, dtype):
    # Values small enough that every sum/product below is exact in every dtype used.
    return (rng.integers(-3, 4, n) + rank).astype(dtype)


def run_rank(rank, size, port, args, q):
    try:
        import uccl
        store = uccl.TcpStore("127.0.0.1", port, is_server=(rank == 0))
        world = uccl.Communicator(rank, size, store, timeout=120)
        half = world.split(rank % 2)
        rev = world.new_group(list(reversed(range(size))))
        comms = [world, half, rev]
        rng = np.random.default_rng(args.seed)  # same sequence on every rank
        big_sizes = [1 << 20, 4 << 20, args.max_mb << 18]  # elements of 4 bytes: up to max_mb MiB
        pending, samples, checked = [], [], 0
        # Warm-up at the largest size on every communicator: scratch arenas and transport
        # buffers grow to their high-water mark here, so later growth would be a leak.
        top = big_sizes[-1] - big_sizes[-1] % (size * 2)
        for c in comms:
            x = np.ones(top, np.float64)
            c.all_reduce(x), c.all_gather(x), c.reduce_scatter(x), c.all_to_all(x)
        del x
        t0 = time.time()
        for i in range(args.ops):
            c = comms[int(rng.integers(0, len(comms)))]
            kind = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"][int(rng.integers(0, 5))]
            n = int(rng.choice(SIZES_SMALL)) if rng.random() < 0.97 else int(rng.choice(big_sizes))
            dtype = [np.int32, np.int64, np.float32, np.float64][int(rng.integers(0, 4))]
            data_rng = np.random.default_rng(args.seed * 100003 + i)  # inputs reproducible per op
            inputs = [make(np.random.default_rng(args.seed * 100003 + i * 31 + r), r, n, dtype) for r in range(c.size)]
            mine = inputs[c.rank].copy()
            if kind == "all_reduce":
                w = c.all_reduce(mine, async_op=True)
                expect = np.sum(inputs, axis=0, dtype=dtype) if n else mine
            elif kind == "all_gather":
                w = c.all_gather(mine, async_op=True)
                expect = np.concatenate(inputs)
            elif kind == "reduce_scatter":
                m = n - n % c.size
                full = [x[:m] for x in inputs]
                w = c.reduce_scatter(mine[:m].copy(), async_op=True)
                blk = m // c.size
                expect = np.sum(full, axis=0, dtype=dtype)[c.rank * blk:(c.rank + 1) * blk] if m else np.empty(0, dtype)
            elif kind == "broadcast":
                root = int(data_rng.integers(0, c.size))
                w = c.broadcast(mine, root=root, async_op=True)
                expect = inputs[root]
            else:
                m = n - n % c.size
                blk = m // c.size
                w = c.all_to_all(mine[:m].copy(), async_op=True)
                expect = np.concatenate([inputs[r][c.rank * blk:(c.rank + 1) * blk] for r in range(c.size)]) \
                    if m else np.empty(0, dtype)
            pending.append((i, kind, w, expect))
            if len(pending) >= 8 or i == args.ops - 1:
                for j, k, w, e in pending:
                    got = w.wait()
                    if not np.array_equal(np.asarray(got).reshape(-1), np.asarray(e).reshape(-1)):
                        raise AssertionError(f"op {j} {k}: wrong result")
                    checked += 1
                pending = []
                samples.append(rss_mb())  # only between batches: no op buffers alive
        world.barrier()
        q.put((rank, None, checked, samples, time.time() - t0))
    except Exception:
        q.put((rank, traceback.format_exc(), 0, [], 0))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--max-mb", type=int, default=64)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-growth-mb", type=float, default=32.0)
    args = p.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run_rank, args=(r, args.ranks, port, args, q)) for r in range(args.ranks)]
    for pr in procs:
        pr.start()
    results = []
    for _ in procs:
        results.append(q.get(timeout=3600))
    for pr in procs:
        pr.join(60)
    ok = True
    for rank, err, checked, samples, secs in sorted(results, key=lambda r: r[0]):
        if err:
            print(f"rank {rank} FAILED:\n{err}")
            ok = False
            continue
        # Median of the second quarter vs the last quarter: robust to one sample that caught
        # a large temporary, sensitive to a steady leak.
        q1 = sorted(samples[len(samples) // 4: len(samples) // 2] or samples)
        q4 = sorted(samples[3 * len(samples) // 4:] or samples)
        growth = q4[len(q4) // 2] - q1[len(q1) // 2]
        print(f"rank {rank}: {checked} ops exact in {secs:.1f}s; RSS {min(samples):.0f}-{max(samples):.0f} MiB, "
              f"median growth {growth:+.1f} MiB")
        if growth > args.max_growth_mb:
            print(f"rank {rank}: memory grew by {growth:.1f} MiB > {args.max_growth_mb}")
            ok = False
    print("soak:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
