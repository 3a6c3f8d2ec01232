"""A local multi-rank demo of uccl: N ranks on this host run a few collectives over shared
memory and over TCP, check the results, and print an nccl-tests style bus-bandwidth table.

    python examples/demo.py                     # 4 ranks, shm (auto) and tcp
    python examples/demo.py --ranks 8 --transports tcp --max-bytes 64M

busbw follows nccl-tests: algbw = bytes / time, times 2(n-1)/n for all_reduce, (n-1)/n for
all_gather and reduce_scatter, 1 for broadcast; it compares with the link's bandwidth.
"""
import argparse
import multiprocessing as mp
import os
import socket
import sys
import time

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]


def parse_size(text):
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def busbw_factor(coll, n):
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0}[coll]


def run_one(comm, coll, nbytes, iters, np):
    """Times `iters` back-to-back operations of nbytes (the per-rank buffer nccl-tests reports)."""
    n, r = comm.size, comm.rank
    count = max(n, nbytes // 4 // n * n)
    x = np.full(count, r + 1, np.float32)
    if coll == "all_reduce":
        def op():
            comm.all_reduce(x)
    elif coll == "all_gather":
        part = x[: count // n]
        out = np.empty(count, np.float32)

        def op():
            comm.all_gather(part, out=out)
    elif coll == "reduce_scatter":
        out = np.empty(count // n, np.float32)

        def op():
            comm.reduce_scatter(x, out=out)
    else:
        def op():
            comm.broadcast(x, root=0)
    op()  # warm-up (connections are made on first use)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        op()
    comm.barrier()
    elapsed = (time.perf_counter() - t0) / iters
    # correctness after the timed loop
    x[:] = r + 1
    if coll == "all_reduce":
        comm.all_reduce(x)
        ok = bool((x == n * (n + 1) / 2).all())
    elif coll == "all_gather":
        comm.all_gather(x[: count // n], out=out)
        ok = bool((out.reshape(n, -1) == np.arange(1, n + 1, dtype=np.float32)[:, None]).all())
    elif coll == "reduce_scatter":
        comm.reduce_scatter(x, out=out)
        ok = bool((out == n * (n + 1) / 2).all())
    else:
        comm.broadcast(x, root=0)
        ok = bool((x == 1).all())
    return count * 4, elapsed, ok


def rank_main(rank, n, port, transport, sizes, colls, q):
    os.environ.setdefault("UCCL_DEBUG", "WARN")
    import numpy as np

    import uccl
    store = uccl.TcpStore("127.0.0.1", port, is_server=(rank == 0), timeout=60)
    comm = uccl.Communicator(rank, n, store, transport=transport, timeout=120)
    rows = []
    for coll in colls:
        for nbytes in sizes:
            iters = max(3, min(200, int(64e6 / max(nbytes, 1))))
            size, t, ok = run_one(comm, coll, nbytes, iters, np)
            times = comm.all_gather(np.array([t], np.float64))
            oks = comm.all_gather(np.array([ok], np.uint8))
            rows.append((coll, size, float(times.mean()), bool(oks.all())))
    if rank == 0:
        q.put((transport, comm.describe(), rows))
    comm.barrier()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--transports", default="auto,tcp", help="comma-separated: auto (shm on one host), tcp, shm")
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="16M")
    p.add_argument("--factor", type=int, default=16)
    p.add_argument("--collectives", default=",".join(COLLECTIVES))
    a = p.parse_args(argv)
    sizes, s = [], parse_size(a.min_bytes)
    while s <= parse_size(a.max_bytes):
        sizes.append(s)
        s *= a.factor
    colls = a.collectives.split(",")
    ctx = mp.get_context("spawn")
    failed = False
    for transport in a.transports.split(","):
        q = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=rank_main, args=(r, a.ranks, port, transport, sizes, colls, q))
                 for r in range(a.ranks)]
        for pr in procs:
            pr.start()
        try:
            tr, describe, rows = q.get(timeout=300)
        finally:
            for pr in procs:
                pr.join(timeout=30)
                if pr.is_alive():
                    pr.kill()
        peers = ", ".join(sorted({line.split(":", 1)[1].split()[0] for line in describe.splitlines()
                                  if line.strip().startswith("peer ")}))
        print(f"\n# {a.ranks} ranks, transport={tr} (peers use: {peers or 'none'})")
        print(f"# {'collective':>15s} {'size(B)':>10s} {'time(us)':>10s} {'algbw(GB/s)':>12s} {'busbw(GB/s)':>12s}"
              f" {'check':>6s}")
        for coll, size, t, ok in rows:
            algbw = size / t / 1e9
            print(f"  {coll:>15s} {size:>10d} {t * 1e6:>10.1f} {algbw:>12.3f} "
                  f"{algbw * busbw_factor(coll, a.ranks):>12.3f} {'ok' if ok else 'WRONG':>6s}")
            failed |= not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
