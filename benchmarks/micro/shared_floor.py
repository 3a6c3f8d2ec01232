"""A floor for an in-place all_reduce of ranks on one host, without uccl: the least data movement
any scheme can make, with every rank's buffer in shared memory (no system calls, no page pinning,
no bounce buffers: a scheme uccl cannot use, since a caller's buffer is private memory).

    python benchmarks/micro/shared_floor.py [--ranks 4] [--mib 64] [--iters 6]

Phase 1: each rank sums its 1/n of the buffer from all n buffers, 1 MiB at a time so its own
piece stays in cache (reads the whole buffer once, writes 1/n). Phase 2: each rank copies the
other (n-1)/n from their owners (reads and writes (n-1)/n). A barrier after each phase. Prints
the slowest rank's best iteration, total and phase 1 (RESULTS.md, "Ray ... 64 MiB floor").
"""
import argparse
import time
from multiprocessing import Barrier, Process, Queue, shared_memory

import numpy as np

PIECE = 1 << 18  # float32 elements per summed piece (1 MiB)


def rank(r, world, n, names, iters, bar, q):
    shms = [shared_memory.SharedMemory(name=name) for name in names]
    bufs = [np.ndarray((n,), np.float32, buffer=s.buf) for s in shms]
    part = n // world
    best = (float("inf"), float("inf"))
    for it in range(iters):
        bar.wait()
        t0 = time.perf_counter()
        me = bufs[r]
        for off in range(r * part, (r + 1) * part, PIECE):
            acc = me[off:min(off + PIECE, (r + 1) * part)]
            for k in range(1, world):
                np.add(acc, bufs[(r + k) % world][off:off + acc.shape[0]], out=acc)
        bar.wait()
        t1 = time.perf_counter()
        for k in range(1, world):
            o = (r + k) % world
            np.copyto(me[o * part:(o + 1) * part], bufs[o][o * part:(o + 1) * part])
        bar.wait()
        if it > 0:  # the first iteration touches the pages
            best = min(best, (time.perf_counter() - t0, t1 - t0))
    q.put(best)
    del bufs, me, acc
    for s in shms:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--iters", type=int, default=6)
    a = ap.parse_args()
    n = (a.mib << 20) // 4
    shms = [shared_memory.SharedMemory(create=True, size=n * 4) for _ in range(a.ranks)]
    try:
        for s in shms:
            np.ndarray((n,), np.float32, buffer=s.buf)[:] = 1
        bar, q = Barrier(a.ranks), Queue()
        procs = [Process(target=rank, args=(r, a.ranks, n, [s.name for s in shms], a.iters, bar, q))
                 for r in range(a.ranks)]
        for p in procs:
            p.start()
        res = [q.get() for _ in procs]
        for p in procs:
            p.join()
        total, phase1 = max(x[0] for x in res), max(x[1] for x in res)
        print(f"{a.ranks} ranks, {a.mib} MiB in place, shared buffers: {total * 1e3:.1f} ms "
              f"(phase 1 {phase1 * 1e3:.1f} ms, phase 2 {(total - phase1) * 1e3:.1f} ms)")
    finally:
        for s in shms:
            s.close()
            s.unlink()


if __name__ == "__main__":
    main()
